"""The rerank pool: fused candidates in, the top-K passages out on the chosen tier's topic.

Per batch: ONE scoring call for the (query, passage) pairs of every request in the batch, then
the top K of each request in score order with at most ``max_chunks_per_doc`` per document.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from ragstream.settings import PoolSettings, RerankSettings, Settings
from topics.registry import RERANKED_BY_TIER, RESPONSES, RETRIEVED
from topics.reranked import RerankedPassages
from topics.retrieved import Candidate, RetrievedCandidates
from workers.errors import dead_letter_hook, expired_hook
from workers.registry import register_pool
from workers.rerank.select import select_top_k
from workers.runtime.build import pool_handler
from workers.runtime.handler import Emit, Handler, Outcome, derive_event_id
from workers.runtime.metrics import MODEL_CALLS


class Scores(Protocol):
    """Relevance scores of ``(query, passage)`` pairs, higher is more relevant."""

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]: ...


def rerank_handler(
    reranker: Scores,
    settings: RerankSettings,
    *,
    pool: PoolSettings,
    group: str | None = None,
) -> Handler[RetrievedCandidates]:
    """The rerank pool's handler."""

    def fn(events: list[RetrievedCandidates]) -> Sequence[Outcome]:
        started = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        pairs = [(e.request.query, _passage(c)) for e in events for c in e.candidates]
        scores = reranker.score(pairs) if pairs else []
        if pairs:
            MODEL_CALLS.labels("rerank").inc()
        took = (time.perf_counter() - t0) * 1000
        out: list[Outcome] = []
        offset = 0
        for e in events:
            n = len(e.candidates)
            top = select_top_k(
                e.candidates,
                scores[offset : offset + n],
                e.request.top_k,
                settings.max_chunks_per_doc,
            )
            offset += n
            passages = RerankedPassages(
                event_id=derive_event_id(e.event_id, "rerank"),
                tenant=e.tenant,
                request=e.request,
                passages=tuple(top),
                tier=e.tier,
                index_version=e.index_version,
                trace=e.trace,
            ).traced("rerank", started, took, batch=len(events), pairs=len(pairs))
            out.append(Emit(RERANKED_BY_TIER[e.tier], passages))
        return out

    return pool_handler(
        "rerank",
        input=RETRIEVED,
        outputs=(*RERANKED_BY_TIER.values(), RESPONSES),
        fn=fn,
        pool=pool,
        group=group,
        on_expired=expired_hook("rerank"),
        on_dead_letter=dead_letter_hook("rerank"),
    )


def _passage(c: Candidate) -> str:
    return f"{c.title}\n{c.text}" if c.title else c.text


def run_rerank_pool(settings: Settings) -> Callable[[], None]:
    """Pool factory of ``ragstream worker rerank``."""
    from workers.rerank.factory import make_reranker
    from workers.runtime.build import build_runner, pool_group, until_signalled

    reranker = make_reranker(settings.rerank, settings.llm.base_url)
    warm = getattr(reranker, "warm_up", None)
    if callable(warm):
        warm()
    handler = rerank_handler(
        reranker,
        settings.rerank,
        pool=settings.pools.rerank,
        group=pool_group(settings, "rerank"),
    )
    runner = build_runner(handler, settings, settings.pools.rerank)
    return until_signalled(runner)


register_pool("rerank", run_rerank_pool)
