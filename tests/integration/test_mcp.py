"""The MCP server end to end, driven by the official MCP SDK's own client over both transports:
streamable HTTP (``/mcp`` of a real API server) and stdio (``ragstream mcp`` as a subprocess),
against real pool processes, Kafka, Elasticsearch, Redis and SQL (the evidence tier answers).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Iterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import quote

import httpx
import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from api.mcp.knowledge import MAX_LISTED
from ingest.registry import DocumentRegistry
from ragstream.db.engine import make_engine, make_session_factory
from tests.integration.stack import (
    RAGSTREAM,
    Stack,
    get_json,
    index_document,
    make_stack,
    wait_for,
)

DOC = (
    "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples. The autovacuum launcher "
    "starts workers every autovacuum_naptime, which defaults to one minute."
)
SECRET = (
    "# Launch codes\n\nThe rocket launch window opens at dawn; the ignition sequence takes "
    "ninety seconds."
)
POOLS = ("ingest", "retrieval", "rerank", "delivery")
#: Ids a tenant may choose that are not path-safe, each with the one resource URI it has.
ODD_IDS = {
    "/abs/id": "ragstream://documents/%2Fabs%2Fid",
    "a/b": "ragstream://documents/a%2Fb",
    "50% off #1": "ragstream://documents/50%25%20off%20%231",
}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    # No rate limit: the limiter counts per key id in the shared Redis, and every private
    # store numbers its keys from 1.
    s = make_stack(tmp_path_factory.mktemp("mcp"), "mcp", RAGSTREAM_API__RATE_PER_MINUTE="0")
    s.start_pools(POOLS)
    try:
        s.wait_ready()
        s.api()
        s.keys["acme"] = s.key(s.name + "-acme")
        s.keys["globex"] = s.key(s.name + "-globex")
        s.keys["admin"] = s.key(s.name + "-acme", principals=["*"])
        s.keys["eng"] = s.key(s.name + "-acme", principals=["group:eng"])
        url, admin = s.apis[0].url, s.keys["admin"]
        for doc_id, text, readers in (("vacuum", DOC, None), ("secret", SECRET, ["group:eng"])):
            index_document(url, admin, doc_id, text, **({"readers": readers} if readers else {}))
        yield s
    finally:
        s.close()


@asynccontextmanager
async def over_http(stack: Stack, key: str) -> AsyncIterator[ClientSession]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        streamable_http_client(f"{stack.apis[0].url}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


@asynccontextmanager
async def over_stdio(stack: Stack, key: str) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=RAGSTREAM, args=["mcp", "--key", key], env=stack.env)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


TRANSPORTS = {"http": over_http, "stdio": over_stdio}


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=240))


def _text(content: Any) -> str:
    """The text of a text content block or text resource."""
    return str(content.text)


def _json(result: Any) -> Any:
    assert not result.is_error, result.content
    return json.loads(_text(result.content[0]))


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_search_ask_and_documents_through_the_sdk_client(stack: Stack, transport: str) -> None:
    async def go() -> dict[str, Any]:
        async with TRANSPORTS[transport](stack, stack.keys["acme"]) as session:
            tools = await session.list_tools()
            templates = await session.list_resource_templates()
            found = _json(await session.call_tool("search", {"query": "dead tuples", "top_k": 3}))
            asked = _json(await session.call_tool("ask", {"question": "What does VACUUM reclaim?"}))
            doc = _json(await session.call_tool("get_document", {"doc_id": "vacuum"}))
            text = await session.read_resource("ragstream://documents/vacuum")
            listed = await session.read_resource("ragstream://documents")
            unknown = await session.call_tool("get_document", {"doc_id": "nope"})
            return {
                "tools": sorted(t.name for t in tools.tools),
                "templates": [t.uri_template for t in templates.resource_templates],
                "found": found, "asked": asked, "doc": doc, "text": _text(text.contents[0]),
                "listed": json.loads(_text(listed.contents[0]))["items"],
                "unknown": (unknown.is_error, _text(unknown.content[0])),
            }  # fmt: skip

    out = run(go())
    assert out["tools"] == ["ask", "get_document", "search"]
    assert {"ragstream://documents/{doc_id}", "ragstream://documents{?status,cursor}"} <= set(
        out["templates"]
    )
    passages = out["found"]["passages"]
    assert passages and passages[0]["doc_id"] == "vacuum" and "dead tuples" in passages[0]["text"]
    assert {"n", "chunk_id", "title", "source", "score"} <= passages[0].keys()
    asked = out["asked"]
    assert asked["status"] == "answered" and "reclaims" in asked["answer"], asked
    assert asked["citations"][0]["doc_id"] == "vacuum" and asked["evidence"], asked
    assert out["doc"]["title"] == "VACUUM" and "VACUUM reclaims storage" in out["doc"]["text"]
    assert "autovacuum_naptime" in out["text"]
    assert [d["doc_id"] for d in out["listed"]] == ["vacuum"]
    is_error, message = out["unknown"]  # the SDK says which tool failed, then our reason
    assert is_error and message.endswith(": NOT_FOUND: no document 'nope' for this tenant")


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_another_tenant_sees_none_of_it(stack: Stack, transport: str) -> None:
    async def go() -> tuple[Any, Any]:
        async with TRANSPORTS[transport](stack, stack.keys["globex"]) as session:
            found = _json(await session.call_tool("search", {"query": "dead tuples"}))
            doc = await session.call_tool("get_document", {"doc_id": "vacuum"})
            return found, doc

    found, doc = run(go())
    assert found["passages"] == []
    assert doc.is_error and "no document 'vacuum'" in _text(doc.content[0])


def test_a_bad_key_is_refused_clearly_over_both_transports(stack: Stack) -> None:
    url = f"{stack.apis[0].url}/mcp"
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    refused = httpx.post(url, json=body, headers={"Authorization": "Bearer nope"}, timeout=30)
    assert refused.status_code == 401 and refused.json()["id"] == 7
    assert refused.json()["error"]["data"] == {
        "status": 401, "code": "UNAUTHENTICATED", "message": "unknown or revoked API key",
        "header": "Authorization: Bearer <key>", "alternative": "X-API-Key: <key>",
    }  # fmt: skip
    assert 'error="invalid_token"' in refused.headers["www-authenticate"]
    missing = httpx.post(url, json=body, timeout=30)
    assert missing.status_code == 401 and "API key is required" in missing.text

    async def go() -> Any:
        async with over_stdio(stack, "rsk_not-a-key") as session:
            return await session.call_tool("search", {"query": "dead tuples"})

    result = run(go())
    assert result.is_error
    assert _text(result.content[0]).endswith(": UNAUTHENTICATED: unknown or revoked API key")


def _mcp_error(exc: BaseException) -> MCPError | None:
    """The :class:`MCPError` in ``exc`` (itself, or in an exception group), if any."""
    if isinstance(exc, MCPError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        return next((e for x in exc.exceptions if (e := _mcp_error(x))), None)
    return None


@pytest.mark.parametrize(("headers", "reason"), [
    ({}, "an API key is required"),
    ({"Authorization": "Bearer rsk_not-a-key"}, "unknown or revoked API key"),
])  # fmt: skip
def test_the_sdk_client_says_which_header_to_send(
    stack: Stack, headers: dict[str, str], reason: str
) -> None:
    """The SDK's own client over streamable HTTP, with no key or a bad one: the error it
    raises names the header to send (not "Server returned an error response")."""

    async def go() -> BaseException:
        try:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=60) as http,
                streamable_http_client(f"{stack.apis[0].url}/mcp", http_client=http) as (r, w),
                ClientSession(r, w) as session,
            ):
                await session.initialize()
        except BaseException as exc:  # the transport's task group wraps it in a group
            return _mcp_error(exc) or exc
        raise AssertionError("initialize succeeded without a valid key")

    error = run(go())
    assert isinstance(error, MCPError), repr(error)
    assert str(error) == (
        f"UNAUTHENTICATED: {reason}; send the header 'Authorization: Bearer <key>' "
        "(or 'X-API-Key: <key>')"
    )
    assert error.data["header"] == "Authorization: Bearer <key>"


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_the_documents_list_pages_with_a_cursor(stack: Stack, transport: str) -> None:
    """More documents than one page holds: each page says how to get the next (``next_uri``,
    the cursor of ``GET /v1/documents``), and the pages hold every document once."""
    url, key = stack.apis[0].url, stack.key(stack.name + "-pages")
    posted = [f"p{n}" for n in range(MAX_LISTED + 5)]
    sessions = make_session_factory(make_engine(stack.settings.database_url))
    registry = DocumentRegistry(sessions)
    for doc_id in posted:  # registry rows, as the ingest pool writes them (faster than indexing)
        registry.record(stack.name + "-pages", doc_id, status="indexed", version=1)

    async def go() -> list[dict[str, Any]]:
        pages: list[dict[str, Any]] = []
        uri: str | None = "ragstream://documents?status=indexed"
        async with TRANSPORTS[transport](stack, key) as session:
            while uri is not None and len(pages) < 5:
                pages.append(json.loads(_text((await session.read_resource(uri)).contents[0])))
                uri = pages[-1]["next_uri"]
        return pages

    pages = run(go())
    assert [len(p["items"]) for p in pages] == [MAX_LISTED, 5]
    assert pages[0]["next_uri"] == (
        f"ragstream://documents?status=indexed&cursor={pages[0]['next_cursor']}"
    )
    listed = [d["doc_id"] for p in pages for d in p["items"]]
    assert sorted(listed) == sorted(posted) and listed[0] == posted[-1]  # newest first, once
    http_page = httpx.get(
        f"{url}/v1/documents", params={"cursor": pages[0]["next_cursor"], "limit": 10},
        headers={"Authorization": f"Bearer {key}"}, timeout=30,
    )  # fmt: skip
    assert [d["doc_id"] for d in http_page.json()["items"]] == listed[MAX_LISTED:]


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_key_sees_only_the_documents_its_principals_may_read(
    stack: Stack, transport: str
) -> None:
    """The MCP tools and resources filter by the key's principals as the HTTP API does
    (docs/permissions.md): a document readable by ``group:eng`` is found, read and listed with
    an eng key and is missing for a key without that group."""

    async def go(key: str) -> dict[str, Any]:
        async with TRANSPORTS[transport](stack, key) as session:
            found = _json(await session.call_tool("search", {"query": "rocket launch window"}))
            doc = await session.call_tool("get_document", {"doc_id": "secret"})
            listed = await session.read_resource("ragstream://documents")
            return {
                "found": {p["doc_id"] for p in found["passages"]},
                "doc": (doc.is_error, _text(doc.content[0])),
                "listed": {d["doc_id"] for d in json.loads(_text(listed.contents[0]))["items"]},
            }

    plain, eng = run(go(stack.keys["acme"])), run(go(stack.keys["eng"]))
    assert "secret" not in plain["found"] and "secret" not in plain["listed"]
    assert plain["doc"][0] and "no document 'secret'" in plain["doc"][1]
    assert "secret" in eng["found"] and {"secret", "vacuum"} <= eng["listed"]
    assert not eng["doc"][0] and "ignition sequence" in eng["doc"][1]


@pytest.fixture(scope="module")
def odd_ids_key(stack: Stack) -> str:
    """The key of a tenant of its own whose documents are :data:`ODD_IDS`, all indexed."""
    url, key = stack.apis[0].url, stack.key(stack.name + "-odd-ids")
    headers = {"Authorization": f"Bearer {key}"}
    for n, doc_id in enumerate(ODD_IDS):
        body = {"doc_id": doc_id, "text": f"# Odd {n}\n\nThe text of document number {n}."}
        posted = httpx.post(f"{url}/v1/documents", json=body, headers=headers, timeout=30)
        assert posted.status_code == 202, posted.text
    for doc_id in ODD_IDS:  # the HTTP API's path takes the id percent-encoded too
        wait_for(
            lambda d=doc_id: (
                get_json(f"{url}/v1/documents/{quote(d, safe='')}", key)[1].get("status")
                == "indexed"
            ),
            timeout_s=120,
            what=f"document {doc_id!r} indexed",
        )
    return key


@pytest.mark.parametrize("transport", sorted(TRANSPORTS))
def test_a_document_of_any_id_is_read_by_the_uri_the_list_gives(
    stack: Stack, odd_ids_key: str, transport: str
) -> None:
    """Ids with a leading or inner ``/``, a space, ``%`` and ``#`` each have one resource URI
    (the id percent-encoded), listed with the document and read back by the SDK's client."""

    async def read(session: ClientSession, uri: str) -> str:
        try:
            return _text((await session.read_resource(uri)).contents[0])
        except Exception as exc:  # shown by the assertion: which URI failed, and why
            return f"error: {exc!r}"

    async def go() -> tuple[list[dict[str, Any]], dict[str, str]]:
        async with TRANSPORTS[transport](stack, odd_ids_key) as session:
            listed = await session.read_resource("ragstream://documents")
            texts = {doc_id: await read(session, uri) for doc_id, uri in ODD_IDS.items()}
            return json.loads(_text(listed.contents[0]))["items"], texts

    listed, texts = run(go())
    for n, doc_id in enumerate(ODD_IDS):
        assert f"The text of document number {n}." in texts[doc_id], (doc_id, texts[doc_id])
    assert {d["doc_id"]: d.get("uri") for d in listed} == ODD_IDS
