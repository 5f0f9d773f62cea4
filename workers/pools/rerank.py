"""The rerank and evidence pool: fused candidates in; an evidence answer, or the top-K passages
with their evidence on the chosen LLM tier's topic, out.

Per batch: ONE scoring call for the (query, passage) pairs of every request in the batch (the
first ``rerank.top_n`` fused candidates of each; the rest follow them in fused order), then
the top K of each request in score order with at most ``max_chunks_per_doc`` per document
(plus, for an identifier of the question that no top-K passage holds, the best further
candidate that does). Then the evidence stage (:mod:`workers.evidence.stage`) chooses every
question's evidence spans in ONE embedding call and the answer tier: the ``evidence`` tier is
answered here, at once, on ``rag.responses`` (no model to scale, so no hop of its own); an LLM
tier gets the passages and their evidence on ``rag.reranked.<tier>``, and a streamed request
gets its evidence on ``rag.tokens`` first (``kind="evidence"``, ``seq`` 0), before any token.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from prometheus_client import Counter

from ragstream import tracing
from ragstream.settings import PoolSettings, RerankSettings, Settings
from topics.registry import RERANKED_BY_TIER, RESPONSES, RETRIEVED, TOKENS
from topics.reranked import RerankedPassages
from topics.retrieved import Candidate, RetrievedCandidates
from workers.caches import CacheKeys
from workers.conversation import question_of
from workers.errors import dead_letter_hook, expired_hook
from workers.evidence.stage import (
    EvidenceStage,
    attach_definitions,
    evidence_response,
    evidence_token,
    promote_identifiers,
)
from workers.registry import register_pool
from workers.rerank.select import score_top_n, select_top_k
from workers.routing import TierPolicy, choose_tier, llm_tier
from workers.runtime.build import pool_handler
from workers.runtime.handler import Emit, Handler, Outcome, derive_event_id
from workers.runtime.metrics import MODEL_CALLS

ANSWER_TIERS = Counter(
    "ragstream_answer_tier_total", "Answer tiers chosen by the router.", ["tier", "reason"]
)


class Scores(Protocol):
    """Relevance scores of ``(query, passage)`` pairs, higher is more relevant."""

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]: ...


def rerank_handler(
    reranker: Scores,
    settings: RerankSettings,
    *,
    pool: PoolSettings,
    group: str | None = None,
    evidence: EvidenceStage | None = None,
    cache_keys: CacheKeys | None = None,
) -> Handler[RetrievedCandidates]:
    """The rerank pool's handler (``evidence=None``: no evidence stage, every question goes to
    the LLM tier the retrieval pool's router suggested, with whole passages; ``cache_keys``:
    the keys an evidence-tier answer carries for the delivery pool to cache it at, as the
    generation pools' answers do; ``None``: not cached)."""

    def fn(events: list[RetrievedCandidates]) -> Sequence[Outcome]:
        started = dt.datetime.now(dt.UTC)
        t0 = time.perf_counter()
        batch = [(question_of(e.request), [_passage(c) for c in e.candidates]) for e in events]
        pairs = sum(min(settings.top_n, len(passages)) for _, passages in batch)
        with tracing.span("rerank", attributes={"ragstream.rerank.pairs": pairs}):
            scores = score_top_n(reranker.score, batch, settings.top_n)
        if pairs:
            MODEL_CALLS.labels("rerank").inc()
        tops: list[list[Candidate]] = []
        for e, scored in zip(events, scores, strict=True):
            top = select_top_k(e.candidates, scored, e.request.top_k, settings.max_chunks_per_doc)
            if evidence is not None:
                top = promote_identifiers(question_of(e.request), top, e.candidates)
            tops.append(attach_definitions(top, e.definitions))
        took = (time.perf_counter() - t0) * 1000
        reranked = [
            RerankedPassages(
                event_id=derive_event_id(e.event_id, "rerank"),
                tenant=e.tenant,
                request=e.request,
                passages=tuple(top),
                tier=llm_tier(e.tier),
                index_version=e.index_version,
                route_reason=e.route_reason,
                degraded=e.degraded,
                trace=e.trace,
            ).traced(
                "rerank",
                started,
                took,
                batch=len(events),
                pairs=pairs,
                **({} if evidence is not None else _as_suggested(e)),
            )
            for e, top in zip(events, tops, strict=True)
        ]
        if evidence is None:
            return [Emit(RERANKED_BY_TIER[r.tier], r) for r in reranked]
        return _with_evidence(evidence, reranked, cache_keys)

    return pool_handler(
        "rerank",
        input=RETRIEVED,
        outputs=(*RERANKED_BY_TIER.values(), RESPONSES, TOKENS),
        fn=fn,
        pool=pool,
        group=group,
        on_expired=expired_hook("rerank"),
        on_dead_letter=dead_letter_hook("rerank"),
    )


def _as_suggested(e: RetrievedCandidates) -> dict[str, str]:
    """The trace of the decision without an evidence stage (:func:`~workers.routing.
    choose_tier` with no evidence: the suggested LLM tier), and the router's reason (with an
    evidence stage, the decision is in the ``evidence`` stage's trace)."""
    tier, reason = choose_tier(e.request, e.tier, None, None, NO_EVIDENCE)
    return {"tier": tier, "route": e.route_reason or reason}


#: The tier policy where no evidence stage runs: the router's suggestion decides.
NO_EVIDENCE = TierPolicy(mode="llm")


def _with_evidence(
    stage: EvidenceStage, reranked: list[RerankedPassages], cache_keys: CacheKeys | None
) -> list[Outcome]:
    """Run the evidence stage over the batch; answer evidence-tier questions, pass the rest on."""
    started = dt.datetime.now(dt.UTC)
    t0 = time.perf_counter()
    with tracing.span("evidence", attributes={"ragstream.evidence.questions": len(reranked)}):
        decisions = stage.run([(r.request, r.passages, r.tier) for r in reranked])
    MODEL_CALLS.labels("evidence").inc()
    took = (time.perf_counter() - t0) * 1000
    out: list[Outcome] = []
    for r, d in zip(reranked, decisions, strict=True):
        ANSWER_TIERS.labels(d.tier, d.reason.split(":")[0]).inc()
        traced = r.model_copy(
            update={
                "evidence": d.evidence,
                "evidence_confidence": d.confidence,
                "route_reason": d.reason,
                "fallback": d.fallback,
            }
        ).traced(
            "evidence",
            started,
            took,
            tier=d.tier,
            route=d.reason,
            confidence=round(d.confidence or 0.0, 3),
            spans=len(d.evidence),
        )
        if d.tier == "evidence":
            response = evidence_response(traced)
            if cache_keys is not None:
                keys = cache_keys.of(r.request, r.index_version)
                response = response.model_copy(update={"cache_keys": keys})
            out.append(Emit(RESPONSES, response))
            continue
        tier = traced.model_copy(update={"tier": d.tier})
        if r.request.stream and d.evidence:
            out.append(Emit(TOKENS, evidence_token(tier)))
        out.append(Emit(RERANKED_BY_TIER[d.tier], tier))
    return out


def _passage(c: Candidate) -> str:
    return f"{c.title}\n{c.text}" if c.title else c.text


def run_rerank_pool(settings: Settings) -> Callable[[], None]:
    """Pool factory of ``ragstream worker rerank``."""
    from workers.rerank.factory import make_reranker, rerank_models_dir
    from workers.runtime.build import build_runner, pool_group, until_signalled

    reranker = make_reranker(
        settings.rerank, settings.llm.base_url, models_dir=rerank_models_dir(settings)
    )
    warm = getattr(reranker, "warm_up", None)
    if callable(warm):
        warm()
    stage = None
    if settings.evidence.enabled:
        from ingest.factory import build_embedder, build_vocabulary
        from workers.evidence.stage import build_evidence_stage
        from workers.pools.components import build_cache_keys

        dense = settings.evidence.dense_top > 0
        embedder = build_embedder(settings, num_threads=1) if dense else None
        stage = build_evidence_stage(
            settings.evidence, embedder, build_vocabulary(settings), settings.rerank
        )
    handler = rerank_handler(
        reranker,
        settings.rerank,
        pool=settings.pools.rerank,
        group=pool_group(settings, "rerank"),
        evidence=stage,
        cache_keys=build_cache_keys(settings) if stage is not None else None,
    )
    runner = build_runner(handler, settings, settings.pools.rerank)
    return until_signalled(runner)


register_pool("rerank", run_rerank_pool)
