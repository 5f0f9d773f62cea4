"""The exact answer cache is read once per request, and a hit is re-addressed by one function
with one ``event_id`` rule wherever it is found (the API or the retrieval pool)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

from api.querying import QueryService
from index.schema import EmbeddingModelMismatchError
from ragstream.settings import PoolSettings
from topics.queries import QueryRequest
from topics.responses import AnswerCacheKeys, QueryResponse
from workers.caches import CacheHit
from workers.pools.retrieval import retrieval_handler
from workers.runtime.handler import Emit, derive_event_id

DEADLINE = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=5)
CACHED = QueryResponse(tenant="acme", request_id="old", status="answered", answer="5432 [1]")


class Cache:
    """Answers every exact lookup with :data:`CACHED` (or misses); counts the lookups."""

    def __init__(self, hit: bool = True) -> None:
        self.hit = hit
        self.exact: list[str] = []

    def get_exact(self, request: QueryRequest, version: int) -> CacheHit | None:
        self.exact.append(request.request_id)
        return CacheHit(CACHED, "exact") if self.hit else None

    def get_semantic(self, request: QueryRequest, vector: Any, version: int, model: str) -> None:
        return None


class Versions:
    def get(self, tenant: str) -> int:
        return 3


class NoModel:
    """Every embedding fails (so a query that misses the cache ends at once, typed)."""

    model_id = "m"

    def embed(self, texts: Sequence[str]) -> Any:
        raise EmbeddingModelMismatchError("chunks-v2", "e5@beef", 384, "m", 384)


def _handler(cache: Cache) -> Any:
    return retrieval_handler(
        NoModel(),
        None,  # type: ignore[arg-type]
        cache,  # type: ignore[arg-type]
        Versions(),  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        pool=PoolSettings(),
    )


def test_the_pool_skips_the_exact_lookup_the_api_made_and_makes_it_for_other_producers() -> None:
    cache = Cache()
    checked = QueryRequest(tenant="acme", query="q", deadline=DEADLINE, exact_cache_checked=True)
    direct = QueryRequest(tenant="acme", query="q", deadline=DEADLINE)
    out = _handler(cache).fn([checked, direct])
    assert cache.exact == [direct.request_id]  # read once: not again for the API's query
    by_id = {o.event.request_id: o.event for o in out if isinstance(o, Emit)}
    assert by_id[checked.request_id].status == "failed"  # it went on to embed
    hit = by_id[direct.request_id]
    assert hit.answer == CACHED.answer and hit.event_id == derive_event_id(direct.event_id, "cache")
    assert hit.trace[-1].stage == "cache" and hit.trace[-1].detail["at"] == "retrieval"


@pytest.mark.parametrize("hit", [True, False])
def test_the_api_reads_the_cache_once_and_marks_a_miss(hit: bool) -> None:
    svc = QueryService.__new__(QueryService)  # only the cache and the versions are used
    cache = Cache(hit)
    svc.cache, svc.versions = cache, Versions()  # type: ignore[assignment]
    request = QueryRequest(tenant="acme", query="q", deadline=DEADLINE, callback_url=None)
    response, produced = svc.cached(request)
    assert cache.exact == [request.request_id]
    if hit:
        assert response is not None and produced is request
        # The same rule as the retrieval pool's: derived from the request's event id.
        assert response.event_id == derive_event_id(request.event_id, "cache")
        assert response.request_id == request.request_id and response.tenant == "acme"
        assert response.trace[-1].detail == {"kind": "exact", "similarity": 1.0, "at": "api"}
    else:
        assert response is None and produced.exact_cache_checked
        assert produced.request_id == request.request_id


class Vectors:
    model_id = "m"

    def embed(self, texts: Sequence[str]) -> Any:
        return np.ones((len(texts), 4), dtype=np.float32)


class Found:
    """Two questions searched at once; the proposer was shed for the one asking for a name."""

    def search_batch(self, queries: Sequence[QueryRequest], vectors: Any) -> list[list[Any]]:
        return [[] for _ in queries]


def test_the_retrieval_event_says_which_questions_lost_their_proposals() -> None:
    name = QueryRequest(tenant="acme", query="How do I copy a folder?", deadline=DEADLINE)
    plain = QueryRequest(tenant="acme", query="What is VACUUM?", deadline=DEADLINE)
    calls: list[int] = []

    def definitions(queries: Sequence[QueryRequest], vectors: Any) -> Any:
        calls.append(len(queries))
        return [[] for _ in queries], [q is name for q in queries]

    class Route:
        tier, reason = "evidence", "test"

    class Router:
        def route(self, request: QueryRequest, vector: Any) -> Route:
            return Route()

    class Remembers(Cache):
        def remember_query_vector(self, request: QueryRequest, vector: Any, model: str) -> None:
            return None

    handler = retrieval_handler(
        Vectors(),
        Found(),
        Remembers(hit=False),  # type: ignore[arg-type]
        Versions(),  # type: ignore[arg-type]
        Router(),  # type: ignore[arg-type]
        pool=PoolSettings(),
        definitions=definitions,
    )
    out = handler.fn([name, plain])
    by_id = {o.event.request_id: o.event for o in out if isinstance(o, Emit)}
    assert calls == [2]
    assert by_id[name.request_id].degraded == ("propose",)
    assert by_id[name.request_id].trace[-1].detail["degraded"] == "propose"
    assert by_id[plain.request_id].degraded == ()


def test_a_degraded_answer_is_not_cached() -> None:
    from workers.caches import AnswerCache

    cache = AnswerCache.__new__(AnswerCache)
    cache.enabled = True
    keys = AnswerCacheKeys(exact="e", semantic="s")
    degraded = CACHED.model_copy(update={"cache_keys": keys, "degraded": ("propose",)})
    assert cache.store(degraded) is False
