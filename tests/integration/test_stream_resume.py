"""Resumable streams end to end: real pool processes, Kafka, Elasticsearch, Redis, SQL and the
real small LLM (llama.cpp), its completion chunks paced (:mod:`tests.integration.pacer`) so an
answer streams for several seconds. Two API processes' worth of state (each its own reply
router, Kafka clients and memory): a stream dropped on one is resumed on the other.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from entry.client import SseParser, StreamEvent
from ragstream.db.engine import make_engine, make_session_factory
from ragstream.db.models import QueryLog
from ragstream.settings import Settings
from tests.integration.pacer import Pacer
from tests.integration.stack import (
    QUERY_POOLS,
    Stack,
    get_json,
    index_document,
    make_stack,
    wait_for,
)

DOC = (
    "# VACUUM\n\nVACUUM reclaims storage occupied by dead tuples. In normal operation, tuples "
    "that are deleted or obsoleted by an update are not physically removed from their table; "
    "they remain present until a VACUUM is done. The autovacuum launcher starts autovacuum "
    "workers every autovacuum_naptime, which defaults to one minute. VACUUM FULL rewrites the "
    "whole table into a new disk file and returns the unused space to the operating system."
)
GRACE_S = 3.0
POOLS = tuple(p for p in QUERY_POOLS if p != "generation-large")


@pytest.fixture(scope="module")
def pacer() -> Iterator[Pacer]:
    p = Pacer(Settings().llm.base_url, delay_s=0.1).start()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, pacer: Pacer) -> Iterator[Stack]:
    s = make_stack(
        tmp_path_factory.mktemp("resume"),
        "resume",
        RAGSTREAM_EVIDENCE__TIER_MODE="llm",
        RAGSTREAM_GENERATION__SMALL__BASE_URL=pacer.url,
        RAGSTREAM_API__RESUME_GRACE_S=str(GRACE_S),
        RAGSTREAM_API__WAIT_TIMEOUT_S="240",  # a loaded machine must not end a stream early
        RAGSTREAM_API__RATE_PER_MINUTE="0",  # per key id in the shared Redis: ids repeat
    )
    s.start_pools(POOLS)
    try:
        s.wait_ready()
        s.api()
        s.api()  # a second process's worth of state
        s.keys["acme"] = s.key(s.name + "-acme")
        s.keys["globex"] = s.key(s.name + "-globex")
        url, key = s.apis[0].url, s.keys["acme"]
        index_document(url, key, "vacuum", DOC)
        yield s
    finally:
        s.close()


def read(
    base: str,
    key: str,
    method: str,
    path: str,
    *,
    body: dict[str, Any] | None = None,
    last_event_id: str | None = None,
    until: Callable[[list[StreamEvent]], bool] = lambda _: False,
) -> list[StreamEvent]:
    """The SSE events of one connection, closed as soon as ``until(events)`` holds (the
    client drops the connection) or at the end of the stream."""
    headers = {"Authorization": f"Bearer {key}"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    events: list[StreamEvent] = []
    parser = SseParser()
    with (
        httpx.Client(base_url=base, timeout=120) as client,
        client.stream(method, path, json=body, headers=headers) as r,
    ):
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            event = parser.feed(line)
            if event is None:
                continue
            events.append(event)
            if until(events):
                break
    return events


def tokens(n: int) -> Callable[[list[StreamEvent]], bool]:
    return lambda events: sum(e.kind == "token" for e in events) >= n


def comparable(events: list[StreamEvent]) -> list[tuple[str, str, Any]]:
    """``(id, kind, data)`` less what may differ between two readers of one request: the
    backlog a ``queued`` event saw and the latency an ``answer`` measured."""
    out = []
    for e in events:
        data = dict(e.data)
        if e.kind == "queued":
            data = {"request_id": data["request_id"]}
        if e.kind in ("answer", "error"):
            data.pop("latency_ms", None)
        out.append((e.id, e.kind, data))
    return out


def shown_text(events: list[StreamEvent]) -> str:
    """What a client that renders the stream shows at its end."""
    shown = ""
    for e in events:
        if e.kind == "token":
            shown += e.data["text"]
        elif e.kind == "replace":
            shown = e.data["text"]
    return shown


def status_of(stack: Stack, rid: str) -> str:
    return str(get_json(f"{stack.apis[0].url}/v1/queries/{rid}", stack.keys["acme"])[1]["status"])


def test_a_stream_dropped_mid_answer_resumes_on_another_process_exactly_once(
    stack: Stack,
) -> None:
    api0, api1 = stack.apis
    key = stack.keys["acme"]
    body = {
        "query": "Explain in detail what VACUUM and autovacuum do, and when to use VACUUM FULL.",
        "stream": True,
        "route": "small",
    }
    # Tokens come a whole sentence at a time (never past what the judge keeps): drop after one.
    first = read(api0.url, key, "POST", "/v1/query", body=body, until=tokens(1))
    rid = first[0].data["request_id"]
    assert [e.kind for e in first[:3]] == ["accepted", "queued", "evidence"], first
    # An uninterrupted reader of the same request, from its first event, on the other process.
    whole: list[StreamEvent] = []
    reader = threading.Thread(
        target=lambda: whole.extend(read(api1.url, key, "GET", f"/v1/queries/{rid}/events"))
    )
    reader.start()
    time.sleep(0.1)  # away a moment: the answer goes on streaming without this client
    assert status_of(stack, rid) == "pending", "the answer finished before the client returned"
    rest = read(api1.url, key, "POST", "/v1/query", body=body, last_event_id=first[-1].id)
    reader.join(timeout=120)

    resumed = first + rest
    assert resumed[-1].kind == "answer", resumed[-1]  # no timeout: an answer
    ids = [e.id for e in resumed]
    assert len(set(ids)) == len(ids), ids  # every event exactly once
    assert comparable(resumed) == comparable(whole)
    wait_for(lambda: status_of(stack, rid) != "pending", timeout_s=60, what="the answer logged")
    logged = get_json(f"{api0.url}/v1/queries/{rid}", key)[1]
    assert logged["status"] == "answered" and logged["tier"] == "small", logged  # not cancelled
    assert shown_text(resumed) == logged["answer"] == resumed[-1].data["answer"]
    # Tokens come a whole sentence at a time: the drop may have come after the last of them.
    streaming = shown_text(first) != logged["answer"]
    print(f"dropped after {len(shown_text(first))} of {len(logged['answer'])} characters")
    if streaming:  # more of the answer came after the drop
        assert sum(e.kind == "token" for e in rest) >= 1, "nothing came after the resume"

    # The same resume once the answer has finished: the rest from the log alone.
    started = time.perf_counter()
    again = read(api0.url, key, "GET", f"/v1/queries/{rid}/events", last_event_id=first[-1].id)
    took_ms = (time.perf_counter() - started) * 1000
    assert comparable(again) == comparable(rest)
    print(f"resume after completion: {len(again)} events from the log in {took_ms:.0f} ms")
    # Resuming after the last event: nothing is left.
    done = httpx.get(
        f"{api0.url}/v1/queries/{rid}/events",
        headers={"Authorization": f"Bearer {key}", "Last-Event-ID": resumed[-1].id},
        timeout=30,
    )
    assert done.status_code == 204
    metrics = httpx.get(f"{api0.url}/metrics", timeout=30).text
    assert 'ragstream_api_stream_resumes_total{outcome="resumed"}' in metrics
    if streaming:  # the detached stream was still answering when the client came back
        assert 'ragstream_api_stream_detached_total{outcome="resumed"}' in metrics


def _openai_read(
    base: str, key: str, body: dict[str, Any], last_event_id: str | None, deltas: int | None
) -> list[tuple[str, str]]:
    """``(id, data)`` of an OpenAI stream's chunks, dropped after ``deltas`` content deltas."""
    headers = {"Authorization": f"Bearer {key}"}
    if last_event_id:
        headers["Last-Event-ID"] = last_event_id
    out: list[tuple[str, str]] = []
    current = ""
    seen = 0
    with (
        httpx.Client(base_url=base, timeout=120) as client,
        client.stream("POST", "/v1/chat/completions", json=body, headers=headers) as r,
    ):
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if line.startswith("id: "):
                current = line[4:]
            elif line.startswith("data: "):
                out.append((current, line[6:]))
                seen += '"content":"' in line and '"content":""' not in line
                if deltas is not None and seen >= deltas:
                    break
    return out


def test_an_openai_stream_dropped_mid_answer_resumes_with_last_event_id(stack: Stack) -> None:
    api0, api1 = stack.apis
    key = stack.keys["acme"]
    body = {
        "model": "small",
        "stream": True,
        "messages": [
            {
                "role": "user",
                "content": "What does VACUUM reclaim, and when are dead tuples removed?",
            }
        ],
    }
    first = _openai_read(api0.url, key, body, None, deltas=1)  # a whole sentence at a time
    assert first[-1][1] != "[DONE]", first
    time.sleep(0.5)
    rest = _openai_read(api1.url, key, body, first[-1][0], deltas=None)
    chunks = first + rest
    ids = [i for i, _ in chunks]
    assert len(set(ids)) == len(ids) and chunks[-1][1] == "[DONE]", ids
    parsed = [json.loads(d) for _, d in chunks[:-1]]
    assert all("error" not in c for c in parsed), parsed[-1]
    text = "".join(c["choices"][0].get("delta", {}).get("content") or "" for c in parsed)
    final = parsed[-1]
    rid = ids[0].rsplit(":", 1)[0]
    wait_for(lambda: status_of(stack, rid) != "pending", timeout_s=60, what="the answer logged")
    logged = get_json(f"{api0.url}/v1/queries/{rid}", key)[1]
    assert logged["status"] == "answered", logged
    assert final["answer"] == logged["answer"]
    assert final["replaced"] or text == final["answer"], (text, final)


def test_a_stream_left_and_not_resumed_within_the_grace_is_cancelled(
    stack: Stack, pacer: Pacer
) -> None:
    key = stack.keys["acme"]
    pacer.delay_s = 0.5  # the answer would take longer than the grace
    try:
        body = {"query": "What is VACUUM FULL and what does it return?", "stream": True}
        first = read(
            stack.apis[0].url,
            key,
            "POST",
            "/v1/query",
            body=body | {"route": "small"},
            until=lambda events: events[-1].kind == "evidence",
        )
        rid = first[0].data["request_id"]
        left = time.monotonic()
        wait_for(lambda: status_of(stack, rid) != "pending", timeout_s=90, what="the query ended")
        logged = get_json(f"{stack.apis[0].url}/v1/queries/{rid}", key)[1]
        assert logged["error"]["code"] == "CANCELLED", logged
        assert time.monotonic() - left >= GRACE_S  # not before the grace ran out
    finally:
        pacer.delay_s = 0.1


def test_expired_unknown_and_foreign_streams_are_refused_clearly(stack: Stack) -> None:
    url = stack.apis[0].url
    acme, globex = stack.keys["acme"], stack.keys["globex"]
    sessions = make_session_factory(make_engine(stack.settings.database_url))
    old = f"old-{time.time_ns()}"
    with sessions.begin() as session:
        session.add(
            QueryLog(
                request_id=old,
                tenant=stack.name + "-acme",
                query="What does VACUUM do?",
                created_at=dt.datetime.now(dt.UTC) - dt.timedelta(hours=2),
            )
        )

    def get(rid: str, key: str, last: str) -> httpx.Response:
        headers = {"Authorization": f"Bearer {key}", "Last-Event-ID": last}
        return httpx.get(f"{url}/v1/queries/{rid}/events", headers=headers, timeout=30)

    expired = get(old, acme, f"{old}:3")
    assert expired.status_code == 410, expired.text
    error = expired.json()["error"]
    assert error["code"] == "STREAM_EXPIRED" and "retention" in error["message"], error
    assert f"/v1/queries/{old}" in error["message"]  # where the answer still is
    assert get(old, globex, f"{old}:3").status_code == 404  # another tenant's query
    unknown = httpx.post(
        f"{url}/v1/query",
        json={"query": "What does VACUUM do?", "stream": True},
        headers={"Authorization": f"Bearer {acme}", "Last-Event-ID": "no-such-query:2"},
        timeout=30,
    )
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "NOT_FOUND"
