"""The floor of a mode: what each stage of one request costs when it runs alone.

Every stage of the query path is called in this process, one request at a time, on the
components the pools use (:class:`bench.query.baseline.SequentialPipeline`), each stage ``n``
times in a row before the next one starts, fed the previous stage's outputs:

- ``embed``: one query's embedding (a miss of the embedding cache: every query text is unique);
- ``caches_route``: the index version, the exact and semantic answer-cache lookups, the
  router, and remembering the query vector (Redis);
- ``msearch``: one ``_msearch`` with the query's BM25 and kNN searches (Elasticsearch);
- ``fusion``: reciprocal rank fusion of the two lists into candidates;
- ``rerank``: the reranker's scores and the top-K selection (with the identifier promotion
  of the evidence stage's pool);
- ``evidence``: the evidence stage (evidence spans, the answer tier, the evidence answer);
- ``llm`` (full mode): the generator's call for one request (prompt over the evidence, the
  LLM server's completion, the answer cache).

A stage's cost is the CPU time of this process plus that of each service process it calls
(:data:`STAGE_SERVICES`, :mod:`bench.query.cpu`) while it ran, less the services' idle
background, per call in core-milliseconds; the machine's busy cores over the same wall time
are reported beside it. The floor is the sum of the stages' costs (:func:`floor_core_ms`):
what one request costs with no bus, no batching and no queue. A mode's core-milliseconds per
request under load, set beside it, show the system's overhead (or, with batching, its
savings).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from bench.query.baseline import SequentialPipeline
from bench.query.cpu import SELF, ProcessSet, attributed_ms, total
from bench.stats import CpuSample, busy_cores
from ingest.embedding import CachedEmbedder, SentenceTransformerEmbedder
from ingest.onnx_embedding import OnnxEmbedder
from topics.queries import QueryRequest
from topics.reranked import RerankedPassages

T = TypeVar("T")
U = TypeVar("U")

#: Stages in pipeline order.
STAGES = (
    "embed", "caches_route", "msearch", "fusion", "preceding", "rerank", "evidence", "llm"
)  # fmt: skip
#: The services each stage calls, whose CPU counts in its cost beside this process's (the
#: embedding cache and the answer caches are in Redis; ``rerank`` calls the LLM server when
#: the reranker is the LLM, :func:`measure_floor` adds it). Other services' CPU meanwhile is
#: their own work, not the stage's.
STAGE_SERVICES: dict[str, tuple[str, ...]] = {
    "embed": ("redis",),
    "caches_route": ("redis",),
    "msearch": ("elasticsearch",),
    "llm": ("llm", "redis"),
}


@dataclass(frozen=True)
class StageCost:
    """One stage measured alone, per call (means over ``calls``).

    Attributes:
        stage: one of :data:`STAGES`.
        calls: how many calls were timed.
        wall_ms: wall time (ms).
        core_ms: CPU of this process and the services, less the services' idle background
            (core-ms): the stage's cost.
        by_process: ``core_ms`` by process (``bench`` is this one).
        raw_core_ms: the same without subtracting the services' idle background: an upper
            bound where a service is shared (another client's requests to the LLM server in
            the idle window make the background, and so ``core_ms``, unreliable).
        machine_core_ms: the machine's busy cores times the wall time (core-ms); every
            process of the host counts, other work included.
    """

    stage: str
    calls: int
    wall_ms: float
    core_ms: float
    by_process: dict[str, float]
    machine_core_ms: float | None
    raw_core_ms: float | None = None


def floor_core_ms(stages: Sequence[StageCost]) -> float:
    """The floor: the sum of the stages' own costs per call (core-ms), rounded to 0.1."""
    return total(s.core_ms for s in stages)


def time_stage(
    stage: str,
    fn: Callable[[T], U],
    inputs: Sequence[T],
    processes: ProcessSet,
    idle_cores: Mapping[str, float],
    *,
    services: Sequence[str] = (),
) -> tuple[StageCost, list[U]]:
    """Call ``fn`` on each of ``inputs`` in turn and measure the calls together: the CPU of
    this process and of the ``services`` it calls (names of ``processes.services``).

    Returns:
        The stage's :class:`StageCost` and ``fn``'s outputs, in order.

    Raises:
        ValueError: no inputs.
        Whatever ``fn`` raises.
    """
    if not inputs:
        raise ValueError(f"{stage}: no inputs to time")
    machine_start, start, t0 = CpuSample.now(), processes.sample(), time.perf_counter()
    outputs = [fn(x) for x in inputs]
    wall_s = time.perf_counter() - t0
    end, machine_end = processes.sample(), CpuSample.now()
    n = len(inputs)
    used = attributed_ms(start, end, wall_s, idle_cores)
    by = {k: round(v / n, 3) for k, v in used.items() if k == SELF or k in services}
    raw = attributed_ms(start, end, wall_s, {})
    raw_ms = sum(v for k, v in raw.items() if k == SELF or k in services) / n
    cores = busy_cores(machine_start, machine_end)
    cost = StageCost(
        stage=stage,
        calls=n,
        wall_ms=round(wall_s * 1000 / n, 3),
        core_ms=round(sum(by.values()), 3),
        by_process=by,
        machine_core_ms=None if cores is None else round(cores * wall_s * 1000 / n, 3),
        raw_core_ms=round(raw_ms, 3),
    )
    return cost, outputs


@dataclass
class _Timer:
    """Times stages with :func:`time_stage` and keeps their costs in order."""

    processes: ProcessSet
    idle_cores: Mapping[str, float]
    services: dict[str, tuple[str, ...]]
    costs: list[StageCost]

    def timed(self, stage: str, fn: Callable[[T], U], inputs: Sequence[T]) -> list[U]:
        cost, out = time_stage(
            stage, fn, inputs, self.processes, self.idle_cores,
            services=self.services.get(stage, ()),
        )  # fmt: skip
        self.costs.append(cost)
        return out


def measure_floor(
    pipeline: SequentialPipeline,
    make: Callable[[], QueryRequest],
    *,
    n: int,
    n_llm: int,
    processes: ProcessSet,
    idle_cores: Mapping[str, float],
    full: bool,
    embed_threads: int = 0,
) -> dict[str, Any]:
    """Time every stage of the mode alone (see the module docstring).

    Args:
        pipeline: a warm :class:`bench.query.baseline.SequentialPipeline` of the mode.
        make: the mode's request factory (unique texts, the mode's route).
        n: calls per stage (each with its own request).
        n_llm: calls of the LLM stage (full mode; each a whole completion).
        processes: the processes whose CPU counts (this one and the services).
        idle_cores: their idle background (:func:`bench.query.cpu.background`).
        full: whether the mode generates.
        embed_threads: intra-op threads of the query embedder while the ``embed`` stage is
            timed, as the retrieval pool runs them (``settings.retrieval.embed_threads``; the
            baseline may use more; :func:`pool_embedder`); ``0`` leaves the embedder as it is.

    Returns:
        ``{"stages": [StageCost as dicts], "core_ms": the floor, "machine_core_ms",
        "raw_core_ms" (the floor without subtracting the services' background),
        "calls": n, "llm_calls", "llm_answered", "idle_background_cores", "embed_threads"}``.

    Raises:
        ValueError: ``n`` or, in full mode, ``n_llm`` below 1.
        RuntimeError: an LLM-stage input came back without passages for an LLM tier.
    """
    if n < 1 or (full and n_llm < 1):
        raise ValueError(f"floor calls must be >= 1: n={n}, n_llm={n_llm}")
    services = dict(STAGE_SERVICES)
    if pipeline.rerank_settings.backend == "llm":
        services["rerank"] = ("llm",)
    timer = _Timer(processes, idle_cores, services, [])
    threads = _query_stages(pipeline, [make() for _ in range(n)], timer, embed_threads)
    answered = _llm_stage(pipeline, make, n_llm, timer) if full else None
    costs = timer.costs
    return {
        "stages": [asdict(c) for c in costs],
        "core_ms": floor_core_ms(costs),
        "machine_core_ms": total(c.machine_core_ms or 0.0 for c in costs),
        "raw_core_ms": total(c.raw_core_ms or 0.0 for c in costs),
        "calls": n,
        "llm_calls": n_llm if full else 0,
        "llm_answered": answered,
        "idle_background_cores": dict(idle_cores),
        "embed_threads": threads,
    }


@contextlib.contextmanager
def pool_embedder(embedder: Any, threads: int) -> Iterator[tuple[Any, int]]:
    """``embedder`` running with ``threads`` intra-op threads, as the retrieval pool runs it
    (``settings.retrieval.embed_threads``), and the thread count it runs with.

    An ONNX model (:class:`ingest.onnx_embedding.OnnxEmbedder`, bare or behind a
    :class:`ingest.embedding.CachedEmbedder`) fixes its session's ``intra_op_num_threads`` when
    it loads, so a second session of the same files with ``threads`` threads is loaded (before
    the block, outside any timing) behind the same cache. torch's setting is process-wide: set
    for the block, restored after. ``threads`` 0, or another embedder (a test's fake): as it
    is. The count reported for 0 is the runtime's default, one thread per core.
    """
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    if isinstance(inner, SentenceTransformerEmbedder):
        import torch

        before = torch.get_num_threads()
        if threads > 0:
            torch.set_num_threads(threads)
        try:
            yield embedder, threads or before
        finally:
            torch.set_num_threads(before)
        return
    if isinstance(inner, OnnxEmbedder) and threads > 0 and threads != inner.num_threads:
        model = OnnxEmbedder(
            inner.model_dir,
            inner.spec,
            role=inner.role,
            batch_size=inner.batch_size,
            num_threads=threads,
        )
        model.warm_up()
        cached = isinstance(embedder, CachedEmbedder)
        yield (CachedEmbedder(model, embedder.cache) if cached else model), threads
        return
    own = inner.num_threads if isinstance(inner, OnnxEmbedder) else 0
    yield embedder, threads or own or os.cpu_count() or 1


def _query_stages(
    p: SequentialPipeline, requests: list[QueryRequest], timer: _Timer, embed_threads: int
) -> int:
    """Embed, caches and route, msearch, fusion, the chunks before (context expansion), rerank
    and evidence, each for all requests; the query embedder's thread count."""
    from workers.evidence.stage import promote_identifiers
    from workers.rerank.select import select_top_k
    from workers.retrieval.hybrid import hits, sources_of

    with pool_embedder(p.embedder, embed_threads) as (embedder, threads):
        vectors = timer.timed("embed", lambda r: embedder.embed([r.query]), requests)

    def caches_route(x: tuple[QueryRequest, Any]) -> None:
        request, vector = x
        version = p.versions.get(request.tenant)
        p.cache.get_exact(request, version)
        p.cache.get_semantic(request, vector[0], version)
        p.router.route(request, vector[0])
        p.cache.remember_query_vector(request, vector[0])

    pairs = list(zip(requests, vectors, strict=True))
    timer.timed("caches_route", caches_route, pairs)
    responses = timer.timed("msearch", lambda x: p.retriever.search_pairs([x[0]], x[1])[0], pairs)
    fused = timer.timed(
        "fusion",
        lambda x: p.retriever.fuse(x[0], hits(x[1][0]), hits(x[1][1])),
        list(zip(requests, responses, strict=True)),
    )
    fused = timer.timed(
        "preceding",
        lambda x: p.retriever.with_preceding([x[1]], sources_of([x[0]]))[0],
        list(zip(responses, fused, strict=True)),
    )

    def rerank(x: tuple[QueryRequest, Any]) -> Any:
        request, candidates = x
        texts = [f"{c.title}\n{c.text}" if c.title else c.text for c in candidates]
        scores = p.reranker.score([(request.query, t) for t in texts]) if texts else []
        top = select_top_k(candidates, scores, request.top_k, p.rerank_settings.max_chunks_per_doc)
        return promote_identifiers(request.query, top, candidates) if p.evidence else top

    tops = timer.timed("rerank", rerank, list(zip(requests, fused, strict=True)))
    stage = p.evidence
    if stage is not None:
        timer.timed(
            "evidence",
            lambda x: stage.run([(x[0], x[1], "small")]),
            list(zip(requests, tops, strict=True)),
        )
    return threads


def _llm_stage(
    p: SequentialPipeline, make: Callable[[], QueryRequest], n_llm: int, timer: _Timer
) -> int:
    """Time ``n_llm`` generator calls on the rerank pool's outputs; how many were answered."""
    inputs: list[RerankedPassages] = []
    for _ in range(n_llm):
        event = p.reranked(make())  # the rerank pool's output, not timed
        if not isinstance(event, RerankedPassages) or not event.passages:
            raise RuntimeError(f"no passages for an LLM tier to time: {event!r}"[:300])
        inputs.append(event)
    outs = timer.timed("llm", lambda e: p.generators[e.tier].run([e]), inputs)
    return sum(
        1
        for out in outs
        for o in out
        if getattr(getattr(o, "event", None), "status", None) == "answered"
    )
