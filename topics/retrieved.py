"""``rag.retrieved``: the fused top-N candidates of one query, keyed by ``request_id``."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from topics.base import Contract, Event
from topics.queries import QueryRequest


class Candidate(Contract):
    """One retrieved chunk with its provenance and scores.

    ``score`` is the fused (RRF) score; ``bm25_rank``/``knn_rank`` are 1-based ranks in each
    list, ``None`` when the chunk was not in it; ``bm25_score``/``knn_score`` are the raw
    Elasticsearch scores of those lists (BM25, unbounded; kNN cosine as ``(1 + cos) / 2`` in
    [0, 1]), ``None`` when absent; ``rerank_score`` is set by the rerank stage.
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


class RetrievedCandidates(Event):
    """The request it answers and its candidates, best first."""

    request: QueryRequest
    candidates: tuple[Candidate, ...] = ()
    index_version: int = 0
    #: The LLM tier the router suggests, and why; the rerank pool decides the answer tier.
    tier: Literal["evidence", "small", "large"] = "small"
    route_reason: str = ""

    @property
    def request_id(self) -> str:
        """The originating request's id."""
        return self.request.request_id

    def key(self) -> bytes:
        """Keyed by ``request_id``."""
        return self.request.request_id.encode()
