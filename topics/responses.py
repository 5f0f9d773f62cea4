"""``rag.responses``: final answers and typed errors, keyed by ``request_id``.

Exactly one visible response per ``request_id``: consumers de-duplicate on it, since a replayed
upstream event may publish the same response twice (at-least-once in, exactly-once out).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, field_validator, model_validator

from topics.base import Contract, Event


class ErrorCode(StrEnum):
    """Typed error of a failed query."""

    DEADLINE_EXCEEDED = "DEADLINE_EXCEEDED"
    PROMPT_TOO_LONG = "PROMPT_TOO_LONG"
    BACKEND_UNAVAILABLE = "BACKEND_UNAVAILABLE"
    INVALID_REQUEST = "INVALID_REQUEST"
    INTERNAL = "INTERNAL"
    #: The client disconnected and generation was stopped (``workers/cancel.py``).
    CANCELLED = "CANCELLED"
    #: The index was built with an embedding model this deployment cannot build
    #: (``ingest/model_follow.py``): no query vector comparable with its vectors.
    EMBEDDING_MODEL_MISMATCH = "EMBEDDING_MODEL_MISMATCH"
    #: The query event could not be produced (Kafka unreachable); set by the API on the query
    #: log only, never published on ``rag.responses``.
    UNAVAILABLE = "UNAVAILABLE"
    #: A recorded answer read back (``GET /v1/queries/{id}``, a resumed stream's end) cites a
    #: document the asker may no longer read: its text is withheld (``workers/query_log.py``).
    WITHHELD = "WITHHELD"


class ErrorInfo(Contract):
    """Error code, a human-readable message and the stage that failed."""

    code: ErrorCode
    message: str
    stage: str = ""


class Citation(Contract):
    """A cited passage: ``n`` is its number in the prompt (``[n]`` in the answer)."""

    n: int = Field(ge=1)
    doc_id: str
    chunk_id: str
    title: str = ""
    source: str = ""


class EvidenceSpan(Contract):
    """A quoted span of a passage that supports the answer.

    ``n`` is the passage's citation number (``[n]``); ``start``/``end`` are character offsets
    into the chunk's text (``chunk.text[start:end] == text``); ``context`` frames a table row
    (its header row); ``score`` is the evidence stage's unit score (higher is better).
    """

    n: int = Field(ge=1)
    chunk_id: str
    doc_id: str
    start: int = Field(ge=0)
    end: int = Field(ge=0)
    text: str
    score: float = 0.0
    context: str = ""
    title: str = ""
    source: str = ""

    @model_validator(mode="after")
    def _ordered(self) -> EvidenceSpan:
        if self.end < self.start:
            raise ValueError("end must not be before start")
        return self


#: The status events said for a failure before ``failed`` (read as ``failed``).
LEGACY_FAILED = "error"


class TokenUsage(Contract):
    """Token counts reported by the serving model."""

    prompt_tokens: int = 0
    completion_tokens: int = 0


class AnswerCacheKeys(Contract):
    """Where the delivery pool caches an answer (``workers.caches``): the exact key and the
    semantic hash, computed by the stage that answered (it knows the request's parameters, the
    index version it answered against and its answer configuration)."""

    exact: str = Field(min_length=1, max_length=512)
    semantic: str = Field(min_length=1, max_length=512)


class QueryResponse(Event):
    """An answer (``status="answered"``) or a typed error (``status="failed"``).

    ``failed`` is the status every exit shows (:class:`topics.answers.Answer`); readers also
    accept the ``error`` that events said before, as ``failed`` (older records on the topics,
    older entries in the answer cache).

    ``evidence`` holds the quoted spans the answer rests on (also on an error, when retrieval
    found them), ``citations`` the passages; ``truncated`` marks an LLM answer cut at its token
    limit (kept up to its last whole sentence); ``tier`` is the answer tier that produced it
    (``evidence``, ``small``, ``large``; ``cache`` for a cache hit).
    """

    request_id: str = Field(min_length=1, max_length=128)
    status: Literal["answered", "failed"]
    answer: str = ""
    citations: tuple[Citation, ...] = ()
    evidence: tuple[EvidenceSpan, ...] = ()
    truncated: bool = False
    usage: TokenUsage = TokenUsage()
    tier: str = ""
    error: ErrorInfo | None = None
    #: Steps left out of this answer because a pool was behind (``propose``: answered without
    #: the name proposer); such an answer is not cached.
    degraded: tuple[Literal["propose", "trimmed"], ...] = ()
    #: Copied from the request: where the delivery pool posts the signed webhook, if anywhere.
    callback_url: str | None = Field(default=None, max_length=2048)
    #: Where the delivery pool (the answer cache's one writer) caches this answer; ``None``:
    #: not cached (an error, a cache hit, a stage without a cache).
    cache_keys: AnswerCacheKeys | None = None

    @field_validator("status", mode="before")
    @classmethod
    def _legacy_status(cls, value: object) -> object:
        return "failed" if value == LEGACY_FAILED else value

    @model_validator(mode="after")
    def _error_iff_failed(self) -> QueryResponse:
        if (self.status == "failed") != (self.error is not None):
            raise ValueError("error must be set exactly when status is 'failed'")
        return self

    def key(self) -> bytes:
        """Keyed by ``request_id``."""
        return self.request_id.encode()
