"""Model routing and the answer tier: the one module where a question's tier is decided.

In the retrieval pool a cheap classifier (:class:`Router`) suggests each query's LLM tier,
``small`` or ``large``; the suggestion is an input, not the decision. The answer tier is decided
once, in the rerank pool, by :func:`choose_tier`: from the evidence when the evidence stage runs
(it may answer from the evidence instead: the ``evidence`` tier), or as suggested when it does
not (:func:`llm_tier`). The decision travels on the event (``RerankedPassages.tier``, the topic
it goes to) and, with its reason, into the trace (``tier`` and ``route`` of the ``evidence`` or
``rerank`` stage).

Features (no model call beyond the query embedding the retrieval stage already computed):
length in words, question-type cue words, and the difference of cosine similarity to the
centroids of labelled easy and hard example questions. The suggestion goes into the retrieval
stage's trace (``suggested``) and into ``ragstream_route_total{tier,reason}``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from prometheus_client import Counter

from topics.queries import QueryRequest
from workers.conversation import question_of

if TYPE_CHECKING:
    from workers.evidence.answer import AnswerPolicy
    from workers.evidence.select import Evidence

Tier = Literal["evidence", "small", "large"]
#: An answer tier: the evidence tier (quoted evidence, no LLM) or an LLM tier.
AnswerTier = Tier

ROUTES = Counter("ragstream_route_total", "Routing decisions.", ["tier", "reason"])

#: Labelled examples: short factual look-ups (small tier) ...
EASY_EXAMPLES = (
    "What is the default port of PostgreSQL?",
    "Which function returns the length of a list?",
    "What does the len() function return?",
    "What is the maximum length of an identifier?",
    "Which setting controls the deadlock timeout?",
    "What type does str.split return?",
    "When was this option added?",
    "What is the default value of work_mem?",
)
#: ... and multi-step, comparative or explanatory questions (large tier).
HARD_EXAMPLES = (
    "Explain how MVCC and vacuum interact to reclaim space and avoid transaction wraparound.",
    "Compare asyncio tasks and threads for I/O-bound work and explain the trade-offs.",
    "Why would a query planner choose a nested loop over a hash join, and how can I tell?",
    "How do I design a schema that supports multi-tenant row-level security?",
    "What are the differences between the isolation levels and what anomalies does each allow?",
    "Walk me through setting up streaming replication with failover step by step.",
    "How do descriptors, properties and __getattr__ interact when looking up an attribute?",
    "Describe the steps to profile and optimise a slow Python program.",
)
HARD_CUES = re.compile(
    r"\b(why|explain|compare|difference|differences|trade-?offs?|design|step by step|"
    r"walk me through|interact|versus|vs\.?|pros and cons)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True, slots=True)
class Route:
    """The chosen tier, why, and the classifier score (> 0 leans large)."""

    tier: Tier
    reason: str
    score: float


class Router:
    """Routes queries; call :meth:`fit` with the example embeddings once.

    Args:
        long_query_words: queries longer than this lean large.
        threshold: score above which a query goes to the large tier.
    """

    def __init__(self, long_query_words: int = 25, threshold: float = 0.25) -> None:
        self.long_query_words = long_query_words
        self.threshold = threshold
        self._easy: np.ndarray[Any, Any] | None = None
        self._hard: np.ndarray[Any, Any] | None = None

    def fit(self, easy: np.ndarray[Any, Any], hard: np.ndarray[Any, Any]) -> None:
        """Set the class centroids from ``(n, dim)`` L2-normalised example embeddings."""
        self._easy = _unit(easy.mean(axis=0))
        self._hard = _unit(hard.mean(axis=0))

    def route(self, request: QueryRequest, vector: np.ndarray[Any, Any] | None) -> Route:
        """Decide the tier of ``request`` (``vector``: its ``(dim,)`` unit embedding)."""
        if request.route != "auto":
            decision = Route(request.route, "forced", 0.0)
        else:
            score = 0.0
            reasons = []
            if len(question_of(request).split()) > self.long_query_words:
                score += 0.5
                reasons.append("long")
            if HARD_CUES.search(question_of(request)):
                score += 0.3
                reasons.append("cue")
            if vector is not None and self._easy is not None and self._hard is not None:
                margin = float(np.dot(vector, self._hard) - np.dot(vector, self._easy))
                score += 2.0 * margin
                reasons.append(f"sim{margin:+.2f}")
            tier: Tier = "large" if score > self.threshold else "small"
            decision = Route(tier, ",".join(reasons) or "default", round(score, 3))
        ROUTES.labels(decision.tier, decision.reason.split(",")[0].rstrip("+-.0123456789")).inc()
        return decision


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """How the router picks an answer tier once the evidence is known.

    Attributes:
        mode: ``evidence`` answers every question from its evidence; ``llm`` sends every
            question with usable evidence to its LLM tier; ``auto`` uses the evidence tier when
            the evidence's confidence reaches ``evidence_min_confidence``.
        evidence_min_confidence: see ``mode=auto`` (chosen with ``ragstream eval``).
    """

    mode: Literal["evidence", "llm", "auto"] = "evidence"
    evidence_min_confidence: float = 1.0


def choose_tier(
    request: QueryRequest,
    llm_tier_of: str,
    evidence: Evidence | None,
    answer_policy: AnswerPolicy | None,
    policy: TierPolicy,
) -> tuple[AnswerTier, str]:
    """The answer tier of one question and the reason (see :class:`TierPolicy`).

    Without an evidence stage (``evidence`` ``None``) the router's suggestion decides, as an
    LLM tier (:func:`llm_tier`), reason ``suggested``. With one, the refusal gate comes first:
    weak evidence is refused by the evidence tier whatever tier the request forces (``route``),
    so a forced LLM tier never answers what the documents do not hold.
    """
    if evidence is None or answer_policy is None:
        return llm_tier(llm_tier_of), "suggested"
    return _from_evidence(request, llm_tier(llm_tier_of), evidence, answer_policy, policy)


def _from_evidence(
    request: QueryRequest,
    suggested: AnswerTier,
    evidence: Evidence,
    answer_policy: AnswerPolicy,
    policy: TierPolicy,
) -> tuple[AnswerTier, str]:
    """:func:`choose_tier` with an evidence stage."""
    from workers.evidence.answer import weakness

    weak = weakness(evidence, answer_policy)
    if weak:
        return "evidence", weak
    if request.route != "auto":
        return request.route, "forced"
    if policy.mode != "auto":
        return ("evidence" if policy.mode == "evidence" else suggested), "policy"
    if evidence.confidence >= policy.evidence_min_confidence:
        return "evidence", f"confident:{evidence.confidence:.3f}"
    return suggested, f"unsure:{evidence.confidence:.3f}"


def llm_tier(tier: str) -> Literal["small", "large"]:
    """The LLM tier of a suggested ``tier``: ``large`` stays, anything else (``small``, or the
    ``evidence`` tier a request forced where no evidence stage runs) is ``small``."""
    return "large" if tier == "large" else "small"


def _unit(v: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    norm = float(np.linalg.norm(v))
    return v / norm if norm else v
