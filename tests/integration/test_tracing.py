"""One OpenTelemetry trace across the query path on the real services: the API's request span,
the retrieval pool (and its Elasticsearch ``_msearch``), the rerank pool with the evidence tier's
answer (the default tier), the delivery pool and the API's reply router, joined only by the
``traceparent`` header of each Kafka record. Spans are collected by the SDK's
``InMemorySpanExporter``: the pools run in this process (threads), the API in a uvicorn thread."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from api.auth import create_key
from ingest.chunking import Chunker
from ingest.embedding import Embedder
from ingest.ops import IngestOp
from ragstream.settings import PoolSettings, RerankSettings, RetrievalSettings, Settings
from tests.integration.ingestkit import Kit
from tests.integration.stack import ApiServer
from topics.admin import ensure_topics, make_admin
from topics.producer import EventProducer, make_producer
from topics.registry import TopicRegistry
from workers.caches import AnswerCache
from workers.evidence.stage import build_evidence_stage
from workers.pools.components import build_router
from workers.pools.delivery import delivery_handler
from workers.pools.rerank import rerank_handler
from workers.pools.retrieval import retrieval_handler
from workers.rerank.backends import NoneReranker
from workers.retrieval.hybrid import HybridRetriever
from workers.runtime.runner import PoolRunner

pytestmark = pytest.mark.integration

FACTS = {
    "ports": "# Connections\n\nThe server listens on TCP port 5432 by default. The port is set "
    "with the port configuration parameter.",
    "zebra": "# Zebras\n\nThe Grevy's zebra is the largest living wild equid.",
}


def _settings(name: str, tmp: Path) -> Settings:
    base = Settings()
    return base.model_copy(
        update={
            "kafka": base.kafka.model_copy(update={"topic_prefix": name + "."}),
            "elasticsearch": base.elasticsearch.model_copy(update={"index_alias": name}),
            "database": base.database.model_copy(update={"url": f"sqlite:///{tmp / 'meta.db'}"}),
        }
    )


def _start_pools(settings: Settings, kit: Kit, name: str) -> list[tuple[PoolRunner[Any], Any]]:
    registry = TopicRegistry(settings.kafka.topic_prefix)
    producer = EventProducer(make_producer(settings.kafka))
    cache = AnswerCache(kit.redis)
    pool = PoolSettings(max_batch=8, max_wait_ms=50, retry_base_ms=50)
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
            RerankSettings(),
            pool=pool,
            group=name + "-rerank",
            evidence=build_evidence_stage(settings.evidence, kit.embedder),
            cache_keys=cache.keys,
        ),
        delivery_handler(
            kit.sessions,
            pool=pool,
            scheduler=SimpleNamespace(schedule=list),  # type: ignore[arg-type]
            group=name + "-delivery",
            cache=cache,
        ),
    ]
    started = []
    for handler in handlers:
        runner: PoolRunner[Any] = PoolRunner(
            handler, kafka=settings.kafka, producer=producer, registry=registry
        )
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        started.append((runner, thread))
    return started


def _of_trace(spans: Sequence[ReadableSpan], trace_id: int) -> list[ReadableSpan]:
    return [s for s in spans if s.context is not None and s.context.trace_id == trace_id]


def _wait_for_span(exporter: InMemorySpanExporter, name: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any(s.name == name for s in exporter.get_finished_spans()):
            return
        time.sleep(0.1)


def test_one_trace_spans_the_api_every_pool_hop_and_the_response(
    spans: InMemorySpanExporter,
    model: Embedder,
    chunker: Chunker,
    tmp_path: Path,
    unique_name: Any,
) -> None:
    name = unique_name("otel")
    settings = _settings(name, tmp_path)
    admin = make_admin(settings.kafka)
    ensure_topics(admin, TopicRegistry(settings.kafka.topic_prefix).physical_topics())
    admin.close()
    kit = Kit(settings, model, chunker, name, tmp_path)
    pools: list[tuple[PoolRunner[Any], Any]] = []
    api: ApiServer | None = None
    try:
        kit.pipeline.apply(
            [
                IngestOp("acme", k, data=v.encode(), content_type="markdown")
                for k, v in FACTS.items()
            ]
        )
        # No rate limit: the limiter's Redis counter is keyed by the key's row id, which every
        # private SQLite store starts at 1 (shared with other tests running at the same time).
        key, _ = create_key(kit.sessions, "acme", rate_per_minute=0)
        pools = _start_pools(settings, kit, name)
        api = ApiServer(settings).start()
        time.sleep(4)  # let every pool join its group
        spans.clear()

        response = httpx.post(
            f"{api.url}/v1/query",
            headers={"Authorization": f"Bearer {key}"},
            json={
                "query": f"Which TCP port does the server listen on by default? ({name})",
                "route": "evidence",
                "timeout_s": 120,
            },
            timeout=150,
        )
        assert response.status_code == 200, response.text
        body = response.json()
        assert body["status"] == "answered" and body["tier"] == "evidence", body
        _wait_for_span(spans, "process rag.responses")  # the delivery pool ends after replying
        finished = spans.get_finished_spans()

        (server,) = [s for s in finished if s.name == "POST /v1/query"]
        assert server.kind is SpanKind.SERVER
        assert server.parent is None
        assert server.attributes is not None
        assert server.attributes["http.response.status_code"] == 200
        trace_spans = _of_trace(finished, server.context.trace_id)  # type: ignore[union-attr]
        by_name: dict[str, list[ReadableSpan]] = {}
        for s in trace_spans:
            by_name.setdefault(s.name, []).append(s)
        pools_seen = {
            (s.name, (s.attributes or {}).get("ragstream.pool"))
            for s in trace_spans
            if s.kind is SpanKind.CONSUMER
        }
        assert {
            ("process rag.queries", "retrieval"),
            ("process rag.retrieved", "rerank"),
            ("process rag.responses", "delivery"),
            ("deliver rag.responses", "api-replies"),
        } <= pools_seen, sorted(by_name)
        # Elasticsearch (the client's span) and the evidence tier's answer ran inside their
        # pools' event spans; FastAPI's own server span is the root.
        assert "msearch" in by_name and "evidence" in by_name, sorted(by_name)
        by_id = {sp.context.span_id: sp for sp in trace_spans}  # type: ignore[union-attr]

        def ancestors(span: ReadableSpan) -> list[str]:
            names = []
            while span.parent is not None and span.parent.span_id in by_id:
                span = by_id[span.parent.span_id]
                names.append(span.name)
            return names

        (retrieval,) = by_name["process rag.queries"]
        assert ancestors(retrieval)[-1] == "POST /v1/query"  # through FastAPI's endpoint span
        (msearch,) = by_name["msearch"]
        assert (msearch.attributes or {}).get("db.system") == "elasticsearch"  # the client's own
        assert ancestors(msearch)[0] == "process rag.queries"
        (rerank,) = by_name["process rag.retrieved"]
        assert ancestors(rerank)[0] == "process rag.queries"
        assert ancestors(by_name["evidence"][0])[0] == "process rag.retrieved"
        for last in by_name["process rag.responses"] + by_name["deliver rag.responses"]:
            assert ancestors(last)[:2] == ["process rag.retrieved", "process rag.queries"]
            assert ancestors(last)[-1] == "POST /v1/query"
    finally:
        if api is not None:
            api.stop()
        for runner, _ in pools:
            runner.stop()
        for _, thread in pools:
            thread.join(timeout=60)
        admin = make_admin(settings.kafka)
        try:
            mine = [t for t in admin.list_topics() if t.startswith(settings.kafka.topic_prefix)]
            if mine:
                admin.delete_topics(mine)
        finally:
            admin.close()
        kit.close()
