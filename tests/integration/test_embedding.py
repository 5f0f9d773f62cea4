"""The embedding model and its Redis-backed cache, against the real model and the real Redis.

``model`` is the configured one (``settings.embedding``: the ONNX default); the tests of one
backend's own behaviour take ``onnx_model`` or ``torch_model`` (skipped without the torch extra).
"""

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
from ingest.factory import onnx_model_dir
from ingest.onnx_embedding import ONNX_MODELS, OnnxEmbedder
from ragstream.settings import DEFAULT_ONNX_MODEL, Settings
from tests.integration.ingestkit import Counting

TEXTS = [
    "How do I read a file line by line in Python?",
    "Reading a text file one line at a time with a for loop.",
    "The cat slept on the warm windowsill all afternoon.",
    "PostgreSQL supports window functions such as row_number().",
]


@pytest.fixture(scope="module")
def torch_model() -> SentenceTransformerEmbedder:
    """The packaged all-MiniLM-L6-v2 on torch (the torch extra), loaded."""
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    m = SentenceTransformerEmbedder()
    m.warm_up()
    return m


def _onnx_default() -> OnnxEmbedder:
    settings = Settings(embedding={"backend": "onnx", "onnx_model": DEFAULT_ONNX_MODEL})
    return OnnxEmbedder(onnx_model_dir(settings), ONNX_MODELS[DEFAULT_ONNX_MODEL], num_threads=1)


@pytest.fixture(scope="module")
def onnx_model() -> OnnxEmbedder:
    """The default ONNX model (``make install`` installs it), loaded."""
    m = _onnx_default()
    m.warm_up()
    return m


def _expected_id_and_length() -> tuple[str, int]:
    """The configured model's id prefix and input length in tokens."""
    emb = Settings().embedding
    if emb.backend == "onnx":
        return f"{emb.onnx_model}@", ONNX_MODELS[emb.onnx_model].max_seq_length
    return "all-MiniLM-L6-v2@", 256


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


def test_vectors_are_normalised_float32_rows(model: Embedder) -> None:
    vectors = model.embed(TEXTS)
    assert vectors.shape == (len(TEXTS), 384) == (len(TEXTS), model.dim)
    assert vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert isinstance(model, Embedder)
    id_prefix, max_seq_length = _expected_id_and_length()
    assert model.model_id.startswith(id_prefix)
    assert model.max_seq_length == max_seq_length  # type: ignore[attr-defined]


def test_the_default_backend_is_onnx_with_the_default_model(model: Embedder) -> None:
    """Unless the environment says otherwise (RAGSTREAM_EMBEDDING__*), the pools and these
    tests run the ONNX default model: no torch needed."""
    emb = Settings().embedding
    if (emb.backend, emb.onnx_model, emb.onnx_dir) != ("onnx", DEFAULT_ONNX_MODEL, None):
        pytest.skip(f"settings.embedding is configured: {emb.backend} {emb.onnx_model}")
    assert isinstance(model, OnnxEmbedder)
    assert model.model_id.startswith(f"{DEFAULT_ONNX_MODEL}@")
    assert model.model_id == _onnx_default().model_id


def test_similar_texts_are_closer_than_unrelated_ones(model: Embedder) -> None:
    v = model.embed(TEXTS)
    similar, unrelated, other = float(v[0] @ v[1]), float(v[0] @ v[2]), float(v[0] @ v[3])
    assert similar > 0.5
    # 0.2, not 0.3: bge-small's cosines of unrelated texts sit around 0.5-0.6 (its model card:
    # the similarity distribution is about [0.6, 1]); MiniLM's near 0 (margin 0.6-0.8 there).
    assert similar > unrelated + 0.2
    assert similar > other + 0.2


def test_no_texts_give_an_empty_matrix(model: Embedder) -> None:
    assert model.embed([]).shape == (0, 384)
    assert model.embed([]).dtype == np.float32


def test_rows_do_not_depend_on_batching(torch_model: SentenceTransformerEmbedder) -> None:
    one_by_one = np.vstack([torch_model.embed([t]) for t in TEXTS])
    np.testing.assert_allclose(torch_model.embed(TEXTS), one_by_one, atol=1e-5)


def test_onnx_rows_barely_depend_on_batching(onnx_model: OnnxEmbedder) -> None:
    """The int8 model quantises activations per batch at run time (OnnxEmbedder's docstring:
    cosine 0.997 measured), so a row moves slightly with its batch; the embedding cache keeps
    a text's first vector."""
    one_by_one = np.vstack([onnx_model.embed([t]) for t in TEXTS])
    together = onnx_model.embed(TEXTS)
    assert np.all(np.sum(together * one_by_one, axis=1) > 0.99)
    np.testing.assert_array_equal(onnx_model.embed(TEXTS), together)  # deterministic


def test_onnx_model_id_is_stable_and_warm_up_is_idempotent() -> None:
    a, b = _onnx_default(), _onnx_default()
    assert a.model_id == b.model_id  # without loading either model
    assert a._session is None
    threads = [threading.Thread(target=a.warm_up) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    loaded = a._session
    a.warm_up()
    assert a._session is loaded is not None


def test_model_id_is_stable_and_warm_up_is_idempotent() -> None:
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
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
    model: Embedder, make_cache: Callable[[], EmbeddingCache]
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
    model: Embedder, make_cache: Callable[[], EmbeddingCache]
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
    model: Embedder, make_cache: Callable[[], EmbeddingCache]
) -> None:
    counting = Counting(model)
    cached = CachedEmbedder(counting, make_cache())
    cached.embed(TEXTS[:2])
    mixed = cached.embed([TEXTS[3], TEXTS[0], TEXTS[2], TEXTS[1]])
    assert counting.calls == [TEXTS[:2], [TEXTS[3], TEXTS[2]]]
    # each row is the vector of the model call that embedded it (an int8 ONNX row moves
    # slightly with its batch, so the rows are compared with those very calls)
    first, second = model.embed(TEXTS[:2]), model.embed([TEXTS[3], TEXTS[2]])
    np.testing.assert_allclose(
        mixed, np.vstack([second[0], first[0], second[1], first[1]]), atol=1e-6
    )


def test_a_new_process_hits_through_redis(
    model: Embedder, make_cache: Callable[[], EmbeddingCache]
) -> None:
    first = CachedEmbedder(Counting(model), make_cache())
    expected = first.embed(TEXTS)
    counting = Counting(model)
    fresh = CachedEmbedder(counting, make_cache())  # empty LRU, same Redis
    np.testing.assert_array_equal(fresh.embed(TEXTS), expected)
    assert counting.calls == []
    assert fresh.hits == len(TEXTS)


def test_another_model_id_does_not_share_vectors(
    model: Embedder, make_cache: Callable[[], EmbeddingCache]
) -> None:
    class Renamed(Counting):
        @property
        def model_id(self) -> str:
            return "another-model@0"

    CachedEmbedder(Counting(model), make_cache()).embed(TEXTS)
    renamed = Renamed(model)
    CachedEmbedder(renamed, make_cache()).embed(TEXTS)
    assert renamed.sent == len(TEXTS)


def test_redis_down_still_returns_correct_vectors(model: Embedder) -> None:
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


def test_the_lru_serves_while_redis_is_down(model: Embedder) -> None:
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
