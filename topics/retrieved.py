"""``rag.retrieved``: the fused top-N candidates of one query, keyed by ``request_id``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from topics.base import Contract, Event
from topics.queries import QueryRequest


class Preceding(Contract):
    """The end of the chunk before a candidate's chunk, from the definition term whose
    description the candidate's text continues (chunks overlap, so a chunk that starts inside a
    description has lost its term; :func:`workers.evidence.segment.continued_definition`).

    ``text`` is ``chunk.text[start:start + len(text)]`` of the chunk ``chunk_id``, and the
    candidate's text (after its leading whitespace) goes on where it ends; the first
    ``overlap`` characters of the candidate's text are at the end of that chunk too.
    """

    chunk_id: str
    start: int = Field(ge=0)
    text: str
    overlap: int = Field(ge=0)


class Candidate(Contract):
    """One retrieved chunk with its provenance and scores.

    ``score`` is the fused (RRF) score; ``bm25_rank``/``knn_rank`` are 1-based ranks in each
    list, ``None`` when the chunk was not in it; ``bm25_score``/``knn_score`` are the raw
    Elasticsearch scores of those lists (BM25, unbounded; kNN cosine as ``(1 + cos) / 2`` in
    [0, 1]), ``None`` when absent; ``rerank_score`` is set by the rerank stage; ``preceding`` is
    the part of the chunk before it that its text continues, when retrieval fetched it
    (``retrieval.preceding_chars``).
    """

    chunk_id: str
    doc_id: str
    text: str
    title: str = ""
    source: str = ""
    score: float
    bm25_rank: int | None = None
    knn_rank: int | None = None
    bm25_score: float | None = None
    knn_score: float | None = None
    rerank_score: float | None = None
    metadata: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    preceding: Preceding | None = None


class RetrievedCandidates(Event):
    """The request it answers and its candidates, best first."""

    request: QueryRequest
    candidates: tuple[Candidate, ...] = ()
    #: Definition entries near a question that asks for a name or a way, best first, as
    #: passages (``metadata.entry`` = ``definition``); the rerank pool keeps those whose
    #: documents its passages come from (``workers.evidence.stage.attach_definitions``).
    definitions: tuple[Candidate, ...] = ()
    index_version: int = 0
    #: The LLM tier the router suggests, and why; the rerank pool decides the answer tier.
    tier: Literal["evidence", "small", "large"] = "small"
    route_reason: str = ""
    #: Steps left out for this question because its pool was behind (``propose``: the name
    #: proposer was shed, ``retrieval.propose_shed_after_s``), or ``trimmed``: candidates left
    #: out or cut so that the event fits one Kafka record (``workers/retrieval/fit.py``);
    #: carried to the answer.
    degraded: tuple[Literal["propose", "trimmed"], ...] = ()

    @property
    def request_id(self) -> str:
        """The originating request's id."""
        return self.request.request_id

    def key(self) -> bytes:
        """Keyed by ``request_id``."""
        return self.request.request_id.encode()
