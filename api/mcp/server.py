"""The MCP server: tools ``search``, ``ask``, ``get_document`` and the documents as resources,
on the official MCP Python SDK (``mcp``, :class:`mcp.server.mcpserver.MCPServer`).

Every tool call and resource read authenticates the caller's API key (a revoked key stops
working within the API's 30 s key cache) and works within its tenant. Where the key comes from
is the transport's business (``key_of``): the ``Authorization: Bearer`` (or ``X-API-Key``)
header of the HTTP request (:mod:`api.mcp.http`), or the key ``ragstream mcp`` was started with
(stdio). Failures are tool errors (``isError`` results) with the API's reason: ``unknown or
revoked API key``, ``no document 'x' for this tenant``, ...; a resource that does not exist is
the protocol's resource-not-found error.

A document's resource URI carries its id percent-encoded (:func:`document_uri`), so every id a
tenant may choose (``/abs/id``, ``a/b``, ``50% off #1``, ``..``) has exactly one URI.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, urlencode

import structlog
from mcp.server.mcpserver import Context, MCPServer, ResourceSecurity
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from prometheus_client import Counter

from api.auth import Principal
from api.errors import ApiError
from api.mcp.knowledge import MAX_LISTED, KnowledgeBase, Route
from ragstream import __version__

log = structlog.get_logger(__name__)

CALLS = Counter(
    "ragstream_mcp_calls_total",
    "MCP tool calls and resource reads, by tool (or resource) and outcome (ok or the error code).",
    ["tool", "outcome"],
)
#: The key of the caller of one request, from the transport (``None``: none presented).
KeyOf = Callable[[Context], str | None]
INSTRUCTIONS = (
    "Search and ask the knowledge base of your ragstream tenant. `search` returns passages "
    "with their document ids (cite them); `ask` returns an answer with citations and quoted "
    "evidence; `get_document` or the resource ragstream://documents/{doc_id} (the id "
    "percent-encoded, `/` as %2F; the list ragstream://documents gives each document's `uri`, "
    "a page at a time: read its `next_uri` for the next page) returns a whole document."
)
#: Most passages ``search`` returns.
MAX_TOP_K = 20
#: Where a document's resource URIs start; the percent-encoded id follows.
DOCUMENT_URI_PREFIX = "ragstream://documents/"
#: The documents list, a page at a time (RFC 6570 form-style query: ``?status=..&cursor=..``).
DOCUMENTS_TEMPLATE = "ragstream://documents{?status,cursor}"
#: The path checks of the SDK's resource templates (on by default) are for values joined onto
#: a filesystem path; a document id is a registry key a tenant chooses freely, and ``/abs/id``,
#: ``..`` or ``c:notes`` are ids like any other. NUL stays refused: no id holds a control
#: character (the API refuses them), and the SQL driver would fail on one.
DOC_ID_SECURITY = ResourceSecurity(reject_path_traversal=False, reject_absolute_paths=False)


def document_uri(doc_id: str) -> str:
    """The resource URI of document ``doc_id``: ``ragstream://documents/`` and the id's UTF-8
    bytes percent-encoded, every character but RFC 3986's unreserved ones (letters, digits,
    ``-._~``) encoded, ``/`` included (``/abs/id`` -> ``ragstream://documents/%2Fabs%2Fid``,
    ``50% off`` -> ``...documents/50%25%20off``). It is the template's own expansion (RFC 6570
    simple string), and the SDK decodes the value it matches, so a read gets the id back."""
    return DOCUMENT_URI_PREFIX + quote(doc_id, safe="")


def documents_uri(status: str, cursor: str | None) -> str:
    """The URI of a page of the documents list: :data:`DOCUMENTS_TEMPLATE` expanded with
    ``status`` (``""``: every status) and ``cursor`` (``None``: the first page), e.g.
    ``ragstream://documents?status=indexed&cursor=WzEyXQ``."""
    query = [(k, v) for k, v in (("status", status), ("cursor", cursor)) if v]
    return "ragstream://documents" + ("?" + urlencode(query, quote_via=quote) if query else "")


async def _call(tool: str, work: Callable[[], Awaitable[Any]]) -> Any:
    """Run one tool's ``work``; an :class:`ApiError` becomes a :class:`ToolError` with its
    code and reason (the client sees ``isError`` and the text)."""
    try:
        result = await work()
    except ApiError as exc:
        CALLS.labels(tool, exc.code).inc()
        raise ToolError(f"{exc.code}: {exc.message}") from exc
    CALLS.labels(tool, "ok").inc()
    return result


def build_server(kb: KnowledgeBase, key_of: KeyOf) -> MCPServer:
    """The MCP server of ``kb``, authenticating each call with ``key_of(ctx)``."""
    server = MCPServer(
        name="ragstream", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    async def caller(ctx: Context) -> Principal:
        return await kb.principal(key_of(ctx))

    _add_tools(server, kb, caller)
    _add_resources(server, kb, caller)
    return server


Caller = Callable[[Context], Awaitable[Principal]]


def _add_tools(server: MCPServer, kb: KnowledgeBase, caller: Caller) -> None:
    """``search``, ``ask`` and ``get_document``."""

    @server.tool(
        description="Search the knowledge base: the best passages for `query`, best first, "
        "each with its document id, chunk id, title, source, fused score and text."
    )
    async def search(query: str, ctx: Context, top_k: int = 5) -> dict[str, Any]:
        async def work() -> dict[str, Any]:
            who = await caller(ctx)
            k = max(1, min(top_k, MAX_TOP_K))
            return {"query": query, "passages": await kb.search(who, query, k)}

        return await _call("search", work)  # type: ignore[no-any-return]

    @server.tool(
        description="Ask a question of the knowledge base: the answer, its citations "
        "(document, chunk, title, source by [n]) and the quoted evidence spans it rests on "
        "(with character offsets in their passages). `route`: auto (default), evidence (quoted "
        "evidence, no LLM), small or large (an LLM over the evidence). A status `failed` "
        "carries the error; `pending`: no answer within the wait."
    )
    async def ask(question: str, ctx: Context, route: Route = "auto") -> dict[str, Any]:
        async def work() -> dict[str, Any]:
            who = await caller(ctx)
            answer = await kb.ask(who, question, route)
            return answer.model_dump(mode="json", exclude={"trace"})

        return await _call("ask", work)  # type: ignore[no-any-return]

    @server.tool(
        description="A document of the knowledge base by its id (as `search` and `ask` cite "
        "it): title, source, status, version and its text."
    )
    async def get_document(doc_id: str, ctx: Context) -> dict[str, Any]:
        async def work() -> dict[str, Any]:
            return await kb.document(await caller(ctx), doc_id)

        return await _call("get_document", work)  # type: ignore[no-any-return]


def _add_resources(server: MCPServer, kb: KnowledgeBase, caller: Caller) -> None:
    """``ragstream://documents{?status,cursor}`` (the list a page at a time, each document with
    its ``uri``, and the page's ``next_uri``) and
    ``ragstream://documents/{doc_id}`` (the id percent-encoded, see :func:`document_uri`).
    Both are templates: a static resource cannot know its caller (the SDK gives those no
    context)."""

    @server.resource(
        DOCUMENTS_TEMPLATE,
        name="documents",
        description="The tenant's documents, newest first, one page of at most "
        f"{MAX_LISTED}: `{{items, next_cursor, next_uri}}`, each item with its id, title, "
        "source, status and `uri` (the document's resource URI). Read `next_uri` for the next "
        "page (it carries `cursor`, the opaque cursor of GET /v1/documents); null: the last "
        "page. `status`: only those (indexed, deleted or failed).",
        mime_type="application/json",
    )
    async def documents(ctx: Context, status: str = "", cursor: str = "") -> str:
        async def work() -> str:
            who = await caller(ctx)
            listed, next_cursor = await kb.documents(
                who, status=status or None, cursor=cursor or None
            )
            return json.dumps(
                {
                    "items": [{**d, "uri": document_uri(d["doc_id"])} for d in listed],
                    "next_cursor": next_cursor,
                    "next_uri": documents_uri(status, next_cursor) if next_cursor else None,
                }
            )

        return await _call("documents", work)  # type: ignore[no-any-return]

    @server.resource(
        DOCUMENT_URI_PREFIX + "{doc_id}",
        name="document",
        description="One document's text (its indexed chunks, in order). `doc_id` is "
        "percent-encoded, every reserved character included (`a/b` -> a%2Fb, `/x` -> %2Fx); "
        "the documents list gives each URI.",
        mime_type="text/plain",
        security=DOC_ID_SECURITY,
    )
    async def document(doc_id: str, ctx: Context) -> str:
        # The SDK's match has decoded ``doc_id`` already; decoding again would change ids
        # that hold a ``%`` (``50%20`` is an id, not ``50 ``).
        try:
            found = await kb.document(await caller(ctx), doc_id)
        except ApiError as exc:
            CALLS.labels("document", exc.code).inc()
            if exc.status == 404:
                raise ResourceNotFoundError(exc.message) from exc
            raise ToolError(f"{exc.code}: {exc.message}") from exc
        CALLS.labels("document", "ok").inc()
        return str(found["text"])
