"""``ragstream bench rerank``: core-ms a question of the ONNX cross-encoder for top-N candidates.

The rerank pool scores the first ``rerank.top_n`` fused candidates of every request of a batch in
one call (:func:`workers.rerank.select.score_top_n`). This benchmark retrieves the fused
candidates of real questions once (the retrieval pool's components against the configured
alias, read-only), then, for each N, scores batches of ``batch`` questions the way the pool does,
on the pool's thread count (``rerank.threads``), and reports per question: CPU time of this
process (``time.process_time``: every thread of the process; onnxruntime's intra-op threads
included) and wall time, and the pairs scored. Nothing else runs in the timed section (no
Kafka, no evidence stage).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from ragstream.settings import Settings
from replay.measures import percentiles


def fused_candidates(
    settings: Settings, questions: Sequence[str], tenant: str, top_n: int
) -> list[tuple[str, list[str]]]:
    """``(question, passages as the rerank pool writes them)`` for every question: the first
    ``top_n`` fused candidates of hybrid retrieval (read-only)."""
    from topics.queries import QueryRequest
    from workers.pools.components import build_retrieval_components
    from workers.pools.rerank import _passage

    embedder, retriever, *_ = build_retrieval_components(settings)
    now = dt.datetime.now(dt.UTC)
    requests = [
        QueryRequest(tenant=tenant, query=q, deadline=now + dt.timedelta(minutes=10), top_n=top_n)
        for q in questions
    ]
    out: list[tuple[str, list[str]]] = []
    for start in range(0, len(requests), 16):
        chunk = requests[start : start + 16]
        vectors = embedder.embed([r.query for r in chunk])
        for r, candidates in zip(chunk, retriever.search_batch(chunk, vectors), strict=True):
            out.append((r.query, [_passage(c) for c in candidates]))
    return out


def measure(
    reranker: Any,
    fused: Sequence[tuple[str, list[str]]],
    ns: Sequence[int],
    batch: int,
    repeats: int = 1,
) -> list[dict[str, Any]]:
    """Score ``fused`` in batches of ``batch`` questions for each N of ``ns``.

    Returns:
        One row per N: ``n``, ``questions``, ``pairs_per_question`` (mean), ``core_ms``
        (CPU ms a question, mean over the run) and ``wall_ms`` (wall ms a question), and the
        p50/p95 of the per-batch wall ms a question.

    Raises:
        ValueError: ``batch`` < 1 or nothing to score.
    """
    from workers.rerank.select import score_top_n

    if batch < 1 or not fused:
        raise ValueError(f"need batch >= 1 and questions (batch={batch}, {len(fused)})")
    reranker.score([(fused[0][0], p) for p in fused[0][1][:4]])  # warm: load, first run
    rows = []
    for n in ns:
        per_batch: list[float] = []
        pairs = 0
        cpu0, wall0 = time.process_time(), time.perf_counter()
        for _ in range(repeats):
            for start in range(0, len(fused), batch):
                chunk = fused[start : start + batch]
                t0 = time.perf_counter()
                score_top_n(reranker.score, chunk, n)
                per_batch.append((time.perf_counter() - t0) * 1000 / len(chunk))
                pairs += sum(min(n, len(p)) for _, p in chunk)
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        questions = len(fused) * repeats
        pct = percentiles(per_batch)
        rows.append(
            {
                "n": n,
                "questions": questions,
                "pairs_per_question": round(pairs / questions, 1),
                "core_ms": round(cpu * 1000 / questions, 1),
                "wall_ms": round(wall * 1000 / questions, 1),
                "batch_wall_ms_p50": round(pct["p50"], 1),
                "batch_wall_ms_p95": round(pct["p95"], 1),
            }
        )
    return rows


def render(payload: dict[str, Any]) -> Table:
    """The rows as a table."""
    table = Table(
        title=f"rerank cost: {payload['model']} (threads {payload['threads']}, "
        f"batch {payload['batch']} questions, {payload['questions_file']})"
    )
    for col in ("N", "pairs/q", "core-ms/q", "wall-ms/q", "p50 wall/q", "p95 wall/q"):
        table.add_column(col, justify="right")
    for r in payload["rows"]:
        table.add_row(
            str(r["n"]),
            str(r["pairs_per_question"]),
            str(r["core_ms"]),
            str(r["wall_ms"]),
            str(r["batch_wall_ms_p50"]),
            str(r["batch_wall_ms_p95"]),
        )
    return table


def run(
    settings: Settings,
    model_dir: Path,
    questions: Sequence[str],
    *,
    ns: Sequence[int],
    batch: int,
    tenant: str,
    repeats: int = 1,
) -> dict[str, Any]:
    """Retrieve once, then :func:`measure` the ONNX reranker of ``model_dir``."""
    from workers.rerank.onnx_cross_encoder import OnnxCrossEncoder

    rr = settings.rerank
    reranker = OnnxCrossEncoder(
        model_dir, batch_size=rr.batch_size, max_length=rr.max_length, num_threads=rr.threads
    )
    reranker.warm_up()
    fused = fused_candidates(settings, questions, tenant, max(ns))
    return {
        "bench": "rerank",
        "model": str(model_dir),
        "trained": reranker.manifest.get("trained"),
        "threads": rr.threads,
        "batch_size": rr.batch_size,
        "max_length": rr.max_length,
        "batch": batch,
        "rows": measure(reranker, fused, ns, batch, repeats),
    }
