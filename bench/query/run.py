"""``ragstream bench query``: open-loop load through the query pools, what a request costs in
CPU beside the floor of its stages, and a sequential baseline.

Per mode (``retrieval``: retrieval + rerank + evidence, routed to the ``small`` tier and
finished on ``rag.reranked.small``; ``full``: through generation, finished on
``rag.responses``, first token on ``rag.tokens``; ``evidence``: routed to the evidence tier,
no LLM, finished on ``rag.responses``):

1. the sequential baseline (:mod:`bench.query.baseline`) in this process, while no pool
   runs: its closed-loop throughput, latency and CPU per request;
2. the floor (:mod:`bench.query.floor`): each stage of the mode timed alone, in this process,
   with the CPU of this process and of the services it calls; their sum is the floor;
3. the system: ``ragstream worker`` processes of the mode's pools on a topic prefix of their own
   (``bench-<run>-<mode>-``: topics, DLQs and consumer groups are the run's and are deleted
   afterwards), warmed up, then Poisson arrivals for a fixed time per rate: the rates of a
   rising sequence until ``stop_after_failures`` rates in a row miss the SLO, or (a plan with
   a ``search``, the evidence mode's) step then bisect (:class:`bench.stats.RateSearch`);
   per rate the machine's CPU and the serving processes' CPU per request;
4. the baseline again, after the pools have stopped; the throughput of this shared 2-core
   machine drifts by up to a third between minutes, so the faster of the two baselines is the
   one the ratio uses (the conservative choice);
5. the maximum sustainable rate (highest rate meeting the SLO), and the mode's core-ms per
   request at it (:func:`operating_point`) beside the floor. The ratio to the baseline's
   throughput is reported, not judged: on 2 cores the baseline alone keeps 1.7-2.0 cores busy.

Answer caches are kept out of the measurement: every request's text is unique (an opaque tag,
so no exact-cache key repeats); every process of the run (pools and baseline) uses a Redis
database of its own (``redis_db``, flushed before each mode and at the end, so no earlier
answer, embedding or back-pressure signal leaks in or out) with a semantic-cache threshold of
2.0, above any cosine similarity, so semantic lookups still run (their cost is measured) but
never hit. Results that came from a cache anyway are counted as errors (``cached``). The LLM
server's prompt cache is off too (``llm.cache_prompt=false``) unless ``llm_prompt_cache``: the
tag is at the end of the prompt, so a repeated question's prompt would be served from it.
"""

from __future__ import annotations

import os
import platform
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import redis
from elasticsearch import Elasticsearch

from bench.query.baseline import SequentialPipeline, run_baseline
from bench.query.cpu import ProcessSet, background, listening_pids, service_ports
from bench.query.floor import measure_floor
from bench.query.load import (
    Collector,
    LoadTarget,
    RateResult,
    measure_rate,
    request_factory,
    warm_up,
)
from bench.query.plans import DEFAULT_PLANS, EVIDENCE, FULL, RETRIEVAL, ModePlan
from bench.query.questions import load_questions
from bench.stats import (
    Slo,
    consecutive_failures,
    max_sustainable_rate,
    next_rate,
    sustainable_rate,
)
from ragstream.errors import ConfigurationError
from ragstream.settings import PROJECT_ROOT, Settings
from replay.pools import PoolProcesses, apply_overrides
from topics.producer import EventProducer, make_producer
from topics.queries import QueryRequest
from topics.registry import QUERIES, TopicRegistry

#: Pools each mode starts.
POOLS = {
    RETRIEVAL: ("retrieval", "rerank"),
    FULL: ("retrieval", "rerank", "generation-small", "generation-large"),
    EVIDENCE: ("retrieval", "rerank"),
}
#: The answer tier each mode's requests are forced to (``QueryRequest.route``).
ROUTES: dict[str, Literal["evidence", "small", "large"]] = {
    RETRIEVAL: "small",
    FULL: "small",
    EVIDENCE: "evidence",
}
#: A semantic-cache threshold no cosine similarity reaches (similarities are at most 1).
NO_SEMANTIC_HITS = 2.0
#: Passages kept per request (the request's default, which the load uses).
TOP_K = QueryRequest.model_fields["top_k"].default


@dataclass(frozen=True)
class QueryBenchConfig:
    """What to run and against which index.

    Attributes:
        plans: the modes to run, in order.
        tenant: the tenant whose chunks are searched.
        index_alias: the chunk index alias; ``None``: the settings' alias.
        questions: a JSONL question file; ``None``: the sample set or the built-in list.
        redis_db: the Redis database the run owns (flushed); must differ from the settings'.
        stop_after_failures: stop a mode after this many rates in a row miss the SLO.
        seed: seeds the arrivals and the question draw.
        warm_up_timeout_s: how long the pools may take to load and answer a first request.
        log_dir: where the pools' logs go (one folder per run and mode).
        api_url: a running gateway for the exact-cache probe; ``None`` skips it.
        api_key: its API key.
        replicas: processes per pool (e.g. ``{"retrieval": 2}``); pools not named run one.
        baseline_embed_threads: intra-op threads of the baseline's query embedder (``0``: one per
            core, its fastest for one request at a time); the pools use
            ``settings.retrieval.embed_threads``.
        llm_prompt_cache: let the LLM server reuse cached prompt prefixes. Off by default:
            the load repeats a dozen questions whose prompts (same passages) llama.cpp would
            otherwise serve from its prompt cache, for the baseline and the pools alike.
        floor_calls: calls per stage when the floor is measured (each its own request).
        floor_llm_calls: calls of the LLM stage (full mode), each a whole completion.
        idle_s: the idle window in which the services' background CPU is measured (s).
    """

    plans: tuple[ModePlan, ...] = (DEFAULT_PLANS[RETRIEVAL], DEFAULT_PLANS[FULL])
    tenant: str = "default"
    index_alias: str | None = None
    questions: Path | None = None
    redis_db: int = 13
    stop_after_failures: int = 2
    seed: int = 7
    warm_up_timeout_s: float = 300.0
    log_dir: Path = field(default_factory=lambda: PROJECT_ROOT / ".local" / "bench" / "query")
    api_url: str | None = None
    api_key: str | None = None
    replicas: Mapping[str, int] = field(default_factory=dict)
    baseline_embed_threads: int = 0
    llm_prompt_cache: bool = False
    floor_calls: int = 20
    floor_llm_calls: int = 3
    idle_s: float = 2.0


def redis_url_with_db(url: str, db: int) -> str:
    """``url`` pointing at database ``db``.

    Raises:
        ConfigurationError: ``url`` already points at ``db`` (the benchmark flushes its
            database, so it must never be the one the system uses).
    """
    parts = urlsplit(url)
    if parts.path.strip("/") == str(db) or (not parts.path.strip("/") and db == 0):
        raise ConfigurationError(f"the benchmark's Redis database {db} is the system's ({url})")
    return urlunsplit(parts._replace(path=f"/{db}"))


def bench_overrides(settings: Settings, config: QueryBenchConfig, prefix: str) -> dict[str, Any]:
    """The settings every process of one mode runs with (see the module docstring)."""
    return {
        "kafka": {"topic_prefix": prefix},
        "elasticsearch": {"index_alias": config.index_alias or settings.elasticsearch.index_alias},
        "redis": {"url": redis_url_with_db(settings.redis.url, config.redis_db)},
        "cache": {"semantic_threshold": NO_SEMANTIC_HITS},
        "llm": {"cache_prompt": config.llm_prompt_cache},
    }


def _flush(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def count_chunks(settings: Settings, alias: str, tenant: str) -> int:
    """Chunks of ``tenant`` behind ``alias`` (0 if the alias does not exist)."""
    es = Elasticsearch(settings.elasticsearch.url, request_timeout=30)
    try:
        if not es.indices.exists_alias(name=alias):
            return 0
        return int(es.count(index=alias, query={"term": {"tenant": tenant}})["count"])
    finally:
        es.close()


def index_segments(settings: Settings, alias: str) -> dict[str, int]:
    """:func:`ingest.index.segment_stats` of ``alias``."""
    from ingest.index import segment_stats

    es = Elasticsearch(settings.elasticsearch.url, request_timeout=30)
    try:
        return segment_stats(es, alias)
    finally:
        es.close()


def machine() -> str:
    """CPU model, logical CPUs and memory of this host (from ``/proc``), and the OS."""
    model = "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem = ""
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        kb = int(meminfo.read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    return f"{model}, {os.cpu_count()} logical CPUs{mem}, {platform.platform()}"


def _row(r: RateResult) -> str:
    e2e = r.end_to_end_ms
    return (
        f"{r.mode:9} {r.offered_per_s:>6g}/s: {r.ok}/{r.sent} ok, {r.achieved_per_s:g}/s, "
        f"e2e p50 {e2e.get('p50')} p99 {e2e.get('p99')} ms, errors {100 * r.error_rate:.1f}%, "
        f"batches {r.batch_mean}, core-ms/req {r.process_core_ms_per_request} (machine "
        f"{r.core_ms_per_request}), SLO {'met' if r.met_slo else 'missed'}"
    )


def mode_services(settings: Settings, mode: str) -> tuple[str, ...]:
    """The services whose CPU a mode's requests use: Elasticsearch, Redis and Kafka always;
    the LLM server in full mode or when the reranker is the LLM."""
    llm = mode == FULL or settings.rerank.backend == "llm"
    return ("elasticsearch", "redis", "kafka", *(("llm",) if llm else ()))


def operating_point(rates: list[dict[str, Any]], best: float) -> dict[str, Any]:
    """Where a mode's core-ms per request are read: the rate ``best`` (the sustainable rate)
    if it was measured, else the lowest rate measured (``{}`` without rates).

    Returns:
        ``{"at_offered_per_s", "met_slo", "core_ms_per_request"`` (the serving processes'),
        ``"machine_core_ms_per_request"``, ``"core_ms_by_process"}``.
    """
    if not rates:
        return {}
    at = [r for r in rates if r["offered_per_s"] == best]
    r = at[0] if at else min(rates, key=lambda x: x["offered_per_s"])
    return {
        "at_offered_per_s": r["offered_per_s"],
        "met_slo": r["met_slo"],
        "core_ms_per_request": r.get("process_core_ms_per_request"),
        "machine_core_ms_per_request": r.get("core_ms_per_request"),
        "core_ms_by_process": r.get("core_ms_by_process", {}),
    }


def run_mode(
    settings: Settings,
    *,
    config: QueryBenchConfig,
    plan: ModePlan,
    questions: list[str],
    run: str,
    echo: Callable[[str], None],
) -> dict[str, Any]:
    """Baseline, floor, then the pools under load at each rate; the mode's JSON-ready result."""
    prefix = f"bench-{run}-{plan.mode}-"
    overrides = bench_overrides(settings, config, prefix)
    s: Settings = apply_overrides(settings, overrides)
    _flush(s.redis.url)
    full = plan.mode == FULL
    make = request_factory(
        questions, config.tenant, plan.deadline_s, full, config.seed, route=ROUTES[plan.mode]
    )
    baseline_settings = apply_overrides(
        s, {"retrieval": {"embed_threads": config.baseline_embed_threads}}
    )
    pipeline = SequentialPipeline(baseline_settings, full=full)
    try:
        return _run_mode(
            pipeline, s=s, overrides=overrides, config=config, plan=plan, make=make, run=run,
            echo=echo,
        )  # fmt: skip
    finally:
        pipeline.close()


def _rates(
    target: LoadTarget,
    plan: ModePlan,
    *,
    config: QueryBenchConfig,
    slo: Slo,
    first: tuple[float, ...],
    echo: Callable[[str], None],
) -> list[RateResult]:
    """Measure the plan's rates: the fixed sequence ``first``, or its search from ``first[0]``."""
    results: list[RateResult] = []
    search = replace(plan.search, start_per_s=first[0]) if plan.search else None
    pending = list(first)
    while True:
        if search is not None:
            rate = next_rate(search, [(r.offered_per_s, r.met_slo) for r in results])
        else:
            rate = pending.pop(0) if pending else None
        if rate is None:
            return results
        r = measure_rate(
            target,
            mode=plan.mode,
            rate=rate,
            seconds=plan.seconds,
            slo=slo,
            drain_s=plan.deadline_s + 15,
            seed=config.seed,
        )
        echo(_row(r))
        results.append(r)
        if search is None and (
            consecutive_failures([x.met_slo for x in results]) >= config.stop_after_failures
        ):
            return results
        time.sleep(2.0)


def _run_mode(
    pipeline: SequentialPipeline,
    *,
    s: Settings,
    overrides: dict[str, Any],
    config: QueryBenchConfig,
    plan: ModePlan,
    make: Callable[[], QueryRequest],
    run: str,
    echo: Callable[[str], None],
) -> dict[str, Any]:
    prefix = s.kafka.topic_prefix
    services = listening_pids(
        {k: v for k, v in service_ports(s).items() if k in mode_services(s, plan.mode)}
    )
    floor_procs = ProcessSet({k: v for k, v in services.items() if k != "kafka"}, {})
    idle = background(ProcessSet(services, {}), config.idle_s)
    before = run_baseline(
        pipeline, plan.mode, make, plan.baseline_s, processes=floor_procs, idle_cores=idle
    )
    echo(f"{plan.mode} baseline: {before}")
    floor = measure_floor(
        pipeline,
        make,
        n=config.floor_calls,
        n_llm=config.floor_llm_calls,
        processes=floor_procs,
        idle_cores=idle,
        full=plan.mode == FULL,
        embed_threads=s.retrieval.embed_threads,
    )
    parts = ", ".join(f"{x['stage']} {x['core_ms']:g}" for x in floor["stages"])
    echo(f"{plan.mode} floor: {floor['core_ms']} core-ms a request ({parts})")
    slo = Slo(plan.p99_ms)
    rates = plan.offered(before.throughput_per_s)
    procs = PoolProcesses(
        s,
        overrides,
        POOLS[plan.mode],
        config.log_dir / run / plan.mode,
        replicas={p: n for p, n in config.replicas.items() if p in POOLS[plan.mode]},
    )
    collector = Collector(s, plan.mode)
    producer = EventProducer(make_producer(s.kafka, linger_ms=1))
    results: list[RateResult] = []
    try:
        procs.start()
        collector.start()
        queries = TopicRegistry(prefix).name(QUERIES)
        target = LoadTarget(
            producer, queries, collector, make, procs.check_alive, procs.batch_totals,
            processes=ProcessSet(services, {k: p.pid for k, p in procs.procs.items()}),
            idle_cores=idle,
        )  # fmt: skip
        # warm with about what the first step offers in its first two seconds
        warm_up(target, config.warm_up_timeout_s, burst=min(8, max(1, round(2 * rates[0]))))
        results = _rates(target, plan, config=config, slo=slo, first=rates, echo=echo)
    finally:
        producer.close()
        collector.close()
        procs.close()
    after = run_baseline(
        pipeline, plan.mode, make, plan.baseline_s, processes=floor_procs, idle_cores=idle
    )
    echo(f"{plan.mode} baseline after the load: {after}")
    baseline = max(before, after, key=lambda b: b.throughput_per_s)
    verdicts = [(r.offered_per_s, r.met_slo) for r in results]
    best = max_sustainable_rate(verdicts)
    strict = sustainable_rate(verdicts)
    rows = [asdict(r) for r in results]
    return {
        "mode": plan.mode,
        "route": ROUTES[plan.mode],
        "pools": list(POOLS[plan.mode]),
        "processes": {p: len(ports) for p, ports in procs.ports.items()},
        "services": services,
        "topic_prefix": prefix,
        "slo": asdict(slo),
        "plan": asdict(plan),
        "baseline": asdict(baseline),
        "baselines": {"before": asdict(before), "after": asdict(after)},
        "floor": floor,
        "rates": rows,
        "max_sustainable_per_s": best,
        "sustainable_per_s": strict,
        "operating_point": operating_point(rows, strict if plan.search else best),
        "speedup_vs_sequential": (
            round(best / baseline.throughput_per_s, 2) if baseline.throughput_per_s else None
        ),
    }


def _setup(
    settings: Settings, config: QueryBenchConfig, source: str, n: int, chunks: int
) -> dict[str, Any]:
    p = settings.pools
    return {
        "tenant": config.tenant,
        "index_alias": config.index_alias or settings.elasticsearch.index_alias,
        "chunks": chunks,
        "questions": f"{n} from {source}, each made unique",
        "answer_caches": f"unique query text; Redis database {config.redis_db} of the run "
        f"(flushed); semantic threshold {NO_SEMANTIC_HITS} (lookups run, never hit)",
        "index_segments": index_segments(
            settings, config.index_alias or settings.elasticsearch.index_alias
        ),
        "llm_prompt_cache": "on" if config.llm_prompt_cache else "off (cache_prompt: false)",
        "floor": f"each stage alone, {config.floor_calls} calls a stage "
        f"({config.floor_llm_calls} of the LLM in full mode); CPU of this process and the "
        f"services less their idle background ({config.idle_s:g} s window)",
        "routes": ", ".join(f"{m} -> {r}" for m, r in ROUTES.items()),
        "rerank_backend": settings.rerank.backend,
        "embed_threads": f"pools {settings.retrieval.embed_threads}, baseline "
        f"{config.baseline_embed_threads} (0: one per core)",
        "replicas": dict(config.replicas) or "one process per pool",
        "retrieval": f"top_n {settings.retrieval.top_n}, top_k {TOP_K} (request default), "
        f"RRF k {settings.retrieval.rrf_k}",
        "batching": ", ".join(
            f"{name} {getattr(p, name).max_batch}/{getattr(p, name).max_wait_ms} ms"
            for name in ("retrieval", "rerank", "generation_small", "generation_large")
        ),
        "llm": f"{settings.llm.model_path or 'packaged Gemma 3 270M Q4_K_M'}, "
        f"{settings.llm.n_parallel} slots, n_ctx {settings.llm.n_ctx}, "
        f"max_tokens {settings.llm.max_tokens}, {settings.llm.n_threads} threads",
    }


def run_query_bench(
    settings: Settings, config: QueryBenchConfig, echo: Callable[[str], None] = print
) -> dict[str, Any]:
    """Run every plan of ``config``; return the JSON-ready payload.

    Raises:
        RuntimeError: the index holds no chunks of the tenant, or a pool failed to start.
        ConfigurationError: ``config.redis_db`` is the system's Redis database.
    """
    alias = config.index_alias or settings.elasticsearch.index_alias
    chunks = count_chunks(settings, alias, config.tenant)
    if not chunks:
        raise RuntimeError(
            f"no chunks of tenant {config.tenant!r} behind {alias!r}: ingest first, e.g. "
            f"ragstream ingest /usr/share/doc/python3.11/html --tenant {config.tenant}"
        )
    questions, source = load_questions(config.questions)
    run = uuid.uuid4().hex[:8]
    started = time.monotonic()
    payload: dict[str, Any] = {
        "bench": "query",
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": machine(),
        "setup": _setup(settings, config, source, len(questions), chunks),
        "modes": [],
    }
    try:
        for plan in config.plans:
            mode = run_mode(
                settings, config=config, plan=plan, questions=questions, run=run, echo=echo
            )
            payload["modes"].append(mode)
    finally:
        _flush(redis_url_with_db(settings.redis.url, config.redis_db))
    payload["api_exact_cache_hit"] = probe_exact_cache_hit(
        config.api_url, config.api_key, questions[0]
    )
    payload["elapsed_s"] = round(time.monotonic() - started, 1)
    return payload


def probe_exact_cache_hit(
    api_url: str | None, api_key: str | None, question: str
) -> dict[str, Any]:
    """``{"measured", "latency_ms", "note"}`` of an exact answer-cache hit through ``api_url``
    (:func:`bench.query.api_probe.measure_api_exact_cache_hit`); ``measured`` is False,
    with the reason in ``note``, without a gateway or when it fails."""
    if not (api_url and api_key):
        return {
            "measured": False,
            "note": "not measured: pass --api-url and --api-key of a running gateway "
            "(POST /v1/query) to time an exact answer-cache hit over HTTP",
        }
    import httpx

    from bench.query.api_probe import measure_api_exact_cache_hit

    try:
        result = measure_api_exact_cache_hit(api_url, api_key, question)
    except (httpx.HTTPError, RuntimeError) as exc:  # the modes' results are kept regardless
        return {"measured": False, "note": f"not measured: {api_url}: {exc}"}
    return {"measured": True, "latency_ms": result, "note": f"{api_url} /v1/query"}
