"""``RagstreamRetriever`` for LlamaIndex: a ``BaseRetriever`` over ``POST /v1/search`` that
returns scored nodes.

Install the extra (``pip install 'ragstream[llama-index]'``), then::

    from entry.llama_index_retriever import RagstreamRetriever

    retriever = RagstreamRetriever("http://127.0.0.1:8000", key, top_k=5)
    for scored in retriever.retrieve("What does VACUUM do?"):
        print(scored.score, scored.node.metadata["title"], scored.node.ref_doc_id)

Each passage is a ``NodeWithScore``: a ``TextNode`` whose id is its chunk id, text its text,
source relationship (``ref_doc_id``) its document id and metadata the document's metadata with
``doc_id``, ``chunk_id``, ``title``, ``source``, ``score`` and ``rank``; ``score`` is the
ranker's (RRF for ``hybrid``, BM25 for ``keyword``, cosine ``(1 + cos) / 2`` for ``vector``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import (
    NodeRelationship,
    NodeWithScore,
    QueryBundle,
    RelatedNodeInfo,
    TextNode,
)

from api.search_models import RankerName, SearchResults
from entry.client import AsyncHttpClient, HttpClient


class RagstreamRetriever(BaseRetriever):
    """The passages of ragstream's ``POST /v1/search`` as LlamaIndex scored nodes.

    Args:
        base_url: the API, e.g. ``http://127.0.0.1:8000``.
        api_key: a key from ``ragstream keys create`` (its tenant and readers scope the search).
        top_k: passages per query, 1-50.
        ranker: ``hybrid``, ``keyword`` or ``vector``.
        filters: term/range filters as ``POST /v1/query`` takes them (JSON objects).
        score_threshold: leave out passages scoring below it (in the ranker's score).
        timeout_s: HTTP read timeout, s.
        kwargs: ``BaseRetriever``'s own (``callback_manager``, ``verbose``).

    Raises:
        entry.client.ApiRequestError: a non-2xx answer (a bad key, a refused filter, 429, 503).
        entry.client.ApiUnavailableError: the API cannot be reached.
    """

    def __init__(  # noqa: PLR0917 - a retriever's options, positional as LlamaIndex's own
        self,
        base_url: str,
        api_key: str,
        top_k: int = 10,
        ranker: RankerName = "hybrid",
        filters: Sequence[Mapping[str, Any]] | None = None,
        score_threshold: float | None = None,
        timeout_s: float = 30.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.base_url = base_url
        self.api_key = api_key
        self.params: dict[str, Any] = {
            "top_k": top_k, "ranker": ranker, "filters": list(filters or []),
            "score_threshold": score_threshold,
        }  # fmt: skip
        self.timeout_s = timeout_s

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        with HttpClient(self.base_url, self.api_key, timeout_s=self.timeout_s) as client:
            return nodes(client.search(query_bundle.query_str, **self.params))

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        async with AsyncHttpClient(self.base_url, self.api_key, timeout_s=self.timeout_s) as c:
            return nodes(await c.search(query_bundle.query_str, **self.params))


def nodes(results: SearchResults) -> list[NodeWithScore]:
    """LlamaIndex scored nodes of a search's passages, best first."""
    return [
        NodeWithScore(
            node=TextNode(
                id_=h.chunk_id,
                text=h.text,
                metadata=h.provenance(),
                relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=h.doc_id)},
            ),
            score=h.score,
        )
        for h in results.data
    ]
