"""The MCP server's logic with the SDK's in-process client and a fake knowledge base: the tools
and resources it lists, the key each call is authenticated with, errors as tool errors with the
API's code and reason; and the HTTP endpoint's key check on the real app."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mcp.client.client import Client
from mcp.types import TextResourceContents

from api.auth import Principal
from api.errors import ApiError
from api.mcp.http import presented_key
from api.mcp.server import build_server
from ragstream.db.engine import upgrade_head
from tests.unit.apikit import answered, make_app
from topics.answers import Answer

KEY = "rsk_good"
#: Ids a tenant may choose, with the one resource URI each has (every reserved character
#: percent-encoded, ``/`` included); the SDK's default path checks refuse the first, ``..``
#: and ``c:notes``.
ODD_IDS = {
    "/abs/id": "ragstream://documents/%2Fabs%2Fid",
    "a/b": "ragstream://documents/a%2Fb",
    "50% off #1?x=y": "ragstream://documents/50%25%20off%20%231%3Fx%3Dy",
    "naïve/日本": "ragstream://documents/na%C3%AFve%2F%E6%97%A5%E6%9C%AC",
    "..": "ragstream://documents/..",
    "c:notes": "ragstream://documents/c%3Anotes",
}


class FakeKnowledge:
    """The methods the tools call; the key ``rsk_good`` is tenant ``acme``, whose documents
    are ``docs`` (id -> text, all indexed) and ``old`` (failed)."""

    def __init__(self, docs: dict[str, str] | None = None) -> None:
        self.keys: list[str | None] = []
        self.docs = docs or {"vacuum": "VACUUM reclaims storage."}
        self.read: list[str] = []
        self.pages: list[tuple[str | None, str | None]] = []
        self.page_size = 200

    async def principal(self, key: str | None) -> Principal:
        self.keys.append(key)
        if key != KEY:
            raise ApiError(401, "UNAUTHENTICATED", "unknown or revoked API key")
        return Principal(1, "acme")

    async def search(self, who: Principal, query: str, top_k: int) -> list[dict[str, Any]]:
        return [{"n": 1, "doc_id": "vacuum", "text": query, "k": top_k, "tenant": who.tenant}]

    async def ask(self, who: Principal, question: str, route: str) -> Answer:
        return Answer(request_id="r1", tenant=who.tenant, query=question, status="answered",
                      answer=f"{route}: VACUUM reclaims storage [1].")  # fmt: skip

    async def document(self, who: Principal, doc_id: str) -> dict[str, Any]:
        self.read.append(doc_id)
        if doc_id not in self.docs:
            raise ApiError(404, "NOT_FOUND", f"no document {doc_id!r} for this tenant")
        return {"doc_id": doc_id, "text": self.docs[doc_id]}

    async def documents(
        self, who: Principal, *, status: str | None = None, cursor: str | None = None
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Pages of two: the cursor is the index of the page's first row (a real one is
        :mod:`api.pages`' opaque cursor)."""
        self.pages.append((status, cursor))
        rows = [{"doc_id": d, "status": "indexed"} for d in self.docs]
        rows = [r for r in [*rows, {"doc_id": "old", "status": "failed"}]
                if status is None or r["status"] == status]  # fmt: skip
        start = int(cursor or 0)
        more = start + self.page_size < len(rows)
        return rows[start : start + self.page_size], str(start + self.page_size) if more else None


def _calls(
    key: str, *calls: tuple[str, str, dict[str, Any]], kb: FakeKnowledge | None = None
) -> tuple[list[Any], FakeKnowledge]:
    kb = kb or FakeKnowledge()
    server = build_server(kb, lambda _ctx: key)  # type: ignore[arg-type]

    async def go() -> list[Any]:
        async with Client(server) as client:
            out: list[Any] = []
            for kind, name, args in calls:
                if kind == "tool":
                    out.append(await client.call_tool(name, args))
                elif kind == "read":
                    out.append(await client.read_resource(name))
                else:
                    out.append(await client.list_tools())
            return out

    return asyncio.run(go()), kb


def test_tools_answer_for_the_keys_tenant() -> None:
    (tools, found, asked, doc, listed), kb = _calls(
        KEY,
        ("list", "", {}),
        ("tool", "search", {"query": "dead tuples", "top_k": 50}),
        ("tool", "ask", {"question": "What does VACUUM do?", "route": "evidence"}),
        ("tool", "get_document", {"doc_id": "vacuum"}),
        ("read", "ragstream://documents?status=indexed", {}),
    )
    assert sorted(t.name for t in tools.tools) == ["ask", "get_document", "search"]
    passages = json.loads(found.content[0].text)["passages"]
    assert passages == [{"n": 1, "doc_id": "vacuum", "text": "dead tuples", "k": 20,
                         "tenant": "acme"}]  # fmt: skip
    answer = json.loads(asked.content[0].text)
    assert answer["answer"] == "evidence: VACUUM reclaims storage [1]." and "trace" not in answer
    assert json.loads(doc.content[0].text)["text"] == "VACUUM reclaims storage."
    assert json.loads(listed.contents[0].text) == {
        "items": [{"doc_id": "vacuum", "status": "indexed", "uri": "ragstream://documents/vacuum"}],
        "next_cursor": None,
        "next_uri": None,
    }
    assert kb.keys == [KEY] * 4  # every call authenticated


def test_errors_are_tool_errors_with_the_apis_code_and_reason() -> None:
    (unknown,), _ = _calls(KEY, ("tool", "get_document", {"doc_id": "nope"}))
    assert unknown.is_error
    assert unknown.content[0].text.endswith("NOT_FOUND: no document 'nope' for this tenant")
    (refused,), _ = _calls("rsk_bad", ("tool", "search", {"query": "x"}))
    assert refused.is_error
    assert refused.content[0].text.endswith("UNAUTHENTICATED: unknown or revoked API key")


def _messages(exc: BaseException) -> list[str]:
    """The messages of ``exc`` and, for a group, of every exception in it."""
    if isinstance(exc, BaseExceptionGroup):
        return [m for e in exc.exceptions for m in _messages(e)]
    return [str(exc)]


def test_a_missing_document_resource_is_a_protocol_error() -> None:
    with pytest.raises(BaseException) as raised:
        _calls(KEY, ("read", "ragstream://documents/nope", {}))
    assert any("no document 'nope'" in m for m in _messages(raised.value)), raised.value


def test_the_documents_list_gives_each_documents_one_uri() -> None:
    kb = FakeKnowledge({doc_id: "" for doc_id in ODD_IDS})
    (listed,), _ = _calls(KEY, ("read", "ragstream://documents?status=indexed", {}), kb=kb)
    assert {d["doc_id"]: d["uri"] for d in json.loads(listed.contents[0].text)["items"]} == ODD_IDS


def test_the_documents_list_pages_by_the_next_uri_it_gives() -> None:
    """Each page names the next (``next_uri`` carries the cursor and the status filter), so a
    client that reads ``next_uri`` until it is null gets every document once."""
    kb = FakeKnowledge({f"d{n}": "" for n in range(5)})
    kb.page_size = 2

    async def go() -> list[dict[str, Any]]:
        server = build_server(kb, lambda _ctx: KEY)  # type: ignore[arg-type]
        pages: list[dict[str, Any]] = []
        uri: str | None = "ragstream://documents?status=indexed"
        async with Client(server) as client:
            while uri is not None:
                (content,) = (await client.read_resource(uri)).contents
                assert isinstance(content, TextResourceContents)
                pages.append(json.loads(content.text))
                uri = pages[-1]["next_uri"]
        return pages

    pages = asyncio.run(go())
    assert [[d["doc_id"] for d in p["items"]] for p in pages] == [
        ["d0", "d1"],
        ["d2", "d3"],
        ["d4"],
    ]
    assert [p["next_uri"] for p in pages] == [
        "ragstream://documents?status=indexed&cursor=2",
        "ragstream://documents?status=indexed&cursor=4",
        None,
    ]
    assert kb.pages == [("indexed", None), ("indexed", "2"), ("indexed", "4")]


@pytest.mark.parametrize(("doc_id", "uri"), ODD_IDS.items())
def test_a_read_of_a_documents_uri_gets_that_document(doc_id: str, uri: str) -> None:
    kb = FakeKnowledge({d: f"the text of {d}" for d in ODD_IDS})
    (read,), _ = _calls(KEY, ("read", uri, {}), kb=kb)
    assert kb.read == [doc_id]  # the URI decoded to the id, as is
    assert read.contents[0].text == f"the text of {doc_id}"
    assert str(read.contents[0].uri) == uri


@pytest.mark.parametrize(
    "uri",
    [
        "ragstream://documents/a/b",  # an inner "/" must be %2F: the id has one URI
        "ragstream://documents/a%00b",  # NUL: no id holds a control character
    ],
)
def test_other_spellings_of_a_document_uri_are_unknown_resources(uri: str) -> None:
    kb = FakeKnowledge({"a/b": "x", "a\x00b": "y"})
    with pytest.raises(BaseException) as raised:
        _calls(KEY, ("read", uri, {}), kb=kb)
    assert any("Unknown resource" in m for m in _messages(raised.value)), raised.value
    assert kb.read == []


@pytest.mark.parametrize(
    ("headers", "key"),
    [
        ({"authorization": "Bearer rsk_1"}, "rsk_1"),
        ({"authorization": "bearer  rsk_2 "}, "rsk_2"),
        ({"x-api-key": "rsk_3"}, "rsk_3"),
        ({"authorization": "Basic abc"}, None),
        ({}, None),
    ],
)
def test_the_key_of_a_request(headers: dict[str, str], key: str | None) -> None:
    assert presented_key(headers) == key


def test_the_http_endpoint_refuses_a_request_without_a_valid_key(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, answered)
    upgrade_head(app.state.services.settings.database_url)  # the key store, empty
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    with TestClient(app) as client:
        missing = client.post("/mcp", json=body)
        bad = client.post("/mcp", json=body, headers={"Authorization": "Bearer rsk_nope"})
        stream = client.get("/mcp")
    # A JSON-RPC error (the body the SDK's client shows), with the request's id, naming the
    # header to send in the message and in data.
    assert missing.status_code == 401 and missing.json() == {
        "jsonrpc": "2.0", "id": 1,
        "error": {
            "code": -32001,
            "message": "UNAUTHENTICATED: an API key is required; send the header "
            "'Authorization: Bearer <key>' (or 'X-API-Key: <key>')",
            "data": {"status": 401, "code": "UNAUTHENTICATED", "message": "an API key is required",
                     "header": "Authorization: Bearer <key>", "alternative": "X-API-Key: <key>"},
        },
    }  # fmt: skip
    assert missing.headers["www-authenticate"] == 'Bearer realm="ragstream"'
    assert bad.status_code == 401
    assert bad.json()["error"]["data"]["message"] == "unknown or revoked API key"
    assert bad.headers["www-authenticate"] == (
        'Bearer realm="ragstream", error="invalid_token", '
        'error_description="unknown or revoked API key"'
    )
    assert stream.status_code == 401 and stream.json()["id"] is None


def test_ragstream_mcp_without_a_key_exits_saying_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from entry.cli import app

    monkeypatch.delenv("RAGSTREAM_MCP__API_KEY", raising=False)
    result = CliRunner().invoke(app, ["mcp"])
    assert result.exit_code == 2
    assert "an API key is required (--key or RAGSTREAM_MCP__API_KEY)" in result.output
