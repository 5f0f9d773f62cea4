"""``POST /v1/search``: the passages of a query from the caller's index, without an answer.

The route asks the process's one :class:`~api.searching.Searcher` (shared with the MCP
``search`` tool and the Dify adapter), so a search has the tenant, readers, filters, limits and
follow-up rewrite of ``POST /v1/query``'s retrieval stage; the key's rate limit applies as on
every route. ``score`` is the ranker's (the module docstring of :mod:`api.searching`);
``score_threshold`` leaves out the passages below it, in that score.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request

from api.auth import Principal
from api.deps import principal, services
from api.errors import ErrorEnvelope
from api.search_models import SearchBody, SearchHit, SearchResults
from api.searching import Hit, shared_searcher

router = APIRouter(tags=["search"])

ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 403, 413, 415, 422, 429, 503)
}
#: The example body of ``POST /v1/search`` (Swagger UI's "Try it out" sends it as is).
SEARCH_EXAMPLE = {"query": "What does VACUUM do?", "top_k": 5, "ranker": "hybrid"}


def search_hit(hit: Hit) -> SearchHit:
    """The response item of one :class:`~api.searching.Hit`."""
    c = hit.candidate
    return SearchHit(
        n=hit.n, doc_id=c.doc_id, chunk_id=c.chunk_id, title=c.title, source=c.source,
        score=hit.score, text=c.text, metadata=dict(c.metadata),
    )  # fmt: skip


@router.post(
    "/v1/search",
    response_model=SearchResults,
    responses=ERRORS,
    openapi_extra={
        "requestBody": {"content": {"application/json": {"example": SEARCH_EXAMPLE}}},
    },
)
async def post_search(
    body: SearchBody, request: Request, who: Principal = Depends(principal)
) -> SearchResults:
    """The ``top_k`` passages of the caller's knowledge base best matching ``query``, best
    first, each with its document, chunk, title, source, score and text."""
    found = await shared_searcher(services(request)).search(
        who,
        body.query,
        top_k=body.top_k,
        filters=body.filters,
        ranker=body.ranker,
        history=body.history,
    )
    if body.score_threshold is not None:
        found = [hit for hit in found if hit.score >= body.score_threshold]
    return SearchResults(
        query=body.query, ranker=body.ranker, data=[search_hit(hit) for hit in found]
    )
