"""Calibrate the learned reranker's abstention threshold (``rerank.min_score``) on labelled sets.

For every question of the given sets (follow-ups left out: their meaning needs the conversation),
hybrid retrieval gives the fused candidates (the retrieval pool's components, the configured
alias, read-only), the ONNX cross-encoder scores the first ``rerank.top_n`` of them as the
rerank pool does, and the question's **best score** is what the evidence stage's gate reads
(:attr:`workers.evidence.select.Evidence.rerank_score`). A question should be refused when its
kind is ``absent`` or ``off_topic``, answered otherwise. For each threshold of a grid the sweep
reports the share of answerable questions the gate alone would refuse (false refusals) and the
share of absent/off-topic ones it refuses.

Run: ``python -m bench.evaluation.abstain --model DIR SET.jsonl [SET.jsonl ...]`` (``--index``,
``--tenant``: another corpus, e.g. ``bench/evaluation/tenant_corpora.py``'s). Never on a
set that has not been judged (a blind set before its answers are read).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: Kinds whose questions the documents do not answer.
REFUSE_KINDS = frozenset({"absent", "off_topic"})
#: Thresholds swept.
GRID = tuple(round(0.02 * i, 2) for i in range(1, 50))


def best_scores(
    settings: Any, model_dir: Path, questions: Sequence[str], tenant: str
) -> list[float]:
    """The best rerank score of each question's first ``rerank.top_n`` fused candidates."""
    from bench.query.rerank_cost import fused_candidates
    from workers.rerank.onnx_cross_encoder import OnnxCrossEncoder
    from workers.rerank.select import score_top_n

    rr = settings.rerank
    reranker = OnnxCrossEncoder(
        model_dir, batch_size=rr.batch_size, max_length=rr.max_length, num_threads=rr.threads
    )
    fused = fused_candidates(settings, questions, tenant, settings.retrieval.top_n)
    out: list[float] = []
    for start in range(0, len(fused), 8):
        for scores in score_top_n(reranker.score, fused[start : start + 8], rr.top_n):
            out.append(max(scores, default=0.0))
    return out


def sweep(rows: Sequence[dict[str, Any]], grid: Sequence[float] = GRID) -> list[dict[str, Any]]:
    """For each threshold: false refusals (answerable refused / answerable) and refused
    absent/off-topic (refused / such questions), from rows with ``refuse`` and ``best``."""
    answerable = [r for r in rows if not r["refuse"]]
    refusable = [r for r in rows if r["refuse"]]
    out = []
    for t in grid:
        fr = sum(r["best"] < t for r in answerable)
        ok = sum(r["best"] < t for r in refusable)
        out.append(
            {
                "threshold": t,
                "false_refusals": fr,
                "answerable": len(answerable),
                "false_refusal_rate": round(fr / len(answerable), 3) if answerable else None,
                "refused": ok,
                "refusable": len(refusable),
                "refused_rate": round(ok / len(refusable), 3) if refusable else None,
            }
        )
    return out


def main(argv: Sequence[str] | None = None) -> None:
    """Score the sets and print the sweep (and write it as JSON)."""
    from bench.evaluation.questions import load_questions
    from ragstream.settings import get_settings

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sets", nargs="+", type=Path)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--tenant", default="default")
    parser.add_argument("--index", default=None, help="Chunk index alias; default: settings.")
    parser.add_argument("--out", type=Path, default=Path(".local/bench/abstain.json"))
    args = parser.parse_args(argv)
    settings = get_settings()
    if args.index:
        es = settings.elasticsearch.model_copy(update={"index_alias": args.index})
        settings = settings.model_copy(update={"elasticsearch": es})
    rows: list[dict[str, Any]] = []
    for path in args.sets:
        if "blind-2026-12-07" in path.name:
            raise SystemExit(f"{path} is not judged yet: never calibrate on it")
        qs = [q for q in load_questions(path) if q.kind != "followup"]
        scores = best_scores(settings, args.model, [q.question for q in qs], args.tenant)
        for q, best in zip(qs, scores, strict=True):
            rows.append(
                {
                    "set": path.name,
                    "id": q.id,
                    "kind": q.kind,
                    "refuse": q.kind in REFUSE_KINDS,
                    "best": round(best, 4),
                }
            )
    table = sweep(rows)
    print(f"{'t':>5} {'false refusals':>16} {'absent/off-topic refused':>26}")
    for r in table:
        print(
            f"{r['threshold']:>5} {r['false_refusals']:>7}/{r['answerable']:<8} "
            f"{r['refused']:>12}/{r['refusable']:<8}"
        )
    for kind in sorted({r["kind"] for r in rows}):
        of_kind = sorted(r["best"] for r in rows if r["kind"] == kind)
        print(
            f"{kind:>10}: n={len(of_kind)} min={of_kind[0]:.3f} "
            f"median={of_kind[len(of_kind) // 2]:.3f} max={of_kind[-1]:.3f}"
        )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                "model": str(args.model),
                "sets": [str(p) for p in args.sets],
                "rows": rows,
                "sweep": table,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
