"""The Elasticsearch bulk writer retries a transient item failure in one layer only.

A tiny local HTTP server stands in for Elasticsearch's ``_bulk`` endpoint and counts how often
each document reaches it: ``streaming_bulk`` retries 429 items on its own unless told not to,
so two layers would send a 429 item up to ``(n+1)**2`` times instead of ``n+1``.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from elasticsearch import Elasticsearch

from ingest.index import ChunkIndex
from ragstream.settings import ElasticsearchSettings

#: ``status(doc_id, attempt)`` (attempt counts from 1) -> the item's HTTP status.
StatusOf = Callable[[str, int], int]


class _FakeBulk:
    """Answers ``_bulk`` item by item with the status ``status_of`` gives."""

    def __init__(self, status_of: StatusOf) -> None:
        self.status_of = status_of
        self.sent: Counter[str] = Counter()
        self.requests = 0
        self.lock = threading.Lock()

    def answer(self, body: bytes) -> dict[str, Any]:
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        items = []
        with self.lock:
            self.requests += 1
            for action in lines[::2]:  # action line, then the source line (index ops)
                op, meta = next(iter(action.items()))
                self.sent[meta["_id"]] += 1
                status = self.status_of(meta["_id"], self.sent[meta["_id"]])
                item: dict[str, Any] = {"_id": meta["_id"], "status": status}
                if status >= 300:
                    item["error"] = {"type": "es_rejected_execution_exception", "reason": "busy"}
                items.append({op: item})
        errors = any(i[next(iter(i))]["status"] >= 300 for i in items)
        return {"took": 1, "errors": errors, "items": items}


@pytest.fixture
def fake_es() -> Iterator[Callable[[StatusOf], tuple[_FakeBulk, str]]]:
    servers: list[ThreadingHTTPServer] = []

    def start(status_of: StatusOf) -> tuple[_FakeBulk, str]:
        fake = _FakeBulk(status_of)

        class Handler(BaseHTTPRequestHandler):
            def do_PUT(self) -> None:  # the 8.x client sends _bulk as PUT
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                out = json.dumps(fake.answer(body)).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("x-elastic-product", "Elasticsearch")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return fake, f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def _index(url: str, max_retries: int) -> ChunkIndex:
    settings = ElasticsearchSettings(
        url=url, index_alias="chunks", bulk_max_retries=max_retries, bulk_initial_backoff_s=0.001
    )
    return ChunkIndex(Elasticsearch(url), settings, dims=3)


def _docs(n: int) -> list[dict[str, Any]]:
    return [{"chunk_id": f"c{i}", "text": f"chunk {i}"} for i in range(n)]


@pytest.mark.parametrize("max_retries", [0, 2, 5])
def test_a_429_item_is_sent_max_retries_plus_one_times(
    fake_es: Callable[[StatusOf], tuple[_FakeBulk, str]], max_retries: int
) -> None:
    fake, url = fake_es(lambda _id, _attempt: 429)
    report = _index(url, max_retries).bulk_index(_docs(2))
    assert fake.sent == {"c0": max_retries + 1, "c1": max_retries + 1}
    assert fake.requests == max_retries + 1
    assert report.failed == {
        "c0": "transient failure persisted after retries",
        "c1": "transient failure persisted after retries",
    }
    assert report.succeeded == []


def test_a_transient_item_is_resent_alone_until_it_succeeds(
    fake_es: Callable[[StatusOf], tuple[_FakeBulk, str]],
) -> None:
    fake, url = fake_es(lambda _id, attempt: 503 if _id == "c1" and attempt < 3 else 201)
    report = _index(url, max_retries=5).bulk_index(_docs(3))
    assert fake.sent == {"c0": 1, "c1": 3, "c2": 1}
    assert sorted(report.succeeded) == ["c0", "c1", "c2"]
    assert report.failed == {}


def test_a_permanent_item_failure_is_not_retried(
    fake_es: Callable[[StatusOf], tuple[_FakeBulk, str]],
) -> None:
    fake, url = fake_es(lambda _id, _attempt: 400 if _id == "c0" else 201)
    report = _index(url, max_retries=5).bulk_index(_docs(2))
    assert fake.sent == {"c0": 1, "c1": 1}
    assert set(report.failed) == {"c0"}
    assert report.succeeded == ["c1"]


def test_retries_are_jittered_counted_and_logged(
    fake_es: Callable[[StatusOf], tuple[_FakeBulk, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 39: 23,978 bulk rejections were retried with no jitter, no metric and no log."""
    import structlog
    import structlog.testing

    import ingest.index as index_module

    # structlog as capture_logs needs it, whatever an earlier test configured (an in-process
    # CLI run caches the loggers it used), as in test_surrogate_warnings.py.
    saved = structlog.get_config()
    structlog.reset_defaults()
    monkeypatch.setattr(index_module, "log", structlog.get_logger(index_module.__name__))
    slept: list[float] = []
    monkeypatch.setattr(index_module.time, "sleep", slept.append)
    before = index_module.BULK_ITEMS_RETRIED.labels("429")._value.get()
    gave_up = index_module.BULK_ITEMS_GAVE_UP._value.get()
    fake, url = fake_es(lambda _id, _attempt: 429)
    index = _index(url, max_retries=6)
    try:
        with structlog.testing.capture_logs() as logs:
            index.bulk_index(_docs(2))
    finally:
        structlog.configure(**saved)
    assert fake.requests == 7
    assert index_module.BULK_ITEMS_RETRIED.labels("429")._value.get() - before == 14
    assert index_module.BULK_ITEMS_GAVE_UP._value.get() - gave_up == 2
    retried = [e for e in logs if e["event"] == "es.bulk_items_retried"]
    assert len(retried) == 6 and retried[0]["statuses"] == {"429": 2}
    assert [e["items"] for e in logs if e["event"] == "es.bulk_retries_exhausted"] == [2]
    # Full jitter: each wait is uniform under its doubling ceiling, not the ceiling itself.
    ceilings = [0.001 * 2**n for n in range(6)]
    assert len(slept) == 6 and all(0 <= d <= c for d, c in zip(slept, ceilings, strict=True))
    assert slept != ceilings
