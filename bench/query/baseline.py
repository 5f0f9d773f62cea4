"""The sequential baseline: the same components, one request at a time, no Kafka, no batching.

The components are built in this process by the same functions the pools use
(:mod:`workers.pools.components`, :func:`workers.rerank.factory.make_reranker`) and run through
the same handler functions, each called with a batch of one: retrieval (answer-cache lookups,
embedding, one ``_msearch``, RRF, routing), rerank and the evidence stage (an evidence-tier
answer ends there), and in full mode generation on the LLM server (one request in flight). A
closed loop with one request in flight measures its maximum throughput and its latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from bench.query.cpu import ProcessSet, attributed_ms, total
from bench.stats import CpuSample, busy_cores, core_ms_per_request
from ragstream.settings import Settings
from replay.measures import percentiles
from topics.base import Event
from topics.queries import QueryRequest
from topics.registry import TOKENS
from topics.reranked import RerankedPassages
from topics.responses import QueryResponse
from topics.retrieved import RetrievedCandidates
from workers.evidence.stage import EvidenceStage
from workers.runtime.handler import Emit, Outcome


@dataclass
class BaselineResult:
    """Closed loop, one request in flight: ``requests`` in ``seconds`` (s), throughput in
    requests/s, latency in ms; ``errors`` counts requests that ended in an error response.
    ``cpu_busy_cores`` is the machine's mean busy logical CPUs meanwhile (Elasticsearch and the
    LLM server included), ``core_ms_per_request`` the machine's CPU time per request, and
    ``process_core_ms_per_request`` only this process's and the services' (less their idle
    background; :mod:`bench.query.cpu`)."""

    mode: str
    requests: int
    seconds: float
    throughput_per_s: float
    latency_ms: dict[str, float]
    errors: int
    cpu_busy_cores: float | None = None
    core_ms_per_request: float | None = None
    process_core_ms_per_request: float | None = None


class SequentialPipeline:
    """The query path as plain function calls (no Kafka), built from ``settings``.

    The components are kept as attributes, so :mod:`bench.query.floor` can time each stage
    alone: ``embedder``, ``retriever``, ``cache``, ``versions``, ``router`` (the retrieval
    pool's), ``reranker`` and ``evidence`` (the rerank pool's evidence stage; ``None`` when
    ``settings.evidence.enabled`` is off), ``generators`` (``{tier: Generator}``, full mode).

    Args:
        settings: the same settings the pools get.
        full: also generate (else stop after rerank and the evidence stage).
    """

    def __init__(self, settings: Settings, full: bool) -> None:
        from workers.pools.components import (
            build_cache_keys,
            build_generator,
            build_retrieval_components,
        )
        from workers.pools.rerank import rerank_handler
        from workers.pools.retrieval import retrieval_handler
        from workers.rerank.factory import make_reranker, rerank_models_dir

        components = build_retrieval_components(settings)
        self.embedder, self.retriever, self.cache, self.versions, self.router = components
        self.retrieval = retrieval_handler(*components, pool=settings.pools.retrieval)
        self.reranker = make_reranker(
            settings.rerank, settings.llm.base_url, models_dir=rerank_models_dir(settings)
        )
        self.reranker.warm_up()
        self.evidence = _evidence_stage(settings)
        self.rerank_settings = settings.rerank
        self.rerank = rerank_handler(
            self.reranker,
            settings.rerank,
            pool=settings.pools.rerank,
            evidence=self.evidence,
            cache_keys=build_cache_keys(settings) if self.evidence is not None else None,
        )
        self.generators = (
            {tier: build_generator(settings, tier, None) for tier in ("small", "large")}
            if full
            else {}
        )

    def reranked(self, request: QueryRequest) -> Event:
        """The rerank pool's output for ``request``: passages (and evidence) for an LLM tier,
        an evidence-tier answer, or an error response; never a streamed evidence token."""
        retrieved = _single(self.retrieval.fn([request]))
        if not isinstance(retrieved, RetrievedCandidates):
            return retrieved
        return _single(self.rerank.fn([retrieved]))

    def answer(self, request: QueryRequest) -> bool:
        """Run ``request`` through every stage; True if it was answered by the models or the
        evidence tier (an error response or an answer-cache hit is False)."""
        reranked = self.reranked(request)
        if isinstance(reranked, QueryResponse):  # the evidence tier's answer, or an error
            return reranked.status == "answered" and reranked.tier == "evidence"
        if not isinstance(reranked, RerankedPassages):
            return False
        if not self.generators:
            return True
        response = _single(self.generators[reranked.tier].run([reranked]))
        return isinstance(response, QueryResponse) and response.status == "answered"

    def close(self) -> None:
        """Close the LLM clients and the Elasticsearch client."""
        for g in self.generators.values():
            g.close()
        self.retriever.es.close()


def _evidence_stage(settings: Settings) -> EvidenceStage | None:
    """The rerank pool's evidence stage, built as :func:`workers.pools.rerank.run_rerank_pool`
    builds it (``None`` when the settings turn it off)."""
    if not settings.evidence.enabled:
        return None
    from ingest.factory import build_embedder, build_vocabulary
    from workers.evidence.stage import build_evidence_stage

    dense = settings.evidence.dense_top > 0
    return build_evidence_stage(
        settings.evidence,
        build_embedder(settings, num_threads=1) if dense else None,
        build_vocabulary(settings),
        settings.rerank,
    )


def _single(outcomes: Sequence[Outcome]) -> Event:
    """The one event of a handler's outcomes, a streamed evidence token left aside."""
    items = [o for o in outcomes if not (isinstance(o, Emit) and o.topic == TOKENS)]
    if len(items) != 1 or not isinstance(items[0], Emit):
        raise RuntimeError(f"expected one output event, got {items!r}")
    return items[0].event


def run_baseline(
    pipeline: SequentialPipeline,
    mode: str,
    make: Callable[[], QueryRequest],
    seconds: float,
    *,
    warm: int = 1,
    processes: ProcessSet | None = None,
    idle_cores: Mapping[str, float] | None = None,
) -> BaselineResult:
    """Closed loop for at least ``seconds`` (s) after ``warm`` unmeasured requests; at least
    one request is measured. ``processes``: whose CPU counts in ``process_core_ms_per_request``
    (with their idle background ``idle_cores``); ``None`` leaves it unset."""
    for _ in range(warm):
        pipeline.answer(make())
    latencies: list[float] = []
    errors = 0
    cpu_start = CpuSample.now()
    procs_start = processes.sample() if processes is not None else None
    start = time.perf_counter()
    while not latencies or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        errors += not pipeline.answer(make())
        latencies.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - start
    cores = busy_cores(cpu_start, CpuSample.now())
    per_process = None
    if processes is not None and procs_start is not None:
        used = attributed_ms(procs_start, processes.sample(), elapsed, idle_cores or {})
        per_process = round(total(used.values()) / len(latencies), 1)
    return BaselineResult(
        mode=mode,
        requests=len(latencies),
        seconds=round(elapsed, 2),
        throughput_per_s=round(len(latencies) / elapsed, 3),
        latency_ms=percentiles(latencies),
        errors=errors,
        cpu_busy_cores=cores,
        core_ms_per_request=core_ms_per_request(cores, elapsed, len(latencies)),
        process_core_ms_per_request=per_process,
    )
