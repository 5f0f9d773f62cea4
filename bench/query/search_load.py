"""Closed-loop load of ``POST /v1/search`` (issue 51, item 4): searches a second and their latency.

``ragstream bench api --search`` runs it beside the answer load of :func:`bench.query.api_probe.
measure_api_load`, with the same question source and the same closed loop, so the two are
comparable: the search route runs the retrieval stage in the API process
(:class:`api.searching.Searcher`), the query route sends the question down the stream path.
"""

from __future__ import annotations

import itertools
import time
import uuid
from typing import Any

import httpx

from bench.query.api_probe import RATE_LIMITED, closed_loop, wait_retry_after
from bench.stats import core_ms_per_request
from replay.measures import percentiles


def search_body(question: str, unique: str, top_k: int) -> dict[str, Any]:
    """The body of one benchmark search: ``question``, ``top_k`` hybrid passages, and the filter
    of the answer load (``content_type`` is ``html`` or ``unique``), so every chunk of the manuals
    passes and no two requests are the same."""
    return {
        "query": question,
        "top_k": top_k,
        "ranker": "hybrid",
        "filters": [{"kind": "term", "field": "content_type", "values": ["html", unique]}],
    }


def measure_api_search_load(
    base_url: str,
    api_key: str,
    questions: list[str],
    concurrency: int,
    *,
    seconds: float = 20.0,
    top_k: int = 5,
    timeout_s: float = 30.0,
    transport: httpx.AsyncBaseTransport | None = None,
) -> dict[str, Any]:
    """Closed-loop throughput and latency of ``POST /v1/search``.

    ``concurrency`` clients each send the next question as soon as their last search came back,
    for ``seconds``; every body carries a filter no other request has (:func:`search_body`).

    Args:
        base_url: the gateway, e.g. ``http://127.0.0.1:8000``.
        api_key: a key of the tenant to search (``Authorization: Bearer``); one without a rate
            limit (``ragstream bench api`` makes one) measures the stack, not the limiter.
        questions: searched in turn.
        concurrency: clients in flight at once.
        seconds: how long the clients keep sending.
        top_k: passages asked of each search.
        timeout_s: the client's limit per request, in seconds.
        transport: an httpx transport (tests); default: the network.

    Returns:
        ``{"concurrency", "seconds", "searched"`` (2xx responses), ``"rate_per_s"`` (searched
        per second of the run), ``"errors"`` (non-2xx other than 429, or transport errors),
        ``"rate_limited"`` (refused with 429 by the key's rate limit), ``"empty"``
        (searches that found no passage; should be 0), ``"p50"``, ``"p95"``, ``"p99"``,
        ``"max"`` (ms of the searched, the whole HTTP round trip), ``"machine_busy_cores"`` and
        ``"machine_core_ms_per_search"`` (every process of the machine, the load generator
        included, from ``/proc/stat``)``}``.
    """
    run_id = uuid.uuid4().hex[:12]  # filters of no earlier run either
    counter = itertools.count()
    latencies: list[float] = []
    tally = {"errors": 0, "rate_limited": 0, "empty": 0}

    async def client_loop(client: httpx.AsyncClient, stop: float) -> None:
        while time.perf_counter() < stop:
            i = next(counter)
            body = search_body(questions[i % len(questions)], f"search-{run_id}-{i}", top_k)
            t0 = time.perf_counter()
            try:
                response = await client.post("/v1/search", json=body)
                result = response.json() if response.is_success else None
            except httpx.HTTPError:
                result = None
            else:
                if response.status_code == RATE_LIMITED:
                    tally["rate_limited"] += 1
                    await wait_retry_after(response, stop)
                    continue
            if not isinstance(result, dict):
                tally["errors"] += 1
                continue
            latencies.append((time.perf_counter() - t0) * 1000)
            tally["empty"] += not result.get("data")

    elapsed, cores = closed_loop(
        client_loop, base_url=base_url, api_key=api_key, concurrency=concurrency,
        seconds=seconds, timeout_s=timeout_s, transport=transport,
    )  # fmt: skip
    return {
        "concurrency": concurrency,
        "seconds": round(elapsed, 2),
        "searched": len(latencies),
        "rate_per_s": round(len(latencies) / elapsed, 2) if elapsed else 0.0,
        **tally,
        **(percentiles(latencies) if latencies else {}),
        "machine_busy_cores": cores,
        "machine_core_ms_per_search": core_ms_per_request(cores, elapsed, len(latencies)),
    }
