"""What ingest repairs in its input, through the API and a real ingest pool process (real Kafka,
Elasticsearch, SQL): a lone surrogate (half of a UTF-16 pair, as a cut emoji leaves it) in a
record of an uploaded records file is replaced by U+FFFD, and the record says so in its
``warnings``; before issue 39 the character was replaced with no log, metric or warning. Inline
JSON text holding one is refused with its position. The
metric and log line are checked in ``tests/unit/test_surrogate_warnings.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from elasticsearch import Elasticsearch

from tests.integration.stack import Stack, get_json, make_stack, wait_for

pytestmark = pytest.mark.integration
TENANT = "repairs"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("repairs"), "repairs")
    s.start_pools(("ingest",))
    try:
        s.wait_ready()
        s.api()
        s.keys[TENANT] = s.key(TENANT, principals=["*"], rate_per_minute=0)
        yield s
    finally:
        s.close()


def _auth(s: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {s.keys[TENANT]}"}


def _indexed(s: Stack, doc_id: str) -> dict[str, Any]:
    url = f"{s.apis[0].url}/v1/documents/{quote(doc_id, safe='')}"
    record: dict[str, Any] = wait_for(
        lambda: (d := get_json(url, s.keys[TENANT])[1]).get("status") == "indexed" and d,
        timeout_s=120,
        what=f"document {doc_id} indexed",
    )
    return record


def _chunk_texts(s: Stack, doc_id: str) -> list[str]:
    es = Elasticsearch(s.settings.elasticsearch.url)
    try:
        es.indices.refresh(index=s.settings.elasticsearch.index_alias)
        hits = es.search(
            index=s.settings.elasticsearch.index_alias,
            query={"term": {"doc_id": doc_id}},
            size=50,
        )["hits"]["hits"]
    finally:
        es.close()
    return [h["_source"]["text"] for h in hits]


def test_a_json_body_with_a_lone_surrogate_is_refused_with_its_position(stack: Stack) -> None:
    """Inline text is the caller's own string: one that is no Unicode text is refused (422,
    with where), never indexed with a character silently replaced."""
    body = b'{"doc_id": "cut-emoji", "content_type": "text/plain", "text": "Part 100 \\ud83d x"}'
    r = httpx.post(
        f"{stack.apis[0].url}/v1/documents",
        content=body,
        headers={**_auth(stack), "Content-Type": "application/json"},
        timeout=30,
    )
    assert r.status_code == 422, r.text
    assert "column" in r.json()["error"]["message"], r.text
    assert get_json(f"{stack.apis[0].url}/v1/documents/cut-emoji", stack.keys[TENANT])[0] == 404


def test_a_records_file_says_which_record_was_repaired(stack: Stack) -> None:
    records = (
        b'{"id": "a", "text": "Part 200 \\udc00 is a washer."}\n'
        b'{"id": "b", "text": "Part 300 is a spring."}\n'
    )
    r = httpx.post(
        f"{stack.apis[0].url}/v1/documents",
        files={"file": ("parts.jsonl", records, "application/jsonl")},
        data={"doc_id": "parts"},
        headers=_auth(stack),
        timeout=30,
    )
    assert r.status_code == 202, r.text
    repaired = _indexed(stack, "parts#a")
    clean = _indexed(stack, "parts#b")
    assert any("surrogate" in w for w in repaired["warnings"]), repaired
    assert clean["warnings"] == [], clean
    texts = _chunk_texts(stack, "parts#a")
    assert texts and all("\ufffd" in t and "washer" in t for t in texts), texts
