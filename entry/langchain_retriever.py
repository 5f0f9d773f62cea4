"""``RagstreamRetriever`` for LangChain: a ``BaseRetriever`` over ``POST /v1/search``.

Install the extra (``pip install 'ragstream[langchain]'``), then::

    from entry.langchain_retriever import RagstreamRetriever

    retriever = RagstreamRetriever(base_url="http://127.0.0.1:8000", api_key=key, top_k=5)
    for doc in retriever.invoke("What does VACUUM do?"):
        print(doc.metadata["score"], doc.metadata["title"], doc.metadata["source"])

Each passage is a ``Document`` whose ``id`` is its chunk id, ``page_content`` its text and
``metadata`` the document's metadata with ``doc_id``, ``chunk_id``, ``title``, ``source``,
``score`` (the ranker's: RRF for ``hybrid``, BM25 for ``keyword``, cosine ``(1 + cos) / 2`` for
``vector``) and ``rank`` (1-based). The key fixes the tenant and the documents it may read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import Field

from api.search_models import RankerName, SearchHit, SearchResults
from entry.client import AsyncHttpClient, HttpClient


class RagstreamRetriever(BaseRetriever):
    """The passages of ragstream's ``POST /v1/search`` as LangChain documents.

    Attributes:
        base_url: the API, e.g. ``http://127.0.0.1:8000``.
        api_key: a key from ``ragstream keys create`` (its tenant and readers scope the search).
        top_k: passages per query, 1-50.
        ranker: ``hybrid``, ``keyword`` or ``vector``.
        filters: term/range filters as ``POST /v1/query`` takes them (JSON objects).
        score_threshold: leave out passages scoring below it (in the ranker's score).
        timeout_s: HTTP read timeout, s.

    Raises:
        entry.client.ApiRequestError: a non-2xx answer (a bad key, a refused filter, 429, 503).
        entry.client.ApiUnavailableError: the API cannot be reached.
    """

    base_url: str
    api_key: str
    top_k: int = 10
    ranker: RankerName = "hybrid"
    filters: list[dict[str, Any]] = Field(default_factory=list)
    score_threshold: float | None = None
    timeout_s: float = 30.0

    def _params(self) -> dict[str, Any]:
        return {
            "top_k": self.top_k, "ranker": self.ranker, "filters": self.filters,
            "score_threshold": self.score_threshold,
        }  # fmt: skip

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        with HttpClient(self.base_url, self.api_key, timeout_s=self.timeout_s) as client:
            return documents(client.search(query, **self._params()))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        async with AsyncHttpClient(self.base_url, self.api_key, timeout_s=self.timeout_s) as c:
            return documents(await c.search(query, **self._params()))


def documents(results: SearchResults, hits: Sequence[SearchHit] | None = None) -> list[Document]:
    """LangChain documents of a search's passages, best first."""
    return [
        Document(id=h.chunk_id, page_content=h.text, metadata=h.provenance())
        for h in (results.data if hits is None else hits)
    ]
