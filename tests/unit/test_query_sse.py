"""``POST /v1/query`` with ``stream: true``: event order, keep-alive comments, disconnect."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from openai._streaming import SSEDecoder

from entry.client import parse_sse
from tests.unit.apikit import CHECKED, answered, checked, make_app
from topics.queries import QueryRequest

BODY = {"query": "What does VACUUM do?", "stream": True}


def test_accepted_queued_evidence_tokens_answer_with_keepalives_between(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path, answered, delay_s=0.25, sse_keepalive_s=0.1)
    with TestClient(app) as client, client.stream("POST", "/v1/query", json=BODY) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = list(r.iter_lines())
    events = list(parse_sse(iter(lines)))
    kinds = [e.kind for e in events]
    assert kinds == ["accepted", "queued", "evidence", "token", "token", "answer"], kinds
    assert events[1].data == {
        "request_id": fake.asked[0].request_id, "backlog": 3, "pool": "generation-small",
    }  # fmt: skip
    assert events[2].data["evidence"][0]["doc_id"] == "vacuum"
    assert events[-1].data["answer"] == "VACUUM reclaims storage [1]."
    pings = [line for line in lines if line.startswith(":")]
    assert len(pings) >= 3, lines  # nothing else was sent for 0.25 s between events
    # The openai SDK's decoder keeps the last id, so a ping ending in a blank line would be
    # decoded as one more event with empty data (and fail as JSON): one decoded event per event.
    decoder = SSEDecoder()
    decoded = [e for e in (decoder.decode(line) for line in lines) if e is not None]
    assert [e.event for e in decoded] == kinds and all(e.data for e in decoded), decoded
    assert fake.unsubscribed == [fake.asked[0].request_id]
    assert fake.cancelled == []  # an answered stream cancels nothing


def test_a_client_disconnect_unsubscribes_at_once(tmp_path: Path) -> None:
    def never(_: QueryRequest) -> list[Any]:
        return []

    app, fake = make_app(tmp_path, never, sse_keepalive_s=0.05, wait_timeout_s=60.0)
    sent: list[dict[str, Any]] = []

    async def go() -> float:
        disconnected = asyncio.Event()
        body = json.dumps(BODY).encode()
        messages = [{"type": "http.request", "body": body, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)
            if b"event: queued" in message.get("body", b""):
                disconnected.set()

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": "/v1/query", "raw_path": b"/v1/query",
            "query_string": b"", "root_path": "", "server": ("api", 80), "client": ("t", 1),
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
        }  # fmt: skip
        started = time.monotonic()
        await asyncio.wait_for(app(scope, receive, send), timeout=10)
        return time.monotonic() - started

    elapsed = asyncio.run(go())
    assert elapsed < 5, "the stream kept waiting after the client left"
    assert fake.unsubscribed == [fake.asked[0].request_id]


@pytest.mark.parametrize(("generated", "finish", "recorded", "truncated"), CHECKED)
def test_a_replace_event_precedes_the_answer_when_the_check_changed_it(
    tmp_path: Path, generated: str, finish: str, recorded: str, truncated: bool
) -> None:
    app, _ = make_app(tmp_path, checked(generated, finish))
    with TestClient(app) as client, client.stream("POST", "/v1/query", json=BODY) as r:
        events = list(parse_sse(r.iter_lines()))
    kinds = [e.kind for e in events]
    assert kinds[-2:] == ["replace", "answer"], kinds
    assert kinds.count("replace") == 1
    assert events[-2].data == {"text": recorded, "truncated": truncated}
    assert events[-1].data["answer"] == recorded and events[-1].data["truncated"] is truncated
    shown = ""  # what a client that renders the stream shows
    for e in events:
        if e.kind == "token":
            shown += e.data["text"]
        elif e.kind == "replace":
            shown = e.data["text"]
    assert shown == recorded
