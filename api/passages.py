"""Indexed passages read for the routes: one chunk of the caller's tenant as the index holds
it (``GET /v1/chunks/{chunk_id}``, the feedback route's judged passage)."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import Request

from api.deps import services
from api.errors import ApiError
from ragstream.settings import Settings
from workers.retrieval.query import acl_clause

FIELDS = ["tenant", "doc_id", "chunk_id", "chunk_no", "version", "title", "source", "text"]


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
