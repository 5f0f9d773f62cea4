"""The finished answer of one query, as every exit shows it (the answer view).

:class:`Answer` is the one shape of a query's outcome outside the pipeline. It is built from a
``rag.responses`` event by :meth:`Answer.of` (or, before any response, by
:meth:`Answer.pending`), stored whole in the SQL query log (``query_log.result``), and every
exit renders it: the sync JSON reply and the SSE final event (``api.models.QueryResult``),
``GET /v1/queries/{id}`` (read back from the query log), the ``query.completed`` webhook
payload, the OpenAI-compatible completion and its stream's final chunk, and the CLI.

One status vocabulary inside and out: ``pending``, ``answered``, ``failed`` (a response event
says ``answered`` or ``failed``; only the answer view knows ``pending``).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, model_validator

from topics.base import Contract, StageTiming, UtcDatetime
from topics.responses import Citation, ErrorInfo, EvidenceSpan, QueryResponse, TokenUsage

#: What the system answers when the documents do not hold the answer: the evidence tier's
#: refusal, the sentence the LLM tiers are told to say, and what the evaluation counts as a
#: refusal (the one definition).
NOT_IN_DOCUMENTS: Final = "The documents do not contain the answer."


def is_refusal(text: str) -> bool:
    """Whether an answer ``text`` is the refusal: it opens with :data:`NOT_IN_DOCUMENTS` (the
    evidence tier's whole answer; what the LLM tiers are told to say)."""
    return text.strip().startswith(NOT_IN_DOCUMENTS)


#: The status of a query as every exit says it.
AnswerStatus = Literal["pending", "answered", "failed"]
#: The trace stage a cache hit carries (``workers.caches.CacheHit.readdress``).
CACHE_STAGE = "cache"


class Answer(Contract):
    """A query's outcome: ``pending``, ``answered`` (with its text) or ``failed`` (with a typed
    error), with its citations, evidence, tier, trace and token usage.

    Attributes:
        request_id: the query's id.
        tenant: the tenant it belongs to ("" when unknown).
        query: the question as asked ("" when unknown, e.g. a response whose request was not
            logged).
        status: ``pending``, ``answered`` or ``failed``.
        answer: the answer text (``None`` unless ``answered``).
        citations: the cited passages, by ``[n]``.
        evidence: the quoted spans the answer rests on, best first, with character offsets
            into their chunk's text (also on a failure, when retrieval found them).
        truncated: an LLM answer cut at its token limit (kept up to its last whole sentence).
        degraded: steps left out because a pool was behind (``propose``: the name proposer
            was shed under load; the answer is the evidence tier's without it).
        tier: the answer tier (``evidence``, ``small``, ``large``; "" when none ran).
        error: why it failed (``None`` unless ``failed``).
        trace: per-stage timings (ms), in order.
        usage: token counts of the serving model.
        cached: the answer came from the answer cache (a ``cache`` stage in ``trace``).
        refused: the answer is the refusal (:data:`NOT_IN_DOCUMENTS`, :func:`is_refusal`):
            the documents do not hold an answer; a client need not match the text.
        created_at: when the query was logged (UTC; ``None`` when unknown).
        completed_at: when its final response was recorded (UTC; ``None`` while pending).
    """

    request_id: str = Field(max_length=128)
    tenant: str = ""
    query: str = ""
    status: AnswerStatus
    answer: str | None = None
    citations: tuple[Citation, ...] = ()
    evidence: tuple[EvidenceSpan, ...] = ()
    truncated: bool = False
    degraded: tuple[str, ...] = ()
    tier: str = ""
    error: ErrorInfo | None = None
    trace: tuple[StageTiming, ...] = ()
    usage: TokenUsage = TokenUsage()
    cached: bool = False
    refused: bool = False
    created_at: UtcDatetime | None = None
    completed_at: UtcDatetime | None = None

    @model_validator(mode="before")
    @classmethod
    def _refused_from_text(cls, data: Any) -> Any:
        # A view logged before ``refused`` existed says it by its text alone.
        if isinstance(data, dict) and "refused" not in data:
            text = data.get("answer")
            data = {**data, "refused": data.get("status") == "answered" and is_refusal(text or "")}
        return data

    @model_validator(mode="after")
    def _error_iff_failed(self) -> Answer:
        if (self.status == "failed") != (self.error is not None):
            raise ValueError("error must be set exactly when status is 'failed'")
        return self

    @classmethod
    def of(
        cls,
        response: QueryResponse,
        *,
        query: str = "",
        created_at: UtcDatetime | None = None,
        completed_at: UtcDatetime | None = None,
    ) -> Answer:
        """The answer view of a final ``rag.responses`` event (the one place that maps a
        response to what the exits show).

        Args:
            response: the final response.
            query: the question, when the caller knows it.
            created_at: when the query was logged, when known.
            completed_at: when the response was recorded, when known.
        """
        answered = response.status == "answered"
        return cls(
            request_id=response.request_id,
            tenant=response.tenant,
            query=query,
            status="answered" if answered else "failed",
            answer=response.answer if answered else None,
            citations=response.citations,
            evidence=response.evidence,
            truncated=response.truncated,
            degraded=response.degraded,
            tier=response.tier,
            error=response.error,
            trace=response.trace,
            usage=response.usage,
            cached=any(t.stage == CACHE_STAGE for t in response.trace),
            created_at=created_at,
            completed_at=completed_at,
        )

    @classmethod
    def pending(
        cls,
        request_id: str,
        *,
        tenant: str = "",
        query: str = "",
        created_at: UtcDatetime | None = None,
    ) -> Answer:
        """The view of a query whose final response has not arrived yet."""
        return cls(
            request_id=request_id,
            tenant=tenant,
            query=query,
            status="pending",
            created_at=created_at,
        )

    @property
    def total_ms(self) -> float:
        """The summed duration of the trace's stages, ms."""
        return sum(t.duration_ms for t in self.trace)
