"""Resumable streams, the logic without services: event ids and their order, the filter that
sends only the events past a client's position, ids on both kinds of stream, the requests a
resume refuses before it reads anything, the reply router's several waiters per request."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kafka.partitioner.default import DefaultPartitioner

from api.asking import numbered
from api.replies import ReplyRouter, Waiter
from api.streams.history import partition_of
from api.streams.ids import (
    ACCEPTED,
    DONE,
    FINAL,
    QUEUED,
    REPLACE,
    Position,
    event_id,
    parse_event_id,
)
from api.streams.native import Positioned
from api.streams.resume import expired
from entry.client import parse_sse
from ragstream.settings import Settings
from tests.unit.apikit import answered, make_app
from topics.serde import encode
from topics.tokens import AnswerToken

BODY = {"query": "What does VACUUM do?", "stream": True}
CHAT = {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "VACUUM?"}]}


def test_positions_are_ordered_as_the_stream_sends_them() -> None:
    order = [ACCEPTED, QUEUED, Position.token(0), Position.token(1), Position.token(10)]
    order += [REPLACE, FINAL, DONE]
    assert sorted(reversed(order)) == order
    for position in order:
        assert parse_event_id(event_id("abc:def", position)) == ("abc:def", position)
    assert event_id("r1", Position.token(7)) == "r1:7" and event_id("r1", FINAL) == "r1:f"


@pytest.mark.parametrize("bad", ["", "r1", ":3", "r1:x", "r1:-1", "r1:", "r" * 200 + ":1"])
def test_ids_this_api_did_not_write_are_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_event_id(bad)


def _events(*positions: Position | None) -> AsyncIterator[Positioned]:
    async def gen() -> AsyncIterator[Positioned]:
        for i, p in enumerate(positions):
            yield p, f"event: e{i}\n\n".encode()

    return gen()


def _run(after: Position | None, *positions: Position | None) -> list[str]:
    async def go() -> list[str]:
        return [chunk.decode() async for chunk in numbered("r1", _events(*positions), after)]

    return asyncio.run(go())


def test_only_the_events_past_the_position_are_sent_each_with_its_id() -> None:
    stream = (ACCEPTED, QUEUED, Position.token(0), Position.token(1), FINAL)
    assert _run(None, *stream) == [
        "id: r1:a\nevent: e0\n\n", "id: r1:q\nevent: e1\n\n", "id: r1:0\nevent: e2\n\n",
        "id: r1:1\nevent: e3\n\n", "id: r1:f\nevent: e4\n\n",
    ]  # fmt: skip
    assert _run(Position.token(0), *stream) == [
        "id: r1:1\nevent: e3\n\n",
        "id: r1:f\nevent: e4\n\n",
    ]
    assert _run(FINAL, *stream) == []


def test_a_timeout_repeats_the_last_id_so_a_resume_from_it_loses_nothing() -> None:
    assert _run(None, ACCEPTED, Position.token(3), None) == [
        "id: r1:a\nevent: e0\n\n", "id: r1:3\nevent: e1\n\n", "id: r1:3\nevent: e2\n\n",
    ]  # fmt: skip
    assert _run(Position.token(5), ACCEPTED, None) == ["id: r1:5\nevent: e1\n\n"]


def test_every_event_of_a_query_stream_carries_its_id(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path, answered)
    with TestClient(app) as client, client.stream("POST", "/v1/query", json=BODY) as r:
        events = list(parse_sse(r.iter_lines()))
    rid = fake.asked[0].request_id
    assert [(e.kind, e.id) for e in events] == [
        ("accepted", f"{rid}:a"), ("queued", f"{rid}:q"), ("evidence", f"{rid}:0"),
        ("token", f"{rid}:1"), ("token", f"{rid}:2"), ("answer", f"{rid}:f"),
    ]  # fmt: skip
    assert fake.attached == [rid] and fake.detached == [rid] and fake.cancelled == []


def test_every_chunk_of_an_openai_stream_carries_its_id(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path, answered)
    with TestClient(app) as client, client.stream("POST", "/v1/chat/completions", json=CHAT) as r:
        lines = [line for line in r.iter_lines() if line and not line.startswith(":")]
    rid = fake.asked[0].request_id
    ids = [line[4:] for line in lines if line.startswith("id: ")]
    assert ids == [f"{rid}:{p}" for p in ("a", "1", "2", "f", "d")], lines
    assert lines[-1] == "data: [DONE]"


@pytest.mark.parametrize(("path", "body"), [("/v1/query", BODY), ("/v1/chat/completions", CHAT)])
def test_a_resume_from_the_last_event_is_204_and_asks_nothing(
    tmp_path: Path, path: str, body: dict[str, Any]
) -> None:
    app, fake = make_app(tmp_path, answered)
    last = "r1:f" if path == "/v1/query" else "r1:d"
    with TestClient(app) as client:
        r = client.post(path, json=body, headers={"Last-Event-ID": last})
    assert r.status_code == 204 and fake.asked == []


def test_a_resume_with_an_id_of_another_api_or_query_is_422(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path, answered)
    with TestClient(app) as client:
        bad = client.post("/v1/query", json=BODY, headers={"Last-Event-ID": "nonsense"})
        other = client.get("/v1/queries/r1/events", headers={"Last-Event-ID": "r2:3"})
    assert bad.status_code == 422 and "last-event-id" in bad.json()["error"]["message"].lower()
    assert other.status_code == 422 and "'r2'" in other.json()["error"]["message"]
    assert fake.asked == []


def test_a_stream_is_expired_once_older_than_the_token_retention() -> None:
    now = dt.datetime(2026, 12, 2, 12, tzinfo=dt.UTC)
    hour_ms = 3_600_000
    assert not expired(now - dt.timedelta(minutes=59), now, hour_ms)
    assert expired(now - dt.timedelta(minutes=61), now, hour_ms)
    assert expired(None, now, hour_ms)


def test_the_partition_of_a_request_is_the_producers() -> None:
    partitions = list(range(6))
    for rid in ("a", "0f3c9e1d2b", "request-42", "x" * 128):
        key = rid.encode()
        assert partition_of(key, 6) == DefaultPartitioner()(key, partitions, partitions)


def test_the_reply_router_feeds_every_waiter_of_a_request() -> None:
    router = ReplyRouter(Settings())
    got: dict[str, list[Any]] = {"first": [], "resumed": []}
    first = Waiter("r1", got["first"].append, tokens=True)
    resumed = Waiter("r1", got["resumed"].append, tokens=True)
    router.register(first)
    router.register(resumed)
    assert router.waiting == 2
    token = AnswerToken(tenant="acme", request_id="r1", seq=0, text="VACUUM")
    record = SimpleNamespace(key=b"r1", value=encode(token), headers=[])
    topic = router._tokens
    router._route(topic, record)
    router.unregister("r1", first)  # the first stream ends; the resumed one goes on
    router._route(topic, record)
    assert len(got["first"]) == 1 and len(got["resumed"]) == 2
    router.unregister("r1", resumed)
    assert router.waiting == 0
