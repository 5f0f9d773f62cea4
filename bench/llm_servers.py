"""llama.cpp and vLLM side by side: TTFT, completion tokens/s, requests/s, RSS (issue 40).

Usage (``make bench-llm`` runs the whole sequence, servers included)::

    python -m bench.llm_servers run --server llamacpp=http://127.0.0.1:8082 \\
        --server vllm=http://127.0.0.1:8091 --model gemma3-270m --prefix-cache on --out FILE
    python -m bench.llm_servers table FILE

``run`` sends, to each server in turn, ``rounds x c`` streamed ``/v1/completions`` requests
with ``c`` in flight at a time for each concurrency ``c`` (1, 4, 8 by default). Every prompt is
a completion-style RAG prompt (the catalog's Gemma 3 270M is a base model): a **fixed prefix**
(instructions and a worked example, ~300 tokens, the same in every request) and a **unique
part** (three evidence sentences in a rotating order, a request number and a question, ~120
tokens). Each request decodes exactly ``max_tokens`` tokens (``ignore_eos``, temperature 0), so
both servers do the same work.

Measured per (server, prefix cache, concurrency):

- **TTFT** (time to first token): client clock from sending the request to the first streamed
  chunk with text, in ms; p50 and p99 (nearest rank: with 12-24 requests p99 is the maximum).
- **completion tokens/s**: completion tokens of all requests (``usage``) over the level's wall
  time, summed over the concurrent streams.
- **requests/s**: requests over the level's wall time.
- **RSS**: the largest resident set of the server's process tree (the process listening on the
  port and its descendants: vLLM's API server, engine core and worker), sampled every 0.25 s
  during the level, in MB.
- **prefix cache hit rate**: vLLM's ``vllm:prefix_cache_hits_total`` over
  ``vllm:prefix_cache_queries_total`` across the level (``/metrics``); llama.cpp's
  ``timings.cache_n`` over ``timings.cache_n + timings.prompt_n`` of the requests.

``--prefix-cache off`` sends llama.cpp's ``cache_prompt: false`` with each request; vLLM has no
such request field, so its server is restarted with ``--no-enable-prefix-caching``
(``RAGSTREAM_VLLM__ENABLE_PREFIX_CACHING=false``) for that row. ``--append`` adds rows to an
existing ``FILE``; ``table`` prints the rows as Markdown. Nothing here imports ``infra``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import re
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import psutil

PREFIX = (
    "You answer questions about software documentation. Read the numbered evidence and answer "
    "the question in one short sentence, citing the evidence you used as [n]. If the evidence "
    "does not hold the answer, write: The documents do not say. Keep setting names, commands "
    "and numbers exactly as the evidence writes them, and add nothing that is not there.\n\n"
    "Example.\nContext:\n[1] shared_buffers (integer): Sets the amount of memory the database "
    "server uses for shared memory buffers. The default is typically 128 megabytes (128MB), but "
    "might be less if your kernel settings will not support it (as determined during initdb).\n"
    "[2] This setting must be at least 128 kilobytes. However, settings significantly higher "
    "than the minimum are usually needed for good performance.\n[3] If you have a dedicated "
    "database server with 1GB or more of RAM, a reasonable starting value for shared_buffers is "
    "25% of the memory in your system.\nQuestion: What is the default size of shared_buffers?\n"
    "Answer: The default is typically 128 megabytes (128MB) [1].\n\n"
)
EVIDENCE = (
    "max_connections (integer): Determines the maximum number of concurrent connections to the "
    "database server. The default is typically 100 connections.",
    "superuser_reserved_connections (integer): Determines the number of connection slots that "
    "are reserved for connections by PostgreSQL superusers; the default value is three.",
    "This parameter can only be set at server start, and changing it requires a restart.",
    "json.dumps(obj, *, indent=None) serializes obj to a JSON formatted str; indent pretty-prints "
    "arrays and objects with that indent level.",
    "The with statement is used to wrap the execution of a block with methods defined by a "
    "context manager, so that common try/finally usage patterns can be encapsulated.",
    "os.makedirs(name, mode=0o777, exist_ok=False) is a recursive directory creation function; "
    "with exist_ok=True no error is raised if the target directory already exists.",
)
QUESTIONS = (
    "Which setting limits the number of concurrent connections?",
    "How many connection slots are reserved for superusers by default?",
    "How do I pretty-print JSON in Python?",
    "What does the with statement do?",
    "How do I create a directory and its parents without an error if it exists?",
    "When does a change of max_connections take effect?",
)


def prompt(index: int) -> str:
    """The prompt of request ``index``: :data:`PREFIX`, then a unique context and question."""
    picks = [EVIDENCE[(index + k) % len(EVIDENCE)] for k in range(3)]
    lines = "\n".join(f"[{n}] {text}" for n, text in enumerate(picks, start=1))
    question = QUESTIONS[index % len(QUESTIONS)]
    return f"{PREFIX}Request {index}.\nContext:\n{lines}\nQuestion: {question}\nAnswer:"


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile ``q`` (0-100) of ``values``."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def server_pid(url: str) -> int | None:
    """PID of the process listening on ``url``'s port (``None`` when none is found)."""
    port = httpx.URL(url).port
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
            return conn.pid
    return None


def tree_rss(pid: int) -> int:
    """Resident set size of ``pid`` and its descendants, in bytes (0 when it is gone)."""
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:
            continue
    return total


class RssSampler:
    """Samples :func:`tree_rss` of ``pid`` every ``interval_s`` in a thread; keeps the peak."""

    def __init__(self, pid: int | None, interval_s: float = 0.25) -> None:
        self.pid, self.interval_s, self.peak = pid, interval_s, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while self.pid is not None and not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self.pid))
            self._stop.wait(self.interval_s)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()


def prefix_counters(client: httpx.Client, url: str) -> tuple[float, float] | None:
    """vLLM's ``(prefix_cache_queries, prefix_cache_hits)`` token counters, else ``None``."""
    try:
        text = client.get(f"{url}/metrics", timeout=5).text
    except httpx.HTTPError:
        return None
    found: dict[str, float] = {}
    for name in ("queries", "hits"):
        pattern = rf"^vllm:prefix_cache_{name}_total\{{[^}}]*\}} ([0-9.e+]+)$"
        values = [float(v) for v in re.findall(pattern, text, flags=re.MULTILINE)]
        if values:
            found[name] = sum(values)
    if len(found) != 2:
        return None
    return found["queries"], found["hits"]


async def one_request(client: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """Send one streamed completion; return TTFT (ms), tokens and llama.cpp's cache counts."""
    started = time.perf_counter()
    ttft_ms: float | None = None
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if ttft_ms is None and choices and choices[0].get("text"):
                ttft_ms = (time.perf_counter() - started) * 1000
            usage = chunk.get("usage") or usage
            timings = chunk.get("timings") or timings
    return {
        "ttft_ms": ttft_ms,
        "completion_tokens": int(usage.get("completion_tokens", 0)),
        "prompt_tokens": int(usage.get("prompt_tokens", 0)),
        "cache_n": timings.get("cache_n"),
        "prompt_n": timings.get("prompt_n"),
    }


async def level(
    url: str, bodies: list[dict[str, Any]], concurrency: int
) -> tuple[list[dict[str, Any]], float]:
    """Run ``bodies`` with ``concurrency`` in flight; return the results and wall seconds."""
    gate = asyncio.Semaphore(concurrency)
    # No keep-alive: llama.cpp's HTTP server closes an idle connection after a few seconds, and
    # a request sent on such a pooled connection fails ("Server disconnected").
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:

        async def gated(body: dict[str, Any]) -> dict[str, Any]:
            async with gate:
                return await one_request(client, url, body)

        started = time.perf_counter()
        results = await asyncio.gather(*(gated(b) for b in bodies))
        return list(results), time.perf_counter() - started


def measure(
    name: str,
    url: str,
    model: str,
    concurrency: int,
    *,
    prefix_cache: bool,
    rounds: int,
    max_tokens: int,
    offset: int,
) -> dict[str, Any]:
    """One row: ``rounds x concurrency`` requests to ``url`` at ``concurrency`` in flight.

    Returns:
        The row: server, prefix_cache, concurrency, requests, ttft_p50_ms, ttft_p99_ms,
        completion_tokens_per_s, requests_per_s, rss_mb, prefix_cache_hit_rate, wall_s.
    """
    bodies = []
    for i in range(rounds * concurrency):
        body: dict[str, Any] = {
            "model": model,
            "prompt": prompt(offset + i),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if not prefix_cache:
            body["cache_prompt"] = False  # llama.cpp's switch; vLLM ignores the field
        bodies.append(body)
    with httpx.Client() as client:
        before = prefix_counters(client, url)
        with RssSampler(server_pid(url)) as rss:
            results, wall_s = asyncio.run(level(url, bodies, concurrency))
        after = prefix_counters(client, url)
    ttfts = [r["ttft_ms"] for r in results if r["ttft_ms"] is not None]
    tokens = sum(r["completion_tokens"] for r in results)
    hit_rate: float | None = None
    if before is not None and after is not None and after[0] > before[0]:
        hit_rate = (after[1] - before[1]) / (after[0] - before[0])
    elif all(r["cache_n"] is not None for r in results):
        cached = sum(r["cache_n"] for r in results)
        total = cached + sum(r["prompt_n"] or 0 for r in results)
        hit_rate = cached / total if total else None
    return {
        "server": name,
        "prefix_cache": prefix_cache,
        "concurrency": concurrency,
        "requests": len(results),
        "prompt_tokens_mean": statistics.fmean(r["prompt_tokens"] for r in results),
        "ttft_p50_ms": round(percentile(ttfts, 50), 1),
        "ttft_p99_ms": round(percentile(ttfts, 99), 1),
        "completion_tokens_per_s": round(tokens / wall_s, 1),
        "requests_per_s": round(len(results) / wall_s, 3),
        "rss_mb": round(rss.peak / 1e6),
        "prefix_cache_hit_rate": None if hit_rate is None else round(hit_rate, 3),
        "wall_s": round(wall_s, 1),
    }


def run(args: argparse.Namespace) -> None:
    """The ``run`` subcommand: every server x concurrency; rows written to ``args.out``."""
    out: Path = args.out
    data: dict[str, Any] = {"rows": []}
    if args.append and out.exists():
        data = json.loads(out.read_text())
    data.update(
        {
            "model": args.model,
            "max_tokens": args.max_tokens,
            "rounds": args.rounds,
            "machine": {
                "cpus": psutil.cpu_count(),
                "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
                "python": platform.python_version(),
            },
        }
    )
    for spec in args.server:
        name, _, url = spec.partition("=")
        # One warm-up request (first-call compilation, slot allocation), not counted.
        measure(
            name, url, args.model, 1, prefix_cache=args.prefix_cache == "on", rounds=1,
            max_tokens=4, offset=10_000,
        )  # fmt: skip
        for n, concurrency in enumerate(args.concurrency):
            load = psutil.getloadavg()[0]
            row = measure(
                name,
                url,
                args.model,
                concurrency,
                prefix_cache=args.prefix_cache == "on",
                rounds=args.rounds,
                max_tokens=args.max_tokens,
                offset=1000 * (n + 1) + (0 if args.prefix_cache == "on" else 500),
            )
            row["load_1m_before"] = round(load, 2)
            data["rows"].append(row)
            print(json.dumps(row), flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=2) + "\n")


def table(data: dict[str, Any]) -> str:
    """The rows as a Markdown table."""
    head = (
        "| server | prefix cache | concurrent | TTFT p50 ms | TTFT p99 ms | completion tok/s "
        "| requests/s | RSS MB | prefix hit rate |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in data["rows"]:
        hit = "-" if r["prefix_cache_hit_rate"] is None else f"{r['prefix_cache_hit_rate']:.2f}"
        lines.append(
            f"| {r['server']} | {'on' if r['prefix_cache'] else 'off'} | {r['concurrency']} "
            f"| {r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} "
            f"| {r['completion_tokens_per_s']:.1f} | {r['requests_per_s']:.2f} "
            f"| {r['rss_mb']} | {hit} |"
        )
    return head + "\n".join(lines)


def summary_numbers(data: dict[str, Any]) -> dict[str, Any]:
    """``generation.<server>.*`` keys for ``summary.json``: per server, per prefix-cache mode and
    concurrency, ``c<N>[_nocache].{ttft_p50_ms, ttft_p99_ms, completion_tokens_per_s,
    requests_per_s, rss_mb}``."""
    out: dict[str, Any] = {}
    for r in data["rows"]:
        key = f"c{r['concurrency']}" + ("" if r["prefix_cache"] else "_nocache")
        out.setdefault(r["server"], {})[key] = {
            k: r[k]
            for k in ("ttft_p50_ms", "ttft_p99_ms", "completion_tokens_per_s", "requests_per_s")
        } | {"rss_mb": r["rss_mb"]}
    return out


def main(argv: list[str] | None = None) -> None:
    """Entry point: ``run`` or ``table``."""
    parser = argparse.ArgumentParser(prog="python -m bench.llm_servers")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser("run", help="measure servers; write rows as JSON")
    p_run.add_argument("--server", action="append", required=True, help="NAME=http://host:port")
    p_run.add_argument("--model", required=True, help="model name the servers answer to")
    p_run.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")],
                       default=[1, 4, 8])  # fmt: skip
    p_run.add_argument("--rounds", type=int, default=3, help="requests per level = rounds x c")
    p_run.add_argument("--max-tokens", type=int, default=64)
    p_run.add_argument("--prefix-cache", choices=("on", "off"), default="on")
    p_run.add_argument("--out", type=Path, required=True)
    p_run.add_argument("--append", action="store_true", help="add rows to an existing --out")
    p_table = sub.add_parser("table", help="print a results file as Markdown")
    p_table.add_argument("file", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        run(args)
    else:
        print(table(json.loads(args.file.read_text())))


if __name__ == "__main__":
    main()
