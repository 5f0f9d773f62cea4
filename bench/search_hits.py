"""``python -m bench.search_hits [QUESTIONS.jsonl]``: hit@5 of ``POST /v1/search`` beside
``ragstream eval``'s hybrid hit@5, on the same questions and the same index.

Both sides are run here, against the configured Elasticsearch (``settings.elasticsearch``):

- ``eval``: :func:`bench.evaluation.run.run_evaluation` with the ``hybrid`` mode alone, no
  answers (what ``ragstream eval --modes hybrid --no-generate`` computes);
- ``route``: every question sent to ``POST /v1/search`` (``top_k`` 10, ranker ``hybrid``) of the
  real app in this process (``httpx.ASGITransport``), as a tenant-wide key of ``--tenant``
  (principals ``*``, as the evaluation reads the index), its passages' pages ranked by the same
  :func:`bench.evaluation.metrics.first_relevant_rank`.

Prints hit@5 and MRR@10 of each side and every question whose rank differs (none expected: the
route runs the retrieval pool's code with the same ``top_n``). Exit status 1 when hit@5 differs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from pathlib import Path

import httpx

from api.app import create_app
from api.auth import Principal
from api.deps import principal
from bench.evaluation.metrics import first_relevant_rank, retrieval_metrics
from bench.evaluation.questions import (
    CORPUS_ROOTS,
    SAMPLE_QUESTIONS,
    EvalQuestion,
    load_questions,
    page_of,
)
from bench.evaluation.run import EvalOptions, run_evaluation
from ragstream.settings import Settings, get_settings

#: Passages asked of the route per question (hit@5 needs 5; MRR@10 needs 10).
TOP_K = 10


def eval_ranks(settings: Settings, qs: Sequence[EvalQuestion], tenant: str) -> list[int | None]:
    """Per question, the hybrid mode's rank of its first expected page (``ragstream eval``)."""
    options = EvalOptions(modes=("hybrid",), tenant=tenant, generate=False, off_topic=None)
    report = run_evaluation(settings, qs, options)
    return [record.ranks.get("hybrid") for record in report.questions]


async def route_ranks(
    settings: Settings, qs: Sequence[EvalQuestion], tenant: str
) -> list[int | None]:
    """Per question, the rank of its first expected page among ``POST /v1/search``'s hits."""
    app = create_app(settings)
    app.dependency_overrides[principal] = lambda: Principal(0, tenant, principals=None)
    ranks: list[int | None] = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        for q in qs:
            body = {"query": q.question, "top_k": TOP_K, "history": list(q.history)}
            r = await client.post("/v1/search", json=body, timeout=60)
            r.raise_for_status()
            pages = [page_of(h["source"] or h["doc_id"], CORPUS_ROOTS) for h in r.json()["data"]]
            ranks.append(first_relevant_rank(pages, q.corpus, q.expected_pages))
    return ranks


def main(argv: Sequence[str] | None = None) -> int:
    """Run both sides and print them (see the module docstring); 1 when hit@5 differs."""
    parser = argparse.ArgumentParser(prog="python -m bench.search_hits")
    parser.add_argument("questions", nargs="?", type=Path, default=SAMPLE_QUESTIONS)
    parser.add_argument("--tenant", default="default")
    args = parser.parse_args(argv)
    settings = get_settings()
    qs = load_questions(args.questions)
    by_eval = eval_ranks(settings, qs, args.tenant)
    by_route = asyncio.run(route_ranks(settings, qs, args.tenant))
    answerable = [i for i, q in enumerate(qs) if q.answerable]
    m_eval = retrieval_metrics([by_eval[i] for i in answerable])
    m_route = retrieval_metrics([by_route[i] for i in answerable])
    print(f"questions: {args.questions} ({len(qs)}, {len(answerable)} answerable)")
    print(f"tenant {args.tenant}, index {settings.elasticsearch.index_alias}")
    print(f"ragstream eval hybrid: hit@5 {m_eval.hit_at_5}, MRR@10 {m_eval.mrr_at_10}")
    print(f"POST /v1/search:       hit@5 {m_route.hit_at_5}, MRR@10 {m_route.mrr_at_10}")
    differing = [
        (qs[i].id, by_eval[i], by_route[i])
        for i in answerable
        if by_eval[i] != by_route[i] and not (by_route[i] is None and (by_eval[i] or 0) > TOP_K)
    ]
    for qid, a, b in differing:
        print(f"  {qid}: eval rank {a}, route rank {b}")
    print(f"questions whose rank differs (within the top {TOP_K}): {len(differing)}")
    return 0 if m_eval.hit_at_5 == m_route.hit_at_5 else 1


if __name__ == "__main__":
    sys.exit(main())
