"""``rag.reranked``: the top-K passages of one query after rerank, keyed by ``request_id``."""

from __future__ import annotations

from typing import Literal

from topics.base import Event
from topics.queries import QueryRequest
from topics.retrieved import Candidate


class RerankedPassages(Event):
    """Passages in rerank-score order and the generation tier the router chose."""

    request: QueryRequest
    passages: tuple[Candidate, ...] = ()
    tier: Literal["small", "large"] = "small"
    index_version: int = 0

    @property
    def request_id(self) -> str:
        """The originating request's id."""
        return self.request.request_id

    def key(self) -> bytes:
        """Keyed by ``request_id``."""
        return self.request.request_id.encode()
