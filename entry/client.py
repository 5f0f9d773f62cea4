"""Python clients of ragstream: over HTTP (:class:`HttpClient`) or straight on Kafka
(:class:`KafkaClient`). Both return typed :class:`~api.models.QueryResult` objects.

HTTP::

    with HttpClient("http://127.0.0.1:8000", api_key) as c:
        print(c.query("How do I create a virtual environment?").answer)
        for ev in c.stream("What does VACUUM do?"):
            print(ev.kind, ev.data)

Kafka (a service inside the trust boundary, producing query events for any tenant)::

    with KafkaClient() as c:
        result = c.query("What does VACUUM do?", tenant="default", on_token=print)
"""

from __future__ import annotations

import datetime as dt
import json
import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

import httpx

from api.models import QueryResult
from api.replies import Reply, ReplyRouter, Waiter
from ragstream.errors import RagstreamError
from ragstream.settings import Settings, get_settings
from topics.producer import make_producer
from topics.queries import QueryRequest
from topics.registry import QUERIES, TopicRegistry
from topics.serde import encode
from topics.tokens import AnswerToken

Route = Literal["auto", "evidence", "small", "large"]


class ApiRequestError(RagstreamError):
    """A non-2xx answer of the API: ``status``, typed ``code`` and ``message``."""

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One Server-Sent Event of a streamed query: ``kind`` is ``accepted``, ``queued``,
    ``evidence``, ``token``, ``answer``, ``error`` or ``timeout``; ``data`` its JSON
    (keep-alive comments are skipped)."""

    kind: str
    data: dict[str, Any]

    @property
    def result(self) -> QueryResult | None:
        """The result of an ``answer`` or ``error`` event."""
        if self.kind in ("answer", "error"):
            return QueryResult.model_validate(self.data)
        return None


class HttpClient:
    """Client of the HTTP API.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000``.
        api_key: a key from ``ragstream keys create`` (it fixes the tenant).
        timeout_s: HTTP read timeout, s (a sync query waits server-side up to its own timeout).

    Raises:
        ApiRequestError: from every method, on a non-2xx answer.
    """

    def __init__(self, base_url: str, api_key: str, *, timeout_s: float = 330.0) -> None:
        self._http = httpx.Client(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _body(self, query: str, **params: Any) -> dict[str, Any]:
        return {"query": query, **{k: v for k, v in params.items() if v is not None}}

    def _result(self, response: httpx.Response) -> QueryResult:
        data = _json_or_raise(response)
        return QueryResult.model_validate(data)

    def query(
        self,
        query: str,
        *,
        top_n: int | None = None,
        top_k: int | None = None,
        route: Route = "auto",
        timeout_s: float | None = None,
        callback_url: str | None = None,
    ) -> QueryResult:
        """Ask and wait (server-side up to ``timeout_s``); ``status`` may still be
        ``pending`` after the wait (then :meth:`wait`)."""
        body = self._body(
            query, top_n=top_n, top_k=top_k, route=route, timeout_s=timeout_s,
            callback_url=callback_url,
        )  # fmt: skip
        return self._result(self._http.post("/v1/query", json=body))

    def submit(
        self, query: str, *, route: Route = "auto", callback_url: str | None = None
    ) -> QueryResult:
        """Ask without waiting (``mode="async"``): a ``pending`` result with ``request_id``."""
        body = self._body(query, route=route, mode="async", callback_url=callback_url)
        return self._result(self._http.post("/v1/query", json=body))

    def get(self, request_id: str) -> QueryResult:
        """The current state of a query."""
        return self._result(self._http.get(f"/v1/queries/{request_id}"))

    def wait(self, request_id: str, timeout_s: float = 120.0, poll_s: float = 0.5) -> QueryResult:
        """Poll until the query is no longer pending or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = self.get(request_id)
            if result.status != "pending" or time.monotonic() >= deadline:
                return result
            time.sleep(poll_s)

    def stream(
        self,
        query: str,
        *,
        route: Route = "auto",
        top_k: int | None = None,
        timeout_s: float | None = None,
    ) -> Iterator[StreamEvent]:
        """Ask with ``stream=true`` and yield the Server-Sent Events as they arrive
        (``timeout_s``: how long the server waits for the answer)."""
        body = self._body(query, route=route, stream=True, top_k=top_k, timeout_s=timeout_s)
        with self._http.stream("POST", "/v1/query", json=body) as response:
            if response.status_code >= 300:
                response.read()
                _json_or_raise(response)
            yield from parse_sse(response.iter_lines())


def parse_sse(lines: Iterator[str]) -> Iterator[StreamEvent]:
    """Server-Sent Events (``event:``/``data:`` lines, blank-line separated) from ``lines``."""
    kind, data = "message", list[str]()
    for line in lines:
        if not line:
            if data:
                yield StreamEvent(kind, json.loads("\n".join(data)))
            kind, data = "message", []
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())
    if data:
        yield StreamEvent(kind, json.loads("\n".join(data)))


def _json_or_raise(response: httpx.Response) -> Any:
    try:
        data = response.json()
    except ValueError:
        data = None
    if response.status_code >= 300 and response.status_code != 202:
        error = (data or {}).get("error", {}) if isinstance(data, dict) else {}
        raise ApiRequestError(
            response.status_code,
            str(error.get("code", "ERROR")),
            str(error.get("message", response.text[:500])),
            data,
        )
    return data


class KafkaClient:
    """Produce query events and await the matching response on Kafka (no HTTP, no API key:
    for services inside the trust boundary, which name the tenant themselves).

    Args:
        settings: Kafka settings and topic prefix; default :func:`get_settings`.

    Raises:
        kafka.errors.KafkaError: on start, when the broker cannot be reached.
    """

    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or get_settings()
        self._registry = TopicRegistry(self.settings.kafka.topic_prefix)
        self._producer = make_producer(self.settings.kafka)
        self._replies = ReplyRouter(self.settings)
        self._replies.start()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the reply consumer and close the producer."""
        self._replies.close()
        self._producer.close(timeout=5)

    def query(
        self,
        query: str,
        *,
        tenant: str = "default",
        top_n: int | None = None,
        top_k: int | None = None,
        route: Route = "auto",
        timeout_s: float = 120.0,
        on_token: Callable[[str], None] | None = None,
        callback_url: str | None = None,
    ) -> QueryResult:
        """Produce one query and wait for its response (``pending`` after ``timeout_s``).

        ``on_token`` receives streamed answer text as it is generated (``stream=True``).
        """
        started = time.monotonic()
        request = QueryRequest(
            tenant=tenant,
            query=query,
            deadline=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=timeout_s),
            top_n=top_n or self.settings.retrieval.top_n,
            top_k=top_k or self.settings.rerank.top_k,
            route=route,
            stream=on_token is not None,
            callback_url=callback_url,
        )
        inbox: queue.Queue[Reply] = queue.Queue()
        self._replies.register(Waiter(request.request_id, inbox.put, tokens=on_token is not None))
        try:
            self._producer.send(
                self._registry.name(QUERIES), key=request.key(), value=encode(request)
            ).get(timeout=30)
            until = started + timeout_s
            next_seq = 0
            while (left := until - time.monotonic()) > 0:
                try:
                    reply = inbox.get(timeout=left)
                except queue.Empty:
                    break
                if isinstance(reply, AnswerToken):
                    if reply.seq >= next_seq and on_token is not None and reply.text:
                        on_token(reply.text)
                    next_seq = max(next_seq, reply.seq + 1)  # replays re-send: once each
                    continue
                ms = (time.monotonic() - started) * 1000
                return QueryResult.from_response(reply, latency_ms=ms)
        finally:
            self._replies.unregister(request.request_id)
        return QueryResult(
            request_id=request.request_id,
            status="pending",
            latency_ms=(time.monotonic() - started) * 1000,
        )


__all__ = [
    "ApiRequestError",
    "HttpClient",
    "KafkaClient",
    "QueryResult",
    "StreamEvent",
    "parse_sse",
]
