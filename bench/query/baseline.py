"""The sequential baseline: the same components, one request at a time, no Kafka, no batching.

The components are built in this process by the same functions the pools use
(:mod:`workers.pools.components`, :func:`workers.rerank.factory.make_reranker`) and run through
the same handler functions, each called with a batch of one: retrieval (answer-cache lookups,
embedding, one ``_msearch``, RRF, routing), rerank, and in full mode generation on the LLM
server (one request in flight). A closed loop with one request in flight measures its maximum
throughput and its latency.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bench.stats import CpuSample, busy_cores, core_ms_per_request, percentiles
from ragstream.settings import Settings
from topics.base import Event
from topics.queries import QueryRequest
from topics.reranked import RerankedPassages
from topics.responses import QueryResponse
from topics.retrieved import RetrievedCandidates
from workers.runtime.handler import Emit, Outcome


@dataclass
class BaselineResult:
    """Closed loop, one request in flight: ``requests`` in ``seconds`` (s), throughput in
    requests/s, latency in ms; ``errors`` counts requests that ended in an error response.
    ``cpu_busy_cores`` is the machine's mean busy logical CPUs meanwhile (Elasticsearch and the
    LLM server included), ``core_ms_per_request`` the machine's CPU time per request."""

    mode: str
    requests: int
    seconds: float
    throughput_per_s: float
    latency_ms: dict[str, float]
    errors: int
    cpu_busy_cores: float | None = None
    core_ms_per_request: float | None = None


class SequentialPipeline:
    """The query path as plain function calls (no Kafka), built from ``settings``.

    Args:
        settings: the same settings the pools get.
        full: also generate (else stop after rerank).
    """

    def __init__(self, settings: Settings, full: bool) -> None:
        from workers.pools.components import build_generator, build_retrieval_components
        from workers.pools.rerank import rerank_handler
        from workers.pools.retrieval import retrieval_handler
        from workers.rerank.factory import make_reranker

        components = build_retrieval_components(settings)
        self._es = components[1].es
        self.retrieval = retrieval_handler(*components, pool=settings.pools.retrieval)
        reranker = make_reranker(settings.rerank, settings.llm.base_url)
        reranker.warm_up()
        self.rerank = rerank_handler(reranker, settings.rerank, pool=settings.pools.rerank)
        self.generators = (
            {tier: build_generator(settings, tier, None) for tier in ("small", "large")}
            if full
            else {}
        )

    def answer(self, request: QueryRequest) -> bool:
        """Run ``request`` through every stage; True if it was answered by the models (an
        error response or an answer-cache hit is False)."""
        retrieved = _single(self.retrieval.fn([request]))
        if not isinstance(retrieved, RetrievedCandidates):
            return False
        reranked = _single(self.rerank.fn([retrieved]))
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
        self._es.close()


def _single(outcomes: Sequence[Outcome]) -> Event:
    items = list(outcomes)
    if len(items) != 1 or not isinstance(items[0], Emit):
        raise RuntimeError(f"expected one output event, got {items!r}")
    return items[0].event


def run_baseline(
    pipeline: SequentialPipeline,
    mode: str,
    make: Callable[[], QueryRequest],
    seconds: float,
    warm: int = 1,
) -> BaselineResult:
    """Closed loop for at least ``seconds`` (s) after ``warm`` unmeasured requests; at least
    one request is measured."""
    for _ in range(warm):
        pipeline.answer(make())
    latencies: list[float] = []
    errors = 0
    cpu_start = CpuSample.now()
    start = time.perf_counter()
    while not latencies or time.perf_counter() - start < seconds:
        t0 = time.perf_counter()
        errors += not pipeline.answer(make())
        latencies.append((time.perf_counter() - t0) * 1000)
    elapsed = time.perf_counter() - start
    cores = busy_cores(cpu_start, CpuSample.now())
    return BaselineResult(
        mode=mode,
        requests=len(latencies),
        seconds=round(elapsed, 2),
        throughput_per_s=round(len(latencies) / elapsed, 3),
        latency_ms=percentiles(latencies),
        errors=errors,
        cpu_busy_cores=cores,
        core_ms_per_request=core_ms_per_request(cores, elapsed, len(latencies)),
    )
