"""What the MCP tools do, for one authenticated caller: search, ask, read documents.

One :class:`KnowledgeBase` per process, over the same :class:`~api.deps.Services` as the HTTP
routes (SQL, Redis, the query service with its Kafka producer and reply router), so an MCP
client gets what the HTTP API gives, scoped to the tenant of its API key:

- :meth:`search`: hybrid retrieval (BM25 + kNN, reciprocal rank fusion) through
  :class:`api.searching.Searcher`, the retrieval pool's code run in this process;
- :meth:`ask`: a query through the pools (``rag.queries`` ... ``rag.responses``), as
  ``POST /v1/query`` asks it, answered as the :class:`~topics.answers.Answer` view;
- :meth:`document` and :meth:`documents`: the registry (SQL) and the document's text, its
  chunks from the index in order.
"""

from __future__ import annotations

import asyncio
import time
from functools import partial
from typing import Any, Literal

from sqlalchemy import select

from api.asking import build_request, query_body
from api.auth import Principal
from api.deps import Services
from api.errors import ApiError
from api.pages import decode_cursor, encode_cursor
from api.querying import QueryService
from api.searching import shared_searcher
from ingest.registry import DocumentRegistry
from ragstream.db.acl import from_column
from ragstream.db.models import Document
from topics.acl import may_read
from topics.answers import Answer

#: The answer tiers a question may be sent to (``auto``: the router picks).
Route = Literal["auto", "evidence", "small", "large"]
#: Most chunks a document's text is assembled from (a longer document is cut, and says so).
MAX_DOCUMENT_CHUNKS = 500
#: The documents one page of ``documents`` lists at most (as ``GET /v1/documents``' limit).
MAX_LISTED = 200


class KnowledgeBase:
    """The tools' work over ``services`` (see the module docstring).

    Args:
        services: the process's services; ``services.extras["queries"]`` is its
            :class:`~api.querying.QueryService`.
    """

    def __init__(self, services: Services) -> None:
        self.services = services
        self.settings = services.settings
        self.searcher = shared_searcher(services)

    @property
    def queries(self) -> QueryService:
        """The process's query service."""
        return self.services.extras["queries"]  # type: ignore[no-any-return]

    async def principal(self, key: str | None) -> Principal:
        """The caller of ``key``.

        Raises:
            ApiError: 401 ``UNAUTHENTICATED``: no key, or an unknown or revoked one.
        """
        if not key:
            raise ApiError(401, "UNAUTHENTICATED", "an API key is required")
        found = await asyncio.to_thread(self.services.authenticate, key)
        if found is None:
            raise ApiError(401, "UNAUTHENTICATED", "unknown or revoked API key")
        return found

    def _es(self) -> Any:
        return self.searcher.es()

    # -- search ----------------------------------------------------------------------------
    async def search(self, who: Principal, query: str, top_k: int) -> list[dict[str, Any]]:
        """The ``top_k`` best passages of ``who``'s index for ``query``, best first, each
        ``{n, doc_id, chunk_id, title, source, score (RRF), text}`` (:class:`api.searching.
        Searcher`, the seam every search surface shares).

        Raises:
            ApiError: 422 for a blank or too long query; 503 when Elasticsearch is unreachable.
        """
        found = await self.searcher.search(who, query, top_k=top_k, metadata=False)
        return [
            {
                "n": hit.n,
                "doc_id": hit.candidate.doc_id,
                "chunk_id": hit.candidate.chunk_id,
                "title": hit.candidate.title,
                "source": hit.candidate.source,
                "score": round(hit.score, 6),
                "text": hit.candidate.text,
            }
            for hit in found
        ]

    # -- ask -------------------------------------------------------------------------------
    async def ask(self, who: Principal, question: str, route: Route = "auto") -> Answer:
        """The answer of ``question`` from ``who``'s knowledge base, through the pools: the
        :class:`Answer` view (status, answer, citations, evidence with offsets, tier, ...);
        ``pending`` when no answer came within ``api.wait_timeout_s``.

        Raises:
            ApiError: 422 (blank or too long), 429 (pools lagging), 503 (Kafka).
        """
        settings = self.settings
        request = build_request(settings, who, query_body(settings, query=question, route=route))
        until = time.monotonic() + settings.api.wait_timeout_s
        async with await self.queries.ask(request, wait_s=settings.api.wait_timeout_s) as asked:
            return await asked.final(until) or await asked.settled()

    # -- documents -------------------------------------------------------------------------
    def _chunks(self, tenant: str, doc_id: str) -> list[dict[str, Any]]:
        from elasticsearch import ApiError as EsApiError

        query = {"bool": {"filter": [{"term": {"tenant": tenant}}, {"term": {"doc_id": doc_id}}]}}
        try:
            found = (
                self._es()
                .search(
                    index=self.settings.elasticsearch.index_alias,
                    query=query,
                    size=MAX_DOCUMENT_CHUNKS,
                    sort=[{"chunk_no": "asc"}],
                    source=["chunk_no", "text", "title", "source"],
                )
                .body
            )
        except EsApiError as exc:
            if exc.meta.status == 404:  # no index yet
                return []
            raise
        return [h["_source"] for h in found.get("hits", {}).get("hits", [])]

    def _document(
        self, tenant: str, doc_id: str, principals: tuple[str, ...] | None
    ) -> dict[str, Any] | None:
        from elasticsearch import TransportError

        with self.services.sessions() as session:
            row = session.scalars(
                select(Document).where(Document.tenant == tenant, Document.doc_id == doc_id)
            ).first()
        # A document outside the caller's principals is answered as missing, as the HTTP API
        # does (docs/permissions.md): its existence is not told.
        if row is None or not may_read(principals, from_column(row.readers)):
            return None
        try:
            chunks = self._chunks(tenant, doc_id)
        except TransportError as exc:
            raise ApiError(503, "UNAVAILABLE", f"elasticsearch: {exc}") from exc
        return {
            "doc_id": row.doc_id,
            "title": row.title or "",
            "source": row.source or "",
            "status": row.status,
            "version": row.version,
            "chunk_count": row.chunk_count,
            "text": "\n\n".join(str(c.get("text", "")) for c in chunks),
            "complete": len(chunks) < MAX_DOCUMENT_CHUNKS,
        }

    async def document(self, who: Principal, doc_id: str) -> dict[str, Any]:
        """``who``'s document ``doc_id``: its registry row and its text (its indexed chunks
        in order; ``complete`` false when cut at :data:`MAX_DOCUMENT_CHUNKS`).

        Raises:
            ApiError: 404 ``NOT_FOUND`` (no such document for the tenant, or a deleted one),
                503.
        """
        if not doc_id or len(doc_id) > 512:
            raise ApiError(404, "NOT_FOUND", f"no document {doc_id[:60]!r} for this tenant")
        found = await asyncio.to_thread(self._document, who.tenant, doc_id, who.principals)
        if found is None:
            raise ApiError(404, "NOT_FOUND", f"no document {doc_id!r} for this tenant")
        if found["status"] == "deleted":  # a tombstone, as GET /v1/documents/{doc_id} says
            raise ApiError(404, "NOT_FOUND", f"document {doc_id!r} was deleted")
        return found

    async def documents(
        self,
        who: Principal,
        *,
        status: str | None = None,
        cursor: str | None = None,
        limit: int = MAX_LISTED,
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of ``who``'s documents, newest first: up to ``limit`` of ``{doc_id, title,
        source, status}`` (only those of ``status`` when given), after ``cursor``, and the
        cursor of the next page (``None``: this was the last).

        The cursor is :mod:`api.pages`' opaque keyset cursor of ``GET /v1/documents`` (one
        handed out by either works in both).

        Raises:
            ApiError: 422 ``INVALID_REQUEST`` for a cursor this API did not hand out.
        """
        before = decode_cursor(cursor, (int,))
        registry = DocumentRegistry(self.services.sessions)
        rows = await asyncio.to_thread(
            partial(
                registry.page, who.tenant, limit=limit + 1, status=status or None,
                before_id=None if before is None else before[0], principals=who.principals,
            )
        )  # fmt: skip
        more = len(rows) > limit
        listed = [
            {
                "doc_id": r.doc_id,
                "title": r.title or "",
                "source": r.source or "",
                "status": r.status,
            }
            for r in rows[:limit]
        ]
        return listed, encode_cursor([rows[limit - 1].id]) if more else None
