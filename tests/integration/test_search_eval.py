"""On the demo's index (both manuals for tenant ``default``, ``make demo``), ``POST /v1/search``
ranks the expected page of every question where ``ragstream eval``'s hybrid mode ranks it:
hit@5 equal (``bench/search_hits.py``; docs/search.md). Read-only on that index; skipped when it
is not there."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from elasticsearch import Elasticsearch

from bench.evaluation.metrics import retrieval_metrics
from bench.evaluation.questions import SAMPLE_QUESTIONS, load_questions
from bench.search_hits import TOP_K, eval_ranks, route_ranks
from ragstream.settings import PROJECT_ROOT, get_settings

#: The shared question set when this checkout has one beside it, else the repository's sample.
SHARED = PROJECT_ROOT.parent / "shared" / "eval" / "questions.jsonl"


def test_search_route_hit_at_5_equals_eval_hybrid() -> None:
    settings = get_settings()
    es = Elasticsearch(settings.elasticsearch.url, request_timeout=10)
    try:
        alias = settings.elasticsearch.index_alias
        indexed = (
            es.indices.exists(index=alias)
            and es.count(index=alias, query={"term": {"tenant": "default"}})["count"]
        )
    finally:
        es.close()
    if not indexed:
        pytest.skip(f"no chunks of tenant default in {alias}: run `make demo` first")
    path: Path = SHARED if SHARED.exists() else SAMPLE_QUESTIONS
    qs = load_questions(path)
    by_eval = eval_ranks(settings, qs, "default")
    by_route = asyncio.run(route_ranks(settings, qs, "default"))
    answerable = [i for i, q in enumerate(qs) if q.answerable]
    hit_eval = retrieval_metrics([by_eval[i] for i in answerable]).hit_at_5
    hit_route = retrieval_metrics([by_route[i] for i in answerable]).hit_at_5
    assert hit_route == hit_eval, (path, hit_eval, hit_route)
    within = [i for i in answerable if (by_eval[i] or TOP_K + 1) <= TOP_K]
    assert [by_route[i] for i in within] == [by_eval[i] for i in within]
