"""Answer caches on the real Redis: exact and semantic hits, tenant scope, version invalidation,
and the re-check of a hit against the registry's current readers."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import numpy as np
import redis
from prometheus_client import REGISTRY

from api.querying import QueryService
from ingest.registry import DocumentRegistry
from ragstream.db.acl import to_column
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import DatabaseSettings, Settings
from topics.queries import QueryRequest
from topics.responses import Citation, EvidenceSpan, QueryResponse
from workers.caches import AnswerCache, normalise_query
from workers.pools.components import build_answer_cache
from workers.pools.delivery import record_responses


def _q(text: str, tenant: str) -> QueryRequest:
    return QueryRequest(tenant=tenant, query=text, deadline=dt.datetime.now(dt.UTC))


def _unit(v: list[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float32)
    return a / np.linalg.norm(a)


def test_exact_and_semantic_hits_are_tenant_and_version_scoped(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    client = redis.Redis.from_url(settings.redis.url)
    cache = AnswerCache(client, threshold=0.95)
    tenant, other = unique_name("ta"), unique_name("tb")
    q = _q("What is the default port?", tenant)
    answer = QueryResponse(
        tenant=tenant,
        request_id=q.request_id,
        status="answered",
        answer="5432 [1]",
        citations=(Citation(n=1, doc_id="ports", chunk_id="c1"),),
    )
    cache.remember_query_vector(q, _unit([1.0, 0.0, 0.0]))
    cache.put(q, answer, index_version=7)

    same = _q("  what is the DEFAULT port ", tenant)  # normalises to the same key
    assert normalise_query(same.query) == normalise_query(q.query)
    hit = cache.get_exact(same, 7)
    assert hit is not None and hit.kind == "exact" and hit.response.answer == "5432 [1]"

    paraphrase = _q("Which port is used by default?", tenant)
    assert cache.get_exact(paraphrase, 7) is None
    close = cache.get_semantic(paraphrase, _unit([0.99, 0.05, 0.0]), 7)
    assert close is not None and close.kind == "semantic" and close.similarity >= 0.95
    assert cache.get_semantic(paraphrase, _unit([0.8, 0.6, 0.0]), 7) is None  # below threshold

    assert cache.get_exact(_q(q.query, other), 7) is None  # another tenant
    assert cache.get_semantic(_q(q.query, other), _unit([1.0, 0.0, 0.0]), 7) is None
    assert cache.get_exact(same, 8) is None  # the index changed
    assert cache.get_semantic(paraphrase, _unit([1.0, 0.0, 0.0]), 8) is None

    errors = QueryResponse.model_validate(
        {
            **answer.model_dump(),
            "status": "failed",
            "answer": "",
            "error": {"code": "INTERNAL", "message": "x"},
        }
    )
    q2 = _q("never cached", tenant)
    cache.put(q2, errors, 7)
    assert cache.get_exact(q2, 7) is None  # errors are never cached
    client.close()


def test_a_semantic_entry_is_only_compared_with_vectors_of_its_own_model(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    """After a model switch (``ingest/model_follow.py``) the cached query vectors of the old
    model are in another space: never a hit, however close the numbers."""
    client = redis.Redis.from_url(settings.redis.url)
    cache = AnswerCache(client, threshold=0.95)
    tenant = unique_name("tm")
    q = _q("What is the default port?", tenant)
    answer = QueryResponse(tenant=tenant, request_id=q.request_id, status="answered", answer="5432")
    cache.remember_query_vector(q, _unit([1.0, 0.0, 0.0]), "minilm@1")
    cache.put(q, answer, index_version=1)
    paraphrase = _q("Which port is used by default?", tenant)
    assert cache.get_semantic(paraphrase, _unit([1.0, 0.0, 0.0]), 1, "bge@2") is None
    assert cache.get_semantic(paraphrase, _unit([1.0, 0.0, 0.0]), 1) is None  # untagged
    hit = cache.get_semantic(paraphrase, _unit([1.0, 0.0, 0.0]), 1, "minilm@1")
    assert hit is not None and hit.response.answer == "5432"
    client.close()


class _Counting(redis.Redis):
    """A Redis client that adds up the bytes of every reply it reads."""

    read_bytes = 0

    def parse_response(self, connection, command_name, **options):  # type: ignore[no-untyped-def]
        reply = super().parse_response(connection, command_name, **options)
        type(self).read_bytes += _size(reply)
        return reply


def _size(reply: object) -> int:
    if isinstance(reply, bytes | str):
        return len(reply)
    if isinstance(reply, dict):
        return sum(_size(k) + _size(v) for k, v in reply.items())
    if isinstance(reply, list | tuple):
        return sum(_size(x) for x in reply)
    return 8


def test_a_semantic_miss_reads_the_vectors_only_never_the_cached_answers(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    """A lookup compares against every cached vector of its key but reads an answer only for a
    hit: with 200 long answers cached, a miss reads about 200 vectors' bytes (before issue 26 it
    fetched and JSON-decoded every entry with its whole answer), and a hit reads one answer."""
    client = _Counting.from_url(settings.redis.url)
    cache = AnswerCache(client, threshold=0.95)
    tenant, dim, n = unique_name("tv"), 384, 200
    rng = np.random.default_rng(7)
    vectors = rng.standard_normal((n, dim)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    long_answer = "x" * 4000
    asked = []
    for i in range(n):
        q = _q(f"question {i}", tenant)
        cache.remember_query_vector(q, vectors[i], "m@1")
        cache.put(q, QueryResponse(tenant=tenant, request_id=q.request_id, status="answered",
                                   answer=f"{i} {long_answer}"), index_version=3)  # fmt: skip
        asked.append(q)
    fresh = rng.standard_normal(dim).astype(np.float32)
    fresh /= np.linalg.norm(fresh)

    _Counting.read_bytes = 0
    assert cache.get_semantic(_q("unrelated", tenant), fresh, 3, "m@1") is None
    assert _Counting.read_bytes < n * dim * 4 + 1000  # the vectors, not 200 x 4 kB of answers

    _Counting.read_bytes = 0
    hit = cache.get_semantic(_q("a paraphrase", tenant), vectors[123], 3, "m@1")
    assert hit is not None and hit.response.answer.startswith("123 ")
    assert hit.response.request_id == asked[123].request_id
    assert _Counting.read_bytes < n * dim * 4 + len(long_answer) + 2000  # one answer
    client.close()


def test_the_semantic_cache_starts_over_past_max_entries(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    """A key holds at most ``max_entries`` vectors: the next answer starts it over, and the
    vectors and their request ids stay in step (a hit still finds its own answer)."""
    client = redis.Redis.from_url(settings.redis.url)
    cache = AnswerCache(client, threshold=0.95, max_entries=3)
    tenant = unique_name("tx")
    basis = np.eye(4, dtype=np.float32)
    for i in range(5):
        q = _q(f"q{i}", tenant)
        cache.remember_query_vector(q, basis[i % 4], "m")
        cache.put(q, QueryResponse(tenant=tenant, request_id=q.request_id, status="answered",
                                   answer=f"a{i}"), index_version=1)  # fmt: skip
    # q0..q2 filled the key, q3 went over and started it over, q4 is the only one since.
    assert cache.get_semantic(_q("p", tenant), basis[0], 1, "m") is not None  # q4 (basis[0])
    hit = cache.get_semantic(_q("p", tenant), basis[0], 1, "m")
    assert hit is not None and hit.response.answer == "a4"
    assert cache.get_semantic(_q("p", tenant), basis[1], 1, "m") is None  # q1 is gone
    client.close()


def test_the_delivery_pool_is_the_one_writer_and_stores_a_final_answer_once(
    settings: Settings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """The answering stages only put keys on the response; the delivery pool stores it as it
    records it, once: a replayed response with another text changes nothing, and a response
    without keys (a cache hit, an error) is never stored."""
    url = f"sqlite:///{tmp_path / 'log.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    client = redis.Redis.from_url(settings.redis.url)
    cache = AnswerCache(client, threshold=0.95)
    tenant = unique_name("tw")
    q = _q("What is the default port?", tenant)
    first = QueryResponse(
        tenant=tenant,
        request_id=q.request_id,
        status="answered",
        answer="5432",
        cache_keys=cache.keys.of(q, 3),
    )
    cache.remember_query_vector(q, _unit([1.0, 0.0, 0.0]))
    assert cache.get_exact(q, 3) is None
    record_responses(sessions, [first], cache)
    hit = cache.get_exact(q, 3)
    assert hit is not None and hit.response.answer == "5432"
    semantic = cache.get_semantic(_q("Which port by default?", tenant), _unit([1.0, 0, 0]), 3)
    assert semantic is not None and semantic.response.answer == "5432"

    replay = first.model_copy(update={"answer": "a second text"})
    record_responses(sessions, [replay], cache)
    again = cache.get_exact(q, 3)
    assert again is not None and again.response.answer == "5432"  # the first answer stays

    q2 = _q("Which user runs the server?", tenant)
    served = again.readdress(q2, "api")  # a hit re-addressed: no keys
    record_responses(sessions, [served], cache)
    assert cache.get_exact(q2, 3) is None
    client.close()


def test_a_truncated_answer_is_not_cached(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    """A cut answer (token budget, a looping completion) is not served again from the cache:
    the next asking gets a fresh try; the same answer whole is cached."""
    client = redis.Redis.from_url(settings.redis.url)
    cache = AnswerCache(client, threshold=0.95)
    tenant = unique_name("tt")
    q = _q("How do I create a virtual environment?", tenant)
    cut = QueryResponse(
        tenant=tenant, request_id=q.request_id, status="answered",
        answer="1. Create it. 1. Create it.", truncated=True, cache_keys=cache.keys.of(q, 2),
    )  # fmt: skip
    assert cache.store(cut) is False
    assert cache.get_exact(q, 2) is None
    assert cache.store(cut.model_copy(update={"truncated": False})) is True
    assert cache.get_exact(q, 2) is not None
    client.close()


def _withheld_count(kind: str) -> float:
    labels = {"kind": kind, "result": "withheld"}
    return REGISTRY.get_sample_value("ragstream_answer_cache_total", labels) or 0.0


def test_a_hit_citing_a_document_the_asker_may_no_longer_read_is_a_miss(
    settings: Settings, unique_name: Callable[[str], str], tmp_path: Path
) -> None:
    """Defence in depth (issue 39): a readers change bumps the tenant's index version before
    the registry takes it, which puts every cached answer out of reach. Here the registry takes
    the change and the version stays (written into the registry directly), and still neither
    cache serves the former reader the answer that cites or quotes the document: not the API's
    exact lookup, not the retrieval pool's exact or semantic one (each a miss, counted
    ``withheld``); a hit citing only what the asker still reads is served."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    registry = DocumentRegistry(sessions)
    tenant = unique_name("tr")
    registry.record(tenant, "rocket", status="indexed", readers=to_column(["group:eng"]))
    registry.record(tenant, "canteen", status="indexed", readers=None)
    settings = settings.model_copy(update={"database": DatabaseSettings(url=url)})
    client = redis.Redis.from_url(settings.redis.url)
    api = QueryService(settings, sessions, client)  # the API's exact lookup
    pool = build_answer_cache(settings)  # the retrieval pool's cache, as its pool builds it
    version = api.versions.get(tenant)

    def ask(text: str) -> QueryRequest:
        return QueryRequest(
            tenant=tenant, query=text, deadline=dt.datetime.now(dt.UTC),
            principals=("group:eng", "user:ada"),
        )  # fmt: skip

    rocket, quoted, canteen = (
        ask("What is the rocket launch code?"),
        ask("Where is the launch code kept?"),
        ask("When is lunch served?"),
    )
    answers = {
        rocket.request_id: ("9931 [1]", (Citation(n=1, doc_id="rocket", chunk_id="r1"),), ()),
        quoted.request_id: ("In the vault.", (), (EvidenceSpan(
            n=1, chunk_id="r1", doc_id="rocket", start=0, end=5, text="vault"),)),
        canteen.request_id: ("At noon [1]", (Citation(n=1, doc_id="canteen", chunk_id="c1"),), ()),
    }  # fmt: skip
    for q, axis in ((rocket, 0), (quoted, 1), (canteen, 2)):
        text, citations, evidence = answers[q.request_id]
        pool.remember_query_vector(q, np.eye(3, dtype=np.float32)[axis], "m@1")
        response = QueryResponse(
            tenant=tenant, request_id=q.request_id, status="answered", answer=text,
            citations=citations, evidence=evidence,
        )  # fmt: skip
        pool.put(q, response, version)
    paraphrase = _unit([0.99, 0.05, 0.0])  # close to the rocket question's vector
    served, _ = api.cached(ask(rocket.query))
    assert served is not None and served.answer == "9931 [1]"  # the reader's own answer
    assert pool.get_semantic(ask("The launch code?"), paraphrase, version, "m@1") is not None
    assert pool.get_exact(ask(quoted.query), version) is not None

    registry.record(tenant, "rocket", readers=to_column(["group:sales"]))  # no version bump
    assert api.versions.get(tenant) == version
    exact, semantic = _withheld_count("exact"), _withheld_count("semantic")

    served, marked = api.cached(ask(rocket.query))
    assert served is None and marked.exact_cache_checked  # a miss: the pipeline answers
    assert pool.get_exact(ask(rocket.query), version) is None
    assert pool.get_exact(ask(quoted.query), version) is None  # quoted, not cited: the same
    assert pool.get_semantic(ask("The launch code?"), paraphrase, version, "m@1") is None
    assert _withheld_count("exact") == exact + 3
    assert _withheld_count("semantic") == semantic + 1

    served, _ = api.cached(ask(canteen.query))  # what the asker still reads is served
    assert served is not None and served.answer == "At noon [1]"
    lunch = pool.get_semantic(ask("Lunch time?"), _unit([0.0, 0.05, 0.99]), version, "m@1")
    assert lunch is not None and lunch.response.answer == "At noon [1]"
    client.close()
