"""``GET /v1/chunks/{chunk_id}``: one indexed passage of the caller's tenant, as the index holds
it: the text that evidence spans' ``start``/``end`` offsets point into (the console opens a
citation with its span highlighted there), with its document's id, title and source."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from api.auth import Principal
from api.deps import principal, services
from api.errors import ApiError, ErrorEnvelope
from ragstream.settings import Settings
from workers.retrieval.query import acl_clause

router = APIRouter(tags=["documents"])
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 404, 429, 503)
}
FIELDS = ["tenant", "doc_id", "chunk_id", "chunk_no", "version", "title", "source", "text"]


class ChunkOut(BaseModel):
    """One indexed passage (chunk) of a document."""

    chunk_id: str
    doc_id: str
    chunk_no: int
    version: int
    title: str = ""
    source: str = ""
    text: str


def _search(
    settings: Settings,
    es: Any,
    tenant: str,
    chunk_id: str,
    principals: tuple[str, ...] | None = None,
) -> dict[str, Any] | None:
    """The chunk's fields, or ``None`` when the caller's tenant has no such chunk it may read
    (the permission filter of the searches, :func:`workers.retrieval.query.acl_clause`)."""
    filters: list[dict[str, Any]] = [{"term": {"tenant": tenant}}, {"term": {"chunk_id": chunk_id}}]
    acl = acl_clause(principals)
    if acl is not None:
        filters.append(acl)
    query = {"bool": {"filter": filters}}
    found = es.search(
        index=settings.elasticsearch.index_alias, query=query, size=1, source=FIELDS
    ).body
    hits = found.get("hits", {}).get("hits", [])
    return hits[0]["_source"] if hits else None


async def read_chunk(
    request: Request, tenant: str, chunk_id: str, principals: tuple[str, ...] | None
) -> dict[str, Any] | None:
    """The indexed fields of ``chunk_id`` (:data:`FIELDS`) if ``tenant`` has it and a key
    reading as ``principals`` may read it; ``None`` otherwise (or before any index exists).

    Raises:
        ApiError: 503 ``UNAVAILABLE`` when Elasticsearch cannot answer.
    """
    from elasticsearch import ApiError as EsApiError
    from elasticsearch import Elasticsearch
    from elasticsearch import TransportError as EsTransportError

    svc = services(request)
    es = svc.extras.get("es")
    if es is None:
        es = svc.extras["es"] = Elasticsearch(svc.settings.elasticsearch.hosts, request_timeout=10)
    try:
        return await asyncio.to_thread(_search, svc.settings, es, tenant, chunk_id, principals)
    except EsApiError as exc:
        if exc.meta.status == 404:  # no index yet
            return None
        raise ApiError(503, "UNAVAILABLE", f"elasticsearch: {exc}") from exc
    except EsTransportError as exc:
        raise ApiError(503, "UNAVAILABLE", f"elasticsearch: {exc}") from exc


@router.get("/v1/chunks/{chunk_id}", response_model=ChunkOut, responses=ERRORS)
async def get_chunk(
    chunk_id: str, request: Request, who: Principal = Depends(principal)
) -> ChunkOut:
    """A passage of the caller's index by its chunk id (as citations and evidence name it);
    404 for a chunk of a document the key may not read."""
    if len(chunk_id) > 128:
        raise ApiError(404, "NOT_FOUND", "no such chunk")
    source = await read_chunk(request, who.tenant, chunk_id, who.principals)
    if source is None:
        raise ApiError(404, "NOT_FOUND", f"no chunk {chunk_id!r} for this tenant")
    return ChunkOut(
        chunk_id=source["chunk_id"], doc_id=source["doc_id"],
        chunk_no=int(source.get("chunk_no") or 0), version=int(source.get("version") or 0),
        title=source.get("title") or "", source=source.get("source") or "", text=source["text"],
    )  # fmt: skip
