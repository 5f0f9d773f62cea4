"""Cancellation of a query whose client left: the generator skips a flagged request and stops
one in flight (its generation task is cancelled, which closes the LLM stream), answering
``CANCELLED`` with the evidence; the SSE routes flag the request when the client disconnects."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from ragstream.retry import RetryPolicy
from tests.unit.apikit import make_app
from tests.unit.test_generator_outcomes import Words, _event
from topics.queries import QueryRequest
from topics.responses import QueryResponse
from workers.generation.backend import (
    CancelFor,
    GenerationRequest,
    GenerationResult,
    OnToken,
    OnTokenFor,
    generate_concurrently,
)
from workers.generation.generator import Generator
from workers.generation.prompt import PromptBuilder
from workers.runtime.handler import Emit


class SlowBackend:
    """Streams one token every 10 ms for ``tokens`` tokens; records what was started, what
    finished and what was stopped midway."""

    def __init__(self, tokens: int = 500) -> None:
        self.tokens = tokens
        self.started: list[str] = []
        self.stopped: list[str] = []
        self.finished: list[str] = []

    async def generate(
        self, request: GenerationRequest, on_token: OnToken | None = None
    ) -> GenerationResult:
        self.started.append(request.request_id)
        try:
            for _ in range(self.tokens):
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            self.stopped.append(request.request_id)
            raise
        self.finished.append(request.request_id)
        return GenerationResult(request.request_id, "It is 128MB [1].", 50, 7, "stop", 1.0, 2.0)

    async def generate_many(
        self,
        requests: Sequence[GenerationRequest],
        on_token_for: OnTokenFor | None = None,
        cancel_for: CancelFor | None = None,
    ) -> list[GenerationResult | Exception]:
        return await generate_concurrently(self, requests, on_token_for, cancel_for)

    async def aclose(self) -> None:
        return None


class Flags:
    """Cancellation flags as the generator reads them; ``after_reads`` delays the effect."""

    def __init__(self, ids: set[str], after_reads: int = 0) -> None:
        self.ids, self.after_reads, self.reads = ids, after_reads, 0
        self.lock = threading.Lock()

    def __call__(self, request_ids: Sequence[str]) -> set[str]:
        with self.lock:
            self.reads += 1
            live = self.reads > self.after_reads
        return {r for r in request_ids if r in self.ids} if live else set()


def _generator(backend: SlowBackend, flags: Flags) -> Generator:
    return Generator(
        backend,  # type: ignore[arg-type]
        PromptBuilder(Words(), 472, 64, "chat"),
        tokens=None,
        cache_keys=None,
        tier="small",
        backoff=RetryPolicy(max_attempts=1),
        cancelled=flags,
        cancel_poll_s=0.02,
    )


def _run(generator: Generator, events: list[Any]) -> list[QueryResponse]:
    try:
        out = generator.run(events)
    finally:
        generator.close()
    assert all(isinstance(o, Emit) and isinstance(o.event, QueryResponse) for o in out)
    return [o.event for o in out]  # type: ignore[union-attr,misc]


def test_a_request_cancelled_before_generation_is_never_sent_to_the_llm() -> None:
    gone, kept = _event(), _event()
    backend = SlowBackend(tokens=1)
    responses = _run(_generator(backend, Flags({gone.request.request_id})), [gone, kept])
    assert backend.started == [kept.request.request_id]
    assert responses[0].error is not None and responses[0].error.code == "CANCELLED"
    assert responses[0].evidence and [c.chunk_id for c in responses[0].citations] == ["c1"]
    assert responses[1].status == "answered"


def test_a_request_cancelled_while_generating_is_stopped_and_its_batch_mate_finishes() -> None:
    gone, kept = _event(), _event()
    backend = SlowBackend(tokens=150)  # 1.5 s each unless stopped
    flags = Flags({gone.request.request_id}, after_reads=2)  # flagged mid-generation
    started = time.monotonic()
    responses = _run(_generator(backend, flags), [gone, kept])
    assert backend.stopped == [gone.request.request_id]
    assert backend.finished == [kept.request.request_id]
    assert responses[0].error is not None and responses[0].error.code == "CANCELLED"
    assert responses[1].status == "answered" and responses[1].answer == "It is 128MB [1]."
    assert flags.reads >= 3 and time.monotonic() - started < 10


def test_without_cancellations_nothing_is_stopped() -> None:
    backend = SlowBackend(tokens=3)
    event = _event()
    responses = _run(_generator(backend, Flags(set())), [event])
    assert responses[0].status == "answered" and not backend.stopped


def _disconnect_after(app: Any, path: str, body: dict[str, Any], marker: bytes) -> None:
    """Drive ``app`` over ASGI and disconnect once a body part holds ``marker``."""

    async def go() -> None:
        disconnected = asyncio.Event()
        raw = json.dumps(body).encode()
        messages = [{"type": "http.request", "body": raw, "more_body": False}]

        async def receive() -> dict[str, Any]:
            if messages:
                return messages.pop()
            await disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if marker in message.get("body", b""):
                disconnected.set()

        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": path, "raw_path": path.encode(),
            "query_string": b"", "root_path": "", "server": ("api", 80), "client": ("t", 1),
            "headers": [(b"content-type", b"application/json"),
                        (b"content-length", str(len(raw)).encode())],
        }  # fmt: skip
        await asyncio.wait_for(app(scope, receive, send), timeout=10)

    asyncio.run(go())


def _never(_: QueryRequest) -> list[Any]:
    return []


@pytest.mark.parametrize(
    ("path", "body", "marker"),
    [
        ("/v1/query", {"query": "What does VACUUM do?", "stream": True}, b"event: queued"),
        (
            "/v1/chat/completions",
            {"model": "auto", "stream": True, "messages": [{"role": "user", "content": "VACUUM?"}]},
            b'"role":"assistant"',
        ),
    ],
)
def test_a_streaming_client_that_disconnects_cancels_its_request(
    tmp_path: Path, path: str, body: dict[str, Any], marker: bytes
) -> None:
    app, fake = make_app(tmp_path, _never, sse_keepalive_s=0.05, wait_timeout_s=60.0)
    _disconnect_after(app, path, body, marker)
    assert fake.cancelled == [fake.asked[0].request_id]
    assert fake.unsubscribed == [fake.asked[0].request_id]
