"""The embedding model and its Redis-backed cache, against the real model and the real Redis."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np
import pytest
import redis
from structlog.testing import capture_logs

from ingest.embedding import (
    CachedEmbedder,
    Embedder,
    EmbeddingCache,
    SentenceTransformerEmbedder,
)
from ragstream.settings import Settings
from tests.integration.ingestkit import Counting

TEXTS = [
    "How do I read a file line by line in Python?",
    "Reading a text file one line at a time with a for loop.",
    "The cat slept on the warm windowsill all afternoon.",
    "PostgreSQL supports window functions such as row_number().",
]


@pytest.fixture
def redis_client(settings: Settings) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(settings.redis.url)
    yield client
    client.close()


@pytest.fixture
def make_cache(
    redis_client: redis.Redis, unique_name: Callable[[str], str]
) -> Iterator[Callable[[], EmbeddingCache]]:
    """Caches on the real Redis under a key prefix of this test; each has its own LRU."""
    prefix = unique_name("emb") + ":"
    yield lambda: EmbeddingCache(redis_client, key_prefix=prefix, ttl_s=600)
    keys = list(redis_client.scan_iter(match=prefix + "*"))
    if keys:
        redis_client.delete(*keys)


def test_vectors_are_normalised_float32_rows(model: SentenceTransformerEmbedder) -> None:
    vectors = model.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) == (len(TEXTS), model.dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert isinstance(model, Embedder)
    assert model.model_id.startswith("all-MiniLM-L6-v2@")
    assert model.max_seq_length == 256


def test_similar_texts_are_closer_than_unrelated_ones(model: SentenceTransformerEmbedder) -> None:
    v = model.embed(TEXTS)
    similar, unrelated, other = float(v[0] @ v[1]), float(v[0] @ v[2]), float(v[0] @ v[3])
    assert similar > 0.5
    assert similar > unrelated + 0.3
    assert similar > other + 0.3


def test_no_texts_give_an_empty_matrix(model: SentenceTransformerEmbedder) -> None:
    assert model.embed([]).shape == (0, 384)
    assert model.embed([]).dtype == np.float32


def test_rows_do_not_depend_on_batching(model: SentenceTransformerEmbedder) -> None:
    one_by_one = np.vstack([model.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(model.embed(TEXTS), one_by_one, atol=1e-5)


def test_model_id_is_stable_and_warm_up_is_idempotent() -> None:
    a, b = SentenceTransformerEmbedder(), SentenceTransformerEmbedder()
    assert a.model_id == b.model_id  # without loading either model
    threads = [threading.Thread(target=a.warm_up) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loaded = a._model
    a.warm_up()
    assert a._model is loaded is not None


def test_second_pass_sends_nothing_to_the_model(
    model: SentenceTransformerEmbedder, make_cache: Callable[[], EmbeddingCache]
) -> None:
    counting = Counting(model)
    cached = CachedEmbedder(counting, make_cache())
    first = cached.embed(TEXTS)
    assert counting.sent == len(TEXTS)
    second = cached.embed(TEXTS)
    assert counting.sent == len(TEXTS)  # nothing new
    np.testing.assert_array_equal(first, second)
    np.testing.assert_allclose(first, model.embed(TEXTS), atol=1e-6)
    assert (cached.hits, cached.misses, cached.embedded) == (len(TEXTS), len(TEXTS), len(TEXTS))
    assert second.dtype == np.float32
    assert second.shape == (len(TEXTS), 384)


def test_duplicates_in_one_batch_are_embedded_once(
    model: SentenceTransformerEmbedder, make_cache: Callable[[], EmbeddingCache]
) -> None:
    counting = Counting(model)
    cached = CachedEmbedder(counting, make_cache())
    texts = [TEXTS[0], TEXTS[1], TEXTS[0], TEXTS[0], TEXTS[1]]
    vectors = cached.embed(texts)
    assert counting.calls == [[TEXTS[0], TEXTS[1]]]  # one call, distinct texts in order
    assert vectors.shape == (5, 384)
    np.testing.assert_array_equal(vectors[0], vectors[2])
    np.testing.assert_array_equal(vectors[1], vectors[4])
    assert cached.requested == 5
    assert cached.embedded == 2


def test_only_misses_go_to_the_model_in_one_call(
    model: SentenceTransformerEmbedder, make_cache: Callable[[], EmbeddingCache]
) -> None:
    counting = Counting(model)
    cached = CachedEmbedder(counting, make_cache())
    cached.embed(TEXTS[:2])
    mixed = cached.embed([TEXTS[3], TEXTS[0], TEXTS[2], TEXTS[1]])
    assert counting.calls == [TEXTS[:2], [TEXTS[3], TEXTS[2]]]
    np.testing.assert_allclose(
        mixed, model.embed([TEXTS[3], TEXTS[0], TEXTS[2], TEXTS[1]]), atol=1e-6
    )


def test_a_new_process_hits_through_redis(
    model: SentenceTransformerEmbedder, make_cache: Callable[[], EmbeddingCache]
) -> None:
    first = CachedEmbedder(Counting(model), make_cache())
    expected = first.embed(TEXTS)
    counting = Counting(model)
    fresh = CachedEmbedder(counting, make_cache())  # empty LRU, same Redis
    np.testing.assert_array_equal(fresh.embed(TEXTS), expected)
    assert counting.calls == []
    assert fresh.hits == len(TEXTS)


def test_another_model_id_does_not_share_vectors(
    model: SentenceTransformerEmbedder, make_cache: Callable[[], EmbeddingCache]
) -> None:
    class Renamed(Counting):
        @property
        def model_id(self) -> str:
            return "another-model@0"

    CachedEmbedder(Counting(model), make_cache()).embed(TEXTS)
    renamed = Renamed(model)
    CachedEmbedder(renamed, make_cache()).embed(TEXTS)
    assert renamed.sent == len(TEXTS)


def test_redis_down_still_returns_correct_vectors(model: SentenceTransformerEmbedder) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    counting = Counting(model)
    cached = CachedEmbedder(counting, EmbeddingCache(dead, lru_size=0))
    with capture_logs() as logs:
        vectors = cached.embed(TEXTS)
    assert [e["event"] for e in logs if e["log_level"] == "warning"] == [
        "embedding_cache_redis_error"  # the read failed; the write skips Redis for a while
    ]
    np.testing.assert_allclose(vectors, model.embed(TEXTS), atol=1e-6)
    again = cached.embed(TEXTS)  # no LRU and no Redis: embedded again, still correct
    np.testing.assert_allclose(again, vectors, atol=1e-6)
    assert counting.sent == 2 * len(TEXTS)
    dead.close()


def test_the_lru_serves_while_redis_is_down(model: SentenceTransformerEmbedder) -> None:
    dead = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    counting = Counting(model)
    cached = CachedEmbedder(counting, EmbeddingCache(dead, lru_size=100))
    cached.embed(TEXTS)
    cached.embed(TEXTS)
    assert counting.sent == len(TEXTS)
    dead.close()


def test_the_lru_is_bounded() -> None:
    cache = EmbeddingCache(None, lru_size=3)
    cache.set_many({str(i): np.full(4, i, dtype=np.float32) for i in range(5)})
    found = cache.get_many([str(i) for i in range(5)])
    assert [v is None for v in found] == [True, True, False, False, False]


def test_vectors_are_stored_as_raw_float32_without_expiry_when_ttl_is_zero(
    redis_client: redis.Redis, unique_name: Callable[[str], str]
) -> None:
    prefix = unique_name("emb") + ":"
    cache = EmbeddingCache(redis_client, key_prefix=prefix, ttl_s=0)
    vec = np.linspace(-1, 1, 384, dtype=np.float32)
    key = EmbeddingCache.key("m@1", "text")
    cache.set_many({key: vec})
    raw = redis_client.get(prefix + key)
    assert isinstance(raw, bytes)
    assert raw == vec.astype("<f4").tobytes()
    assert redis_client.ttl(prefix + key) == -1
    redis_client.delete(prefix + key)


def test_cache_from_settings(settings: Settings) -> None:
    cache = EmbeddingCache.from_settings(settings)
    assert cache.get_many(["no-such-key"]) == [None]
