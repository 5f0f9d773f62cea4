"""Bodies of ``POST /v1/search`` (:mod:`api.routes.search`): the passages of a query, no answer.

What a ``score`` is depends on the ranker (:mod:`api.searching`): the RRF score for ``hybrid``,
Elasticsearch's BM25 score for ``keyword``, the cosine score ``(1 + cos) / 2`` for ``vector``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from api.bodies import Body
from api.models import HistoryTurn
from topics.queries import Filter

#: How passages are ordered and scored (``api.searching.Ranker``).
RankerName = Literal["hybrid", "keyword", "vector"]


class SearchBody(Body):
    """``POST /v1/search``: the ``top_k`` passages of the caller's index best matching ``query``."""

    query: str = Field(
        min_length=1, max_length=4000, pattern=r"^[^\x00]*$", description="What to search for."
    )
    top_k: int = Field(default=10, ge=1, le=50, description="Passages returned (1-50).")
    filters: list[Filter] = Field(
        default_factory=list,
        max_length=20,
        description="Term and range filters, all of which a passage must match (as on "
        "`POST /v1/query`).",
    )
    ranker: RankerName = Field(
        default="hybrid",
        description="`hybrid`: BM25 and kNN fused by reciprocal rank fusion (score: the RRF "
        "score, at most (bm25_weight + knn_weight) / (rrf_k + 1), about 0.0295 by default); "
        "`keyword`: BM25 alone (score: BM25, unbounded, > 0); `vector`: kNN alone (score: "
        "(1 + cosine) / 2 in [0, 1]).",
    )
    score_threshold: float | None = Field(
        default=None,
        description="Leave out passages scoring below this, in the ranker's own score (see "
        "`ranker`); none by default.",
    )
    history: list[Annotated[str, Field(max_length=4000)] | HistoryTurn] = Field(
        default_factory=list,
        max_length=20,
        description="Earlier turns of a conversation, oldest first (as on `POST /v1/query`): "
        "a follow-up is searched as the standalone question the earlier questions make of it.",
    )


class SearchHit(BaseModel):
    """One passage (chunk) of a search, best first: ``n`` is its 1-based rank."""

    n: int
    doc_id: str
    chunk_id: str
    title: str = ""
    source: str = ""
    score: float = Field(description="The ranker's score (see the request's `ranker`).")
    text: str
    metadata: dict[str, str | int | float | bool | None] = Field(
        default_factory=dict, description="The document's metadata."
    )

    def provenance(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The passage's metadata as a framework's document or node carries it (LangChain,
        LlamaIndex): the document's own, then ``extra``, then ``doc_id``, ``chunk_id``,
        ``title``, ``source``, ``score`` and ``rank`` (these win over keys of the same name)."""
        return {
            **self.metadata, **(extra or {}), "doc_id": self.doc_id, "chunk_id": self.chunk_id,
            "title": self.title, "source": self.source, "score": self.score, "rank": self.n,
        }  # fmt: skip


class SearchResults(BaseModel):
    """The answer of ``POST /v1/search``: the query as asked, the ranker, and the passages."""

    query: str
    ranker: RankerName
    data: list[SearchHit]
