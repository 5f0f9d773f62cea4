"""Document permissions through the whole product: pool processes (ingest, retrieval, rerank
with the evidence tier, delivery) and the API, keys with principals. A user never sees a
document outside their principals in answers, citations, evidence, cached answers, the query
log, document lists or chunks, also right after a revoke."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.integration.stack import Stack, make_stack, wait_for

POOLS = ("ingest", "retrieval", "rerank", "delivery")
ROCKET = "# Rocket\n\nThe rocket launch code is 9931. It is kept in the vault."
CANTEEN = "# Canteen\n\nLunch in the canteen is served at noon every day."
QUESTION = "What is the rocket launch code?"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("acl"), "acl", RAGSTREAM_EVIDENCE__TIER_MODE="evidence")
    s.start_pools(POOLS)
    try:
        s.wait_ready()
        s.api()
        tenant = s.name + "-acme"
        s.keys["admin"] = s.key(tenant, principals=["*"])
        s.keys["eng"] = s.key(tenant, principals=["group:eng", "user:ada"])
        s.keys["sales"] = s.key(tenant, principals=["group:sales"])
        s.keys["none"] = s.key(tenant)
        _call(s, "admin", "POST", "/v1/documents", 202, json=_doc("rocket", ROCKET, ["group:eng"]))
        _call(s, "admin", "POST", "/v1/documents", 202, json=_doc("canteen", CANTEEN, None))
        for doc in ("rocket", "canteen"):
            wait_for(
                lambda d=doc: (
                    _call(s, "admin", "GET", f"/v1/documents/{d}").json().get("status") == "indexed"
                ),
                timeout_s=120,
                what=f"{doc} indexed",
            )
        yield s
    finally:
        s.close()


def _doc(doc_id: str, text: str, readers: list[str] | None) -> dict[str, Any]:
    body: dict[str, Any] = {"doc_id": doc_id, "text": text, "content_type": "text/markdown"}
    if readers is not None:
        body["readers"] = readers
    return body


def _call(
    s: Stack,
    who: str,
    method: str,
    path: str,
    status: int | None = None,
    headers: dict[str, str] | None = None,
    **kw: Any,
) -> httpx.Response:
    r = httpx.request(
        method,
        s.apis[0].url + path,
        headers={"Authorization": f"Bearer {s.keys[who]}", **(headers or {})},
        timeout=60,
        **kw,
    )
    if status is not None:
        assert r.status_code == status, r.text
    return r


def _ask(s: Stack, who: str, act_as: str | None = None) -> dict[str, Any]:
    body = {"query": QUESTION, "mode": "sync", "timeout_s": 60, "route": "evidence"}
    headers = {} if act_as is None else {"X-Ragstream-Act-As": act_as}
    r = _call(s, who, "POST", "/v1/query", json=body, headers=headers)
    assert r.status_code in (200, 422), r.text  # 422: a refusal is an answer too
    return dict(r.json() if r.status_code == 200 else r.json().get("result", r.json()))


#: The rocket's code as a word of its own: the answer's ids, timestamps and latencies are part
#: of the text searched, and "9931" inside one of them ("…:31.499310Z", "12.99317") is no leak.
ROCKET_CODE = re.compile(r"\b9931\b")


def _sees_rocket(result: dict[str, Any]) -> bool:
    """Whether the rocket document shows anywhere in an answer."""
    text = repr(result)
    return (
        ROCKET_CODE.search(text) is not None
        or "rocket" in {c["doc_id"] for c in result.get("citations", [])}
        or ("rocket" in {e["doc_id"] for e in result.get("evidence", [])})
    )


def _logged(s: Stack, rid: str) -> None:
    wait_for(
        lambda: (
            _call(s, "admin", "GET", f"/v1/queries/{rid}").json().get("status")
            in ("answered", "failed")
        ),
        what="the answer logged and cached by the delivery pool",
    )


def test_a_user_never_sees_a_document_outside_their_principals(stack: Stack) -> None:
    s = stack
    eng = _ask(s, "eng")
    assert eng["status"] == "answered" and _sees_rocket(eng), eng
    rocket_chunk = next(c["chunk_id"] for c in eng["citations"] if c["doc_id"] == "rocket")
    _logged(s, eng["request_id"])
    again = _ask(s, "eng")
    assert again["cached"] and _sees_rocket(again)  # the eng key's own cached answer

    for who in ("sales", "none"):
        other = _ask(s, who)
        assert not _sees_rocket(other), (who, other)
        assert not other.get("cached"), other  # the eng answer is never served across
        listed = _call(s, who, "GET", "/v1/documents", 200).json()["items"]
        assert {d["doc_id"] for d in listed} == {"canteen"}
        _call(s, who, "GET", "/v1/documents/rocket", 404)
        _call(s, who, "GET", f"/v1/chunks/{rocket_chunk}", 404)
        _call(s, who, "GET", f"/v1/queries/{eng['request_id']}", 404)
        logged = _call(s, who, "GET", "/v1/queries", 200).json()["items"]
        assert eng["request_id"] not in {q["request_id"] for q in logged}
    assert _call(s, "eng", "GET", f"/v1/chunks/{rocket_chunk}", 200).json()["doc_id"] == "rocket"
    listed = _call(s, "eng", "GET", "/v1/documents", 200).json()["items"]
    assert {d["doc_id"] for d in listed} == {"rocket", "canteen"}
    assert _call(s, "admin", "GET", "/v1/documents/rocket", 200).json()["readers"] == ["group:eng"]
    # A request may act as fewer principals than its key holds, never more.
    assert not _sees_rocket(_ask(s, "admin", act_as="group:sales"))
    assert _sees_rocket(_ask(s, "admin", act_as="group:eng"))
    assert not _sees_rocket(_ask(s, "eng", act_as="user:ada"))
    act = {"X-Ragstream-Act-As": "group:sales"}
    _call(s, "eng", "GET", "/v1/documents", 403, headers=act)
    _call(s, "admin", "GET", "/v1/documents", 422, headers={"X-Ragstream-Act-As": "alice"})
    # Only a tenant-wide key changes readers (acting as principals, it is not one).
    _call(s, "eng", "PUT", "/v1/readers/rocket", 403, json={"readers": ["user:ada"]})
    _call(
        s, "admin", "PUT", "/v1/readers/rocket", 403,
        headers={"X-Ragstream-Act-As": "group:eng"}, json={"readers": ["user:ada"]},
    )  # fmt: skip


def test_right_after_a_revoke_nothing_of_the_document_is_served(stack: Stack) -> None:
    s = stack
    before = _ask(s, "eng")
    assert _sees_rocket(before)
    _logged(s, before["request_id"])
    assert _ask(s, "eng")["cached"]  # a cached answer that cites the document

    _call(s, "admin", "PUT", "/v1/readers/rocket", 202, json={"readers": ["group:sales"]})
    wait_for(
        lambda: (
            _call(s, "admin", "GET", "/v1/documents/rocket").json().get("readers")
            == ["group:sales"]
        ),
        timeout_s=30,
        interval_s=0.02,
        what="the readers change recorded",
    )
    # At once: no search, cache, log, list or chunk read gives the eng key the document.
    logged = _call(s, "eng", "GET", f"/v1/queries/{before['request_id']}", 200).json()
    assert logged["status"] == "failed" and logged["error"]["code"] == "WITHHELD", logged
    assert not _sees_rocket(logged), logged
    assert _sees_rocket(_call(s, "admin", "GET", f"/v1/queries/{before['request_id']}").json())
    resumed = _call(s, "eng", "GET", f"/v1/queries/{before['request_id']}/events", 403)
    assert not _sees_rocket({"text": resumed.text}), resumed.text
    after = _ask(s, "eng")
    assert not _sees_rocket(after) and not after.get("cached"), after
    listed = _call(s, "eng", "GET", "/v1/documents", 200).json()["items"]
    assert "rocket" not in {d["doc_id"] for d in listed}
    _call(s, "eng", "GET", "/v1/documents/rocket", 404)
    chunk = next(c["chunk_id"] for c in before["citations"] if c["doc_id"] == "rocket")
    _call(s, "eng", "GET", f"/v1/chunks/{chunk}", 404)
    # The new reader sees it.
    sales = _ask(s, "sales")
    assert _sees_rocket(sales), sales
    # A document that does not exist: accepted, and its ingest result says it failed.
    _call(s, "admin", "PUT", "/v1/readers/nope", 202, json={"readers": None})
    _call(s, "admin", "PUT", "/v1/readers/rocket", 422, json={"readers": ["alice"]})
