"""The query path end to end on real Kafka, Elasticsearch, Redis, the real embedding model and
the real small LLM served by llama.cpp: retrieval -> rerank -> generation pools."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer
from prometheus_client import REGISTRY

from ingest.chunking import Chunker
from ingest.embedding import Embedder
from ingest.ops import IngestOp
from ragstream.retry import RetryPolicy
from ragstream.settings import (
    EvidenceSettings,
    PoolSettings,
    RerankSettings,
    RetrievalSettings,
    Settings,
)
from tests.integration.ingestkit import Kit
from tests.integration.tcpproxy import Proxy
from topics.admin import ensure_topics, make_admin
from topics.producer import EventProducer, make_producer
from topics.queries import QueryRequest, TermFilter, Turn
from topics.registry import QUERIES, RESPONSES, TOKENS, TopicRegistry
from topics.responses import ErrorCode, QueryResponse
from topics.serde import decode, encode
from topics.tokens import AnswerToken
from workers.caches import AnswerCache
from workers.conversation import question_of
from workers.evidence.stage import build_evidence_stage
from workers.generation.generator import Generator, TokenSink
from workers.generation.llamacpp_tokens import ServerTokenCounter, n_ctx_per_slot
from workers.generation.openai_compat import OpenAICompatibleBackend
from workers.generation.prompt import PromptBuilder
from workers.pools.components import build_router
from workers.pools.delivery import delivery_handler
from workers.pools.generation import generation_handler
from workers.pools.rerank import rerank_handler
from workers.pools.retrieval import retrieval_handler
from workers.rerank.backends import NoneReranker
from workers.retrieval.hybrid import HybridRetriever
from workers.runtime.runner import PoolRunner

FACTS = {
    "vacuum": "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples. The autovacuum "
    "launcher starts workers every autovacuum_naptime, which defaults to one minute.",
    "ports": "# Connections\n\nThe server listens on TCP port 5432 by default. The port is set "
    "with the port configuration parameter.",
    "zebra": "# Zebras\n\nThe Grevy's zebra is the largest living wild equid.",
}


@dataclass
class QueryPath:
    settings: Settings
    kit: Kit
    registry: TopicRegistry
    proxy: Proxy
    runners: list[PoolRunner[Any]] = field(default_factory=list)
    generators: list[Generator] = field(default_factory=list)
    threads: list[threading.Thread] = field(default_factory=list)

    def ask(self, queries: list[QueryRequest], timeout_s: float = 240) -> dict[str, QueryResponse]:
        consumer = KafkaConsumer(
            self.registry.name(RESPONSES),
            bootstrap_servers=self.settings.kafka.bootstrap_servers,
            auto_offset_reset="latest",
            group_id=None,
        )
        consumer.poll(timeout_ms=500)  # get an assignment before producing
        producer = KafkaProducer(
            bootstrap_servers=self.settings.kafka.bootstrap_servers, acks="all"
        )
        for q in queries:
            producer.send(self.registry.name(QUERIES), key=q.key(), value=encode(q))
        producer.flush()
        producer.close()
        wanted = {q.request_id for q in queries}
        got: dict[str, QueryResponse] = {}
        deadline = time.monotonic() + timeout_s
        while wanted - set(got) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                for r in records:
                    resp = decode(QueryResponse, r.value)
                    if resp.request_id in wanted:
                        got.setdefault(resp.request_id, resp)
        consumer.close()
        return got


def _query(text: str, tenant: str = "acme", **kw: Any) -> QueryRequest:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=kw.pop("deadline_s", 120))
    return QueryRequest(tenant=tenant, query=text, deadline=deadline, **kw)


@pytest.fixture(scope="module")
def qp(
    model: Embedder, chunker: Chunker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[QueryPath]:
    """The query path with no evidence stage: every question goes to an LLM tier, with whole
    passages."""
    yield from _query_path(model, chunker, tmp_path_factory, "t-qp", with_evidence=False)


@pytest.fixture(scope="module")
def qp_evidence(
    model: Embedder, chunker: Chunker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[QueryPath]:
    """The query path with the evidence stage, as deployed: ``route="evidence"`` is answered by
    the quoted evidence, no LLM, so the answer is whole and cacheable every time."""
    yield from _query_path(model, chunker, tmp_path_factory, "t-qpe", with_evidence=True)


def _query_path(
    model: Embedder,
    chunker: Chunker,
    tmp_path_factory: pytest.TempPathFactory,
    prefix: str,
    *,
    with_evidence: bool,
) -> Iterator[QueryPath]:
    settings = Settings()
    name = f"{prefix}-{int(time.time() * 1000) % 10_000_000}"
    kit = Kit(settings, model, chunker, name, tmp_path_factory.mktemp(prefix))
    registry = TopicRegistry(name + ".")
    admin = make_admin(settings.kafka)
    ensure_topics(admin, registry.physical_topics())
    admin.close()
    kit.pipeline.apply(
        [IngestOp("acme", k, data=v.encode(), content_type="markdown") for k, v in FACTS.items()]
        + [
            IngestOp(
                "globex",
                "secret",
                data=b"# Secret\n\nGlobex launch code is 9931.",
                content_type="markdown",
            )
        ]
    )
    llm = settings.llm
    proxy = Proxy((llm.host, llm.port))
    path = QueryPath(settings, kit, registry, proxy)
    producer = EventProducer(make_producer(settings.kafka))
    cache = AnswerCache(kit.redis)
    pool = PoolSettings(max_batch=16, max_wait_ms=300, retry_base_ms=50)
    per_slot = n_ctx_per_slot(llm.base_url, llm.n_ctx, llm.n_parallel)
    handlers: list[Any] = [
        retrieval_handler(
            kit.embedder,
            HybridRetriever(kit.es, kit.index.alias, RetrievalSettings()),
            cache,
            kit.versions,
            build_router(kit.embedder),
            pool=pool,
            group=name + "-retrieval",
        ),
        rerank_handler(
            NoneReranker(),
            RerankSettings(max_chunks_per_doc=50),
            pool=pool,
            group=name + "-rerank",
            evidence=build_evidence_stage(EvidenceSettings(), kit.embedder)
            if with_evidence
            else None,
            cache_keys=cache.keys if with_evidence else None,
        ),
        delivery_handler(  # the answer cache's one writer
            kit.sessions,
            pool=pool,
            scheduler=SimpleNamespace(schedule=list),  # type: ignore[arg-type]
            group=name + "-delivery",
            cache=cache,
        ),
    ]
    for tier in ("small", "large"):
        backend = OpenAICompatibleBackend(
            proxy.url, "local", "completion", llm.stop, llm.max_tokens, timeout_s=30
        )
        builder = PromptBuilder(
            ServerTokenCounter(llm.base_url), per_slot, llm.max_tokens, "completion"
        )
        backoff = RetryPolicy(max_attempts=100, base_ms=200, cap_ms=1000, jitter=False)
        generator = Generator(
            backend, builder, tokens=None, cache_keys=cache.keys, tier=tier, backoff=backoff
        )
        path.generators.append(generator)
        handlers.append(generation_handler(generator, pool=pool, group=f"{name}-gen-{tier}"))
    for h in handlers:
        runner: PoolRunner[Any] = PoolRunner(
            h, kafka=settings.kafka, producer=producer, registry=registry
        )
        for g in path.generators:  # tokens are outputs of the generation handler's runner
            if h.name == f"generation-{g.tier}":
                g.tokens = TokenSink(runner.emit_now)
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        path.runners.append(runner)
        path.threads.append(thread)
    time.sleep(4)  # let every pool join its group
    yield path
    for r in path.runners:
        r.stop()
    for t in path.threads:
        t.join(timeout=60)
    for g in path.generators:
        g.close()
    producer.close()
    proxy.close()
    kit.close()


def _calls(metric: str, labels: dict[str, str]) -> float:
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def test_question_is_answered_with_a_citation_of_the_right_chunk(qp: QueryPath) -> None:
    q = _query("Which TCP port does the server listen on by default?", stream=True)
    resp = qp.ask([q])[q.request_id]
    assert resp.status == "answered", resp.error
    assert resp.citations and resp.citations[0].doc_id == "ports"
    assert "5432" in resp.answer
    stages = [t.stage for t in resp.trace]
    assert stages[0] == "retrieval" and stages[1] == "rerank" and stages[2].startswith("generation")
    assert resp.usage.prompt_tokens > 0 and resp.usage.completion_tokens > 0
    # The answer was streamed in order, then a final marker.
    tokens = [
        decode(AnswerToken, r.value)
        for r in _read_all(qp, qp.registry.name(TOKENS))
        if decode(AnswerToken, r.value).request_id == q.request_id
    ]
    assert [t.seq for t in tokens] == list(range(len(tokens))) and tokens[-1].final
    assert "".join(t.text for t in tokens).strip() == resp.answer


def test_a_follow_up_is_answered_with_its_own_intent(qp: QueryPath) -> None:
    """The conversation travels as its own field: the follow-up names nothing, the earlier turn
    says what it is about, and the evidence tier (the default) answers "how do I change it" with
    the sentence that says how, never with the default the user has just read (both sentences
    are in the same chunk), on the real index, embedder and retrieval."""
    first = "Which TCP port does the server listen on by default?"
    shown = "The server listens on TCP port 5432 by default. [1]"
    q = _query("And how do I change it?", conversation=[Turn(question=first, answer=shown)])
    kit = qp.kit
    retriever = HybridRetriever(kit.es, kit.index.alias, RetrievalSettings())
    [candidates] = retriever.search_batch([q], kit.embedder.embed([question_of(q)]))
    assert candidates and candidates[0].doc_id == "ports"
    stage = build_evidence_stage(EvidenceSettings(), kit.embedder)
    [decision] = stage.run([(q, candidates, "small")])
    assert decision.tier == "evidence", decision.reason
    assert "port configuration parameter" in decision.answer.text, decision.answer
    assert "5432 by default" not in decision.answer.text, decision.answer


def _read_all(qp: QueryPath, topic: str) -> list[Any]:
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=qp.settings.kafka.bootstrap_servers,
        auto_offset_reset="earliest",
        group_id=None,
        consumer_timeout_ms=3000,
    )
    records = list(consumer)
    consumer.close()
    return records


def test_concurrent_queries_are_served_by_fewer_model_calls_than_queries(qp: QueryPath) -> None:
    stages = ("embed", "msearch", "rerank")
    before = {s: _calls("ragstream_model_calls_total", {"stage": s}) for s in stages}
    gen_before = sum(
        _calls("ragstream_model_calls_total", {"stage": f"generate-{t}"})
        for t in ("small", "large")
    )
    queries = [
        _query(f"How often does autovacuum start workers? (variant {i})", top_k=2)
        for i in range(16)
    ]
    got = qp.ask(queries)
    assert len(got) == 16 and all(r.status == "answered" for r in got.values())
    for s in stages:
        calls = _calls("ragstream_model_calls_total", {"stage": s}) - before[s]
        assert 1 <= calls < 16, (s, calls)
    gen = sum(
        _calls("ragstream_model_calls_total", {"stage": f"generate-{t}"})
        for t in ("small", "large")
    )
    assert 1 <= gen - gen_before < 16


def test_tenants_are_isolated_whatever_the_filters(qp: QueryPath) -> None:
    hostile = [
        _query(
            "What is the launch code?", filters=(TermFilter(field="doc_id", values=("secret",)),)
        ),
        _query(
            "What is the launch code?",
            filters=(TermFilter(field="metadata.tenant", values=("globex",)),),
        ),
        _query("globex launch code * OR tenant:globex"),
    ]
    got = qp.ask(hostile)
    for q in hostile:
        resp = got[q.request_id]
        assert all(c.doc_id != "secret" for c in resp.citations)
        assert "9931" not in resp.answer


def test_over_long_context_is_budgeted_not_rejected(qp: QueryPath) -> None:
    long_text = "# Long\n\n" + " ".join(
        f"filler sentence {i} about storage engines." for i in range(3000)
    )
    qp.kit.pipeline.apply(
        [IngestOp("acme", "long", data=long_text.encode(), content_type="markdown")]
    )
    q = _query("What are the filler sentences about storage engines?", top_k=50, top_n=60)
    resp = qp.ask([q])[q.request_id]
    assert resp.status == "answered", resp.error
    gen = next(t for t in resp.trace if t.stage.startswith("generation"))
    assert int(gen.detail["dropped"]) > 0 or bool(gen.detail["trimmed"])


def test_deleted_document_never_appears_in_candidates_or_cached_answers(
    qp_evidence: QueryPath,
) -> None:
    # The evidence tier, no LLM: the small LLM's completion can be cut at the token budget or
    # judged a loop (a truncated answer is never cached, by design), which failed this test three
    # times in full CI runs when the query path here had no evidence stage and "evidence" fell
    # through to an LLM tier.
    qp = qp_evidence
    ask = "What is the largest living wild equid?"
    q1 = _query(ask, route="evidence")
    first = qp.ask([q1])[q1.request_id]
    assert any(c.doc_id == "zebra" for c in first.citations)
    assert not any(t.stage.startswith("generation") for t in first.trace), first.trace
    assert first.cache_keys is not None and not first.truncated, first
    _until_cached(qp, first.cache_keys.exact)  # the delivery pool stores it after the reply
    q2 = _query(ask, route="evidence")
    second = qp.ask([q2])[q2.request_id]
    assert any(t.stage == "cache" for t in second.trace)  # an exact cache hit
    qp.kit.pipeline.apply([IngestOp("acme", "zebra", "delete")])
    q3 = _query(ask, route="evidence")
    third = qp.ask([q3])[q3.request_id]
    assert not any(t.stage == "cache" for t in third.trace)  # the index version moved on
    assert all(c.doc_id != "zebra" for c in third.citations)


def _until_cached(qp: QueryPath, key: str, timeout_s: float = 30.0) -> None:
    # The delivery pool stores the answer in the batch that logs it, after the reply: 10 s ran
    # out once in a full CI run on two busy cores (passed alone 4 of 4, about 12 s a run).
    deadline = time.monotonic() + timeout_s
    while not qp.kit.redis.exists(key):
        assert time.monotonic() < deadline, f"{key} never cached"
        time.sleep(0.05)


def test_llm_down_gives_a_typed_error_after_retries_then_recovers(qp: QueryPath) -> None:
    qp.proxy.down()
    try:
        q = _query("Which TCP port does the server listen on? (while down)", deadline_s=6)
        resp = qp.ask([q], timeout_s=60)[q.request_id]
        assert resp.status == "failed" and resp.error is not None
        assert resp.error.code in (ErrorCode.BACKEND_UNAVAILABLE, ErrorCode.DEADLINE_EXCEEDED)
    finally:
        qp.proxy.up()
    q = _query("Which TCP port does the server listen on? (after recovery)")
    resp = qp.ask([q])[q.request_id]
    assert resp.status == "answered", resp.error
