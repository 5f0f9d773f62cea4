"""Latency of an exact answer-cache hit through the HTTP API (``POST /v1/query``).

Not part of ``make bench`` until the query API exists; ``ragstream bench query --api-url URL
--api-key KEY`` runs it against a running gateway and its pools.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from bench.query.cpu import SELF, ProcessSet, attributed_ms, background_all
from replay.measures import percentiles

#: The status the gateway answers when a key's per-minute rate limit is spent
#: (``api.deps.check_rate``): the benchmarks count it apart and go on.
RATE_LIMITED = 429


def measure_api_exact_cache_hit(
    base_url: str,
    api_key: str,
    question: str,
    *,
    repeats: int = 50,
    timeout_s: float = 120.0,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, Any]:
    """p50/p95/p99 (ms) of ``repeats`` identical queries after a first one fills the cache.

    The first request (sync, not measured) is answered by the pools and its answer cached;
    each repeat has the same text and parameters, so it is an exact answer-cache hit. The time
    is the whole HTTP round trip as a client sees it. The API's result says whether it came
    from a cache (``cached``); repeats that did not are counted in ``misses``.

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:8000``.
        api_key: a key of the tenant to ask (``Authorization: Bearer``).
        question: the question to repeat.
        repeats: measured requests.
        timeout_s: the sync wait asked of the API and the client's limit, in seconds.
        transport: an httpx transport (tests); default: the network.

    Returns:
        ``{"p50", "p95", "p99", "max"}`` in ms of every repeat answered, ``"repeats"``,
        ``"misses"`` (repeats not served from a cache), ``"rate_limited"`` (repeats refused
        with 429 by the key's rate limit: counted, left out of the percentiles) and
        ``"first_ms"`` (the priming request).

    Raises:
        httpx.HTTPStatusError: a request was answered with a non-2xx status other than 429.
        httpx.HTTPError: the gateway could not be reached.
        RuntimeError: the priming request was not answered (so nothing could be cached),
            429 included; every repeat was refused with 429.
    """
    headers = {"Authorization": f"Bearer {api_key}"}
    body = {"query": question, "mode": "sync", "timeout_s": timeout_s}
    with httpx.Client(
        base_url=base_url, headers=headers, timeout=timeout_s + 10, transport=transport
    ) as client:
        t0 = time.perf_counter()
        primed = client.post("/v1/query", json=body)
        first_ms = (time.perf_counter() - t0) * 1000
        if primed.status_code == RATE_LIMITED:
            raise RuntimeError("the priming query was refused by the key's rate limit (429)")
        first = primed.raise_for_status().json()
        if first.get("status") != "answered":
            raise RuntimeError(f"the priming query was not answered: {first.get('status')}")
        latencies, misses, limited = [], 0, 0
        for _ in range(repeats):
            t0 = time.perf_counter()
            response = client.post("/v1/query", json=body)
            if response.status_code == RATE_LIMITED:
                limited += 1
                continue
            result = response.raise_for_status().json()
            latencies.append((time.perf_counter() - t0) * 1000)
            misses += not result.get("cached", False)
    if not latencies:
        raise RuntimeError(f"all {repeats} repeats were refused by the key's rate limit (429)")
    return {
        **percentiles(latencies),
        "repeats": repeats,
        "misses": misses,
        "rate_limited": limited,
        "first_ms": round(first_ms, 2),
    }


def measure_api_tier_latency(
    base_url: str,
    api_key: str,
    questions: list[str],
    route: str,
    *,
    timeout_s: float = 120.0,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, Any]:
    """End-to-end latency (ms) of fresh answers of one answer tier through ``POST /v1/query``.

    Each question is asked once, one after the other (a quiet stack: the latency a single user
    sees), with ``"route": route`` (``evidence``, ``small`` or ``large``). Answers the API
    flags ``cached`` (a question asked before with the same route) are counted apart and left
    out of the percentiles: ask questions the stack has not answered yet.

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:8000``.
        api_key: a key of the tenant to ask (``Authorization: Bearer``).
        questions: distinct questions.
        route: the forced answer tier.
        timeout_s: the sync wait asked of the API and the client's limit, in seconds.
        transport: an httpx transport (tests); default: the network.

    Returns:
        ``{"p50", "p95", "p99", "max"}`` in ms of the fresh answers, ``"asked"``,
        ``"answered"``, ``"cached"`` (left out), ``"rate_limited"`` (refused with 429 by the
        key's rate limit: left out), ``"tiers"`` (the tier of each answer, counted) and
        ``"statuses"`` (each result status, counted).

    Raises:
        httpx.HTTPError: the gateway could not be reached, or answered a non-2xx status other
            than 429.
    """
    headers = {"Authorization": f"Bearer {api_key}"}
    latencies: list[float] = []
    cached = answered = limited = 0
    tiers: dict[str, int] = {}
    statuses: dict[str, int] = {}
    with httpx.Client(
        base_url=base_url, headers=headers, timeout=timeout_s + 10, transport=transport
    ) as client:
        for question in questions:
            body = {"query": question, "mode": "sync", "timeout_s": timeout_s, "route": route}
            t0 = time.perf_counter()
            response = client.post("/v1/query", json=body)
            ms = (time.perf_counter() - t0) * 1000
            if response.status_code == RATE_LIMITED:
                limited += 1
                continue
            result = response.raise_for_status().json()
            status = str(result.get("status"))
            statuses[status] = statuses.get(status, 0) + 1
            if result.get("cached", False):
                cached += 1
                continue
            answered += status == "answered"
            tier = str(result.get("tier") or "-")
            tiers[tier] = tiers.get(tier, 0) + 1
            latencies.append(ms)
    return {
        **(percentiles(latencies) if latencies else {}),
        "asked": len(questions),
        "answered": answered,
        "cached": cached,
        "rate_limited": limited,
        "tiers": tiers,
        "statuses": statuses,
    }


def measure_api_load(
    base_url: str,
    api_key: str,
    questions: list[str],
    concurrency: int,
    *,
    seconds: float = 20.0,
    route: str = "evidence",
    timeout_s: float = 30.0,
    transport: httpx.AsyncBaseTransport | None = None,
    processes: ProcessSet | None = None,
    idle_s: float = 3.0,
) -> dict[str, Any]:
    """Closed-loop throughput of fresh answers through ``POST /v1/query`` (issue 26, item 6).

    ``concurrency`` clients each send the next question as soon as their last answer came back,
    for ``seconds``. No cache can answer: every request carries a filter no other request has
    and every chunk of the manuals passes (``content_type`` is ``html`` or a value unique to
    the request), so the exact and semantic answer caches, keyed by the filters, miss. The
    answers are forced to ``route`` (the evidence tier by default).

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:8000``.
        api_key: a key of the tenant to ask (``Authorization: Bearer``); its rate limit must
            allow the load.
        questions: asked in turn.
        concurrency: clients in flight at once.
        seconds: how long the clients keep sending.
        route: the forced answer tier.
        timeout_s: the sync wait asked of the API and the client's limit, in seconds.
        transport: an httpx transport (tests); default: the network.
        processes: the stack's processes (:func:`bench.query.cpu.stack_processes`): when given,
            each one's CPU time over the run, less its background over ``idle_s`` seconds
            before it (:func:`bench.query.cpu.background_all`), is split per answer.
        idle_s: seconds of that idle window.

    Returns:
        ``{"concurrency", "seconds", "answered", "rate_per_s"`` (answered per second of the
        run), ``"errors"`` (non-2xx other than 429, transport errors or answers not
        ``answered``), ``"rate_limited"`` (refused with 429 by the key's rate limit; a client
        refused waits for its ``Retry-After`` or the run's end, so a limited run measures the
        limiter, not the stack),
        ``"cached"`` (should be 0), ``"p50"``, ``"p95"``, ``"p99"``, ``"max"`` (ms of the answered),
        ``"machine_busy_cores"`` and ``"machine_core_ms_per_answer"`` (every process of the
        machine, the load generator included, from ``/proc/stat``), ``"stage_ms"`` (the mean
        of each stage of the answers' traces, and ``unaccounted``: the client's latency less
        the stages: the API, Kafka's hops and the reply's way back)``}``; with ``processes``
        also ``"core_ms_by_process"`` (core-ms per answer of each process, the load generator
        as ``bench``) and ``"stack_core_ms_per_answer"`` (their sum without ``bench``).
    """
    import itertools
    import uuid

    from bench.stats import core_ms_per_request

    run_id = uuid.uuid4().hex[:12]  # filters of no earlier run either
    counter = itertools.count()
    latencies: list[float] = []
    tally = {"errors": 0, "rate_limited": 0, "cached": 0}

    async def client_loop(client: httpx.AsyncClient, stop: float) -> None:
        while time.perf_counter() < stop:
            i = next(counter)
            unique = f"load-{run_id}-{i}"
            body = {
                "query": questions[i % len(questions)],
                "mode": "sync",
                "timeout_s": timeout_s,
                "route": route,
                "filters": [{"kind": "term", "field": "content_type", "values": ["html", unique]}],
            }
            t0 = time.perf_counter()
            try:
                response = await client.post("/v1/query", json=body)
                result = response.json() if response.is_success else {}
            except httpx.HTTPError:
                result = {}
            else:
                if response.status_code == RATE_LIMITED:
                    tally["rate_limited"] += 1
                    await wait_retry_after(response, stop)
                    continue
            if result.get("status") != "answered":
                tally["errors"] += 1
                continue
            tally["cached"] += bool(result.get("cached"))
            latencies.append((time.perf_counter() - t0) * 1000)
            stages = {t["stage"]: float(t["duration_ms"]) for t in result.get("trace", [])}
            stages["unaccounted"] = latencies[-1] - sum(stages.values())
            for stage, ms in stages.items():
                stage_ms.setdefault(stage, []).append(ms)

    stage_ms: dict[str, list[float]] = {}
    idle = background_all(processes, idle_s) if processes else {}
    before = processes.sample() if processes else {}
    elapsed, cores = closed_loop(
        client_loop, base_url=base_url, api_key=api_key, concurrency=concurrency,
        seconds=seconds, timeout_s=timeout_s + 10, transport=transport,
    )  # fmt: skip
    return {
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "answered": len(latencies),
        "rate_per_s": round(len(latencies) / elapsed, 2) if elapsed else 0.0,
        **tally,
        **(percentiles(latencies) if latencies else {}),
        "machine_busy_cores": cores,
        "machine_core_ms_per_answer": core_ms_per_request(cores, elapsed, len(latencies)),
        "stage_ms": {k: round(sum(v) / len(v), 1) for k, v in stage_ms.items()},
        **(split_by_process(processes, before, idle, elapsed, len(latencies)) if processes else {}),
    }


def split_by_process(
    processes: ProcessSet,
    before: dict[str, float],
    idle: dict[str, float],
    elapsed: float,
    answered: int,
) -> dict[str, Any]:
    """``{"core_ms_by_process", "stack_core_ms_per_answer"}`` of a load that ran ``elapsed``
    seconds since the sample ``before`` and answered ``answered`` (see
    :func:`measure_api_load`); empty values when nothing was answered."""
    used = attributed_ms(before, processes.sample(), elapsed, idle)
    if not answered:
        return {"core_ms_by_process": {}, "stack_core_ms_per_answer": None}
    by = {k: round(v / answered, 1) for k, v in sorted(used.items(), key=lambda kv: -kv[1])}
    stack = round(sum(v for k, v in used.items() if k != SELF) / answered, 1)
    return {"core_ms_by_process": by, "stack_core_ms_per_answer": stack}


async def wait_retry_after(response: httpx.Response, stop: float) -> None:
    """Sleep for a 429 ``response``'s ``Retry-After`` seconds (1 s when it has none), at most
    until ``stop`` (:func:`time.perf_counter` time): a refused closed-loop client waits for the
    next window instead of hammering the gateway with refused requests."""
    import asyncio

    try:
        retry_s = float(response.headers.get("retry-after", "1"))
    except ValueError:
        retry_s = 1.0
    await asyncio.sleep(max(0.0, min(retry_s, stop - time.perf_counter())))


def closed_loop(
    client_loop: Callable[[httpx.AsyncClient, float], Awaitable[None]],
    *,
    base_url: str,
    api_key: str,
    concurrency: int,
    seconds: float,
    timeout_s: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[float, float | None]:
    """Run ``concurrency`` copies of ``client_loop(client, stop)`` over one HTTP client (one
    connection each, ``Authorization: Bearer api_key``) until each returns after ``stop``
    (``seconds`` from the start, :func:`time.perf_counter` time).

    Returns:
        ``(elapsed seconds, busy cores of the whole machine over the run)``, the load
        generator included (:func:`bench.stats.busy_cores`; ``None`` where ``/proc/stat``
        cannot be read).
    """
    import asyncio

    from bench.stats import CpuSample, busy_cores

    async def run() -> float:
        headers = {"Authorization": f"Bearer {api_key}"}
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(
            base_url=base_url, headers=headers, timeout=timeout_s, limits=limits,
            transport=transport,
        ) as client:  # fmt: skip
            t0 = time.perf_counter()
            stop = t0 + seconds
            await asyncio.gather(*(client_loop(client, stop) for _ in range(concurrency)))
            return time.perf_counter() - t0

    cpu0 = CpuSample.now()
    elapsed = asyncio.run(run())
    return elapsed, busy_cores(cpu0, CpuSample.now())
