"""``GET /v1/chunks/{chunk_id}``: one indexed passage of the caller's tenant, as the index holds
it: the text that evidence spans' ``start``/``end`` offsets point into (the console opens a
citation with its span highlighted there), with its document's id, title and source."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel

from api.auth import Principal
from api.deps import principal
from api.errors import ApiError, ErrorEnvelope
from api.passages import read_chunk

router = APIRouter(tags=["documents"])
ERRORS: dict[int | str, dict[str, Any]] = {
    s: {"model": ErrorEnvelope} for s in (401, 404, 429, 503)
}


class ChunkOut(BaseModel):
    """One indexed passage (chunk) of a document."""

    chunk_id: str
    doc_id: str
    chunk_no: int
    version: int
    title: str = ""
    source: str = ""
    text: str


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
