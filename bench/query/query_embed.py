"""``ragstream bench query-embed``: what a question's embedding costs the retrieval pool (issue 37,
item 3).

Over real questions (the evaluation sets), with the query model the retrieval pool builds
(:func:`ingest.factory.build_model`, ``role="query"``, not behind the cache):

(1) **per batch size**: every question embedded in batches of ``B`` (1, 2, 4, 8, 16, 32), each
    size with ``T`` intra-op threads (1 and 2): wall ms and this process's CPU ms per question,
    the best of ``--repeat`` passes after one untimed pass. The retrieval pool embeds its
    whole batch in one call (:meth:`workers.pools.retrieval.RetrievalPool`), so ``B`` is the
    pool's batch under load.
(2) **two pools at once**: two processes (as ``retrieval`` and ``retrieval-2`` run on one
    machine) each embedding every question one at a time for ``--seconds``, with 1 and then 2
    threads each: questions a second together, and CPU ms per question. It says whether a
    second thread per session helps or fights the other pool for the same two cores.
(3) **a repeated question**: the pool's embedder is a
    :class:`ingest.embedding.CachedEmbedder` over :class:`ingest.embedding.EmbeddingCache`
    (the content-hash cache of ingest: an in-process LRU of ``embedding.cache_lru_size``
    vectors in front of Redis), so a question asked again is not embedded again. A repeat's
    lookup against a fresh question's (a miss, then the model, then the writes), ms per
    question.
"""

from __future__ import annotations

import json
import multiprocessing
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from ragstream.settings import Settings

#: Batch sizes of (1).
BATCH_SIZES = (1, 2, 4, 8, 16, 32)
#: Intra-op thread counts of (1) and (2).
THREADS = (1, 2)


def _timed(fn: Any) -> tuple[float, float]:
    """``(wall s, this process's CPU s)`` of ``fn()``."""
    w0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - w0, time.process_time() - c0


def per_batch_size(
    settings: Settings,
    questions: Sequence[str],
    sizes: Sequence[int] = BATCH_SIZES,
    threads: Sequence[int] = THREADS,
    repeat: int = 2,
) -> list[dict[str, Any]]:
    """(1) of the module docstring: ``[{"threads", "batch", "wall_ms", "cpu_ms"}]``, per
    question, the best of ``repeat`` passes over ``questions``."""
    from ingest.factory import build_model

    rows = []
    for t in threads:
        model = build_model(settings, num_threads=t, role="query")
        model.embed(list(questions[:8]))  # loads the session
        for b in sizes:
            batches = [list(questions[i : i + b]) for i in range(0, len(questions), b)]

            def one_pass(batches: list[list[str]] = batches, model: Any = model) -> None:
                for batch in batches:
                    model.embed(batch)

            one_pass()
            best = min((_timed(one_pass) for _ in range(repeat)), key=lambda x: x[0])
            n = len(questions)
            rows.append({
                "threads": t,
                "batch": b,
                "wall_ms": round(1000 * best[0] / n, 2),
                "cpu_ms": round(1000 * best[1] / n, 2),
            })  # fmt: skip
    return rows


def _pool_worker(
    settings: Settings,
    questions: list[str],
    *,
    threads: int,
    start: float,
    seconds: float,
    out: Any,
) -> None:
    from ingest.factory import build_model

    model = build_model(settings, num_threads=threads, role="query")
    model.embed(questions[:4])
    while time.time() < start:
        time.sleep(0.005)
    done, c0 = 0, time.process_time()
    while time.time() < start + seconds:
        model.embed([questions[done % len(questions)]])
        done += 1
    out.put((done, time.process_time() - c0))


def two_pools(
    settings: Settings,
    questions: Sequence[str],
    threads: Sequence[int] = THREADS,
    seconds: float = 10.0,
) -> list[dict[str, Any]]:
    """(2) of the module docstring: ``[{"threads", "per_s", "cpu_ms"}]`` (questions a second of
    both processes together; CPU ms per question)."""
    ctx = multiprocessing.get_context("spawn")
    rows = []
    for t in threads:
        out = ctx.Queue()
        start = time.time() + 8.0  # both loaded before the clock starts
        procs = [
            ctx.Process(
                target=_pool_worker, args=(settings, list(questions), t, start, seconds, out)
            )
            for _ in range(2)
        ]
        for p in procs:
            p.start()
        results = [out.get(timeout=seconds + 120) for _ in procs]
        for p in procs:
            p.join()
        done = sum(r[0] for r in results)
        cpu = sum(r[1] for r in results)
        rows.append({
            "threads": t,
            "per_s": round(done / seconds, 1),
            "cpu_ms": round(1000 * cpu / done, 2) if done else None,
        })  # fmt: skip
    return rows


def repeated_question(settings: Settings, questions: Sequence[str]) -> dict[str, float]:
    """(3) of the module docstring: ``{"miss_ms", "hit_ms"}`` per question, through the pool's
    own :func:`ingest.factory.build_embedder` (the real Redis). Each question gets a unique
    suffix so that the first pass misses; the second pass asks the same texts again."""
    from ingest.factory import build_embedder

    embedder = build_embedder(settings, num_threads=1, role="query")
    tag = uuid.uuid4().hex[:8]
    fresh = [f"{q} [{tag}]" for q in questions]
    embedder.embed(fresh[:2])
    fresh = fresh[2:]
    miss, _ = _timed(lambda: [embedder.embed([q]) for q in fresh])
    hit, _ = _timed(lambda: [embedder.embed([q]) for q in fresh])
    n = len(fresh)
    return {"miss_ms": round(1000 * miss / n, 2), "hit_ms": round(1000 * hit / n, 2)}


def query_embed_command(
    question_files: Sequence[Path], limit: int, seconds: float, out: Path
) -> dict[str, Any]:
    """``ragstream bench query-embed``: (1)-(3) over at most ``limit`` questions of
    ``question_files`` (JSONL with ``question``), written to ``out`` as JSON.

    Raises:
        ValueError: no questions.
    """
    from ragstream.settings import get_settings

    questions: list[str] = []
    for path in question_files:
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                questions.append(json.loads(line)["question"])
    questions = questions[:limit]
    if not questions:
        raise ValueError("no questions")
    settings = get_settings()
    payload = {
        "questions": len(questions),
        "model": settings.embedding.onnx_model,
        "per_batch_size": per_batch_size(settings, questions),
        "two_pools": two_pools(settings, questions, seconds=seconds),
        "repeated_question": repeated_question(settings, questions[:100]),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def render(payload: dict[str, Any]) -> list[Table]:
    """Three tables: per batch size, two pools at once, a repeated question."""
    sizes = Table(title="a question's embedding per batch size (ms per question)")
    for col in ("threads", "batch", "wall ms", "CPU ms"):
        sizes.add_column(col, justify="right")
    for r in payload["per_batch_size"]:
        sizes.add_row(str(r["threads"]), str(r["batch"]), str(r["wall_ms"]), str(r["cpu_ms"]))
    pools = Table(title="two pools at once, one question a call")
    for col in ("threads each", "questions/s", "CPU ms per question"):
        pools.add_column(col, justify="right")
    for r in payload["two_pools"]:
        pools.add_row(str(r["threads"]), str(r["per_s"]), str(r["cpu_ms"]))
    cache = Table(title="a repeated question (Redis content-hash cache)")
    cache.add_column("fresh ms", justify="right")
    cache.add_column("repeat ms", justify="right")
    rep = payload["repeated_question"]
    cache.add_row(str(rep["miss_ms"]), str(rep["hit_ms"]))
    return [sizes, pools, cache]
