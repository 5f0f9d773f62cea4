"""``rag.reranked``: the top-K passages of one query after rerank, keyed by ``request_id``."""

from __future__ import annotations

from typing import Literal

from topics.base import Contract, Event
from topics.queries import QueryRequest
from topics.responses import EvidenceSpan
from topics.retrieved import Candidate


class FallbackAnswer(Contract):
    """The evidence tier's answer to a question, composed once by the evidence stage, that an
    LLM tier publishes instead of an unusable completion.

    ``text`` quotes the evidence with ``[n]`` citations (or is the refusal, ``refused``);
    ``cited`` holds the passage numbers it quotes, ascending.
    """

    text: str
    cited: tuple[int, ...] = ()
    refused: bool = False


class RerankedPassages(Event):
    """Passages in rerank-score order, their evidence spans and the answer tier the router chose.

    ``evidence`` is best first; ``evidence_confidence`` is the best span's score (``None`` when
    no evidence stage ran); ``route_reason`` says why the router chose ``tier``;
    ``fallback`` is the evidence answer the evidence stage composed (``None``: no evidence stage
    ran).
    """

    request: QueryRequest
    passages: tuple[Candidate, ...] = ()
    tier: Literal["evidence", "small", "large"] = "small"
    index_version: int = 0
    evidence: tuple[EvidenceSpan, ...] = ()
    evidence_confidence: float | None = None
    route_reason: str = ""
    fallback: FallbackAnswer | None = None
    #: Steps left out under load (:attr:`topics.retrieved.RetrievedCandidates.degraded`).
    degraded: tuple[Literal["propose", "trimmed"], ...] = ()

    @property
    def request_id(self) -> str:
        """The originating request's id."""
        return self.request.request_id

    def key(self) -> bytes:
        """Keyed by ``request_id``."""
        return self.request.request_id.encode()
