"""Python clients of ragstream: over HTTP, synchronous (:class:`HttpClient`) or asynchronous
(:class:`AsyncHttpClient`, on ``httpx.AsyncClient``), or straight on Kafka (:class:`KafkaClient`).
Queries return typed :class:`~api.models.QueryResult` objects; the HTTP clients also upsert and
delete documents, submit and follow bulk ingest jobs, register webhooks and search (passages
without an answer, ``search``), each returning the API's typed model (``DocumentAccepted``,
``JobOut``, ``EndpointCreated``, ``SearchResults``, ...). Retrievers for LangChain and LlamaIndex
on ``search``: :mod:`entry.langchain_retriever`, :mod:`entry.llama_index_retriever`.

HTTP::

    with HttpClient("http://127.0.0.1:8000", api_key) as c:
        print(c.query("How do I create a virtual environment?").answer)
        for ev in c.stream("What does VACUUM do?"):
            print(ev.kind, ev.data)

    async with AsyncHttpClient("http://127.0.0.1:8000", api_key) as c:
        await c.upsert_document("notes", "VACUUM reclaims storage.")
        async for ev in c.stream("What does VACUUM do?"):  # accepted, queued, evidence,
            print(ev.kind, ev.data)                          # token..., answer
        job = await c.submit_job(["/srv/kb/manual"])
        print((await c.wait_job(job.job_id)).status)

Leaving a stream early (``break``) closes its connection: the API then cancels the query's
generation.

Kafka (a service inside the trust boundary, producing query events for any tenant): the
:class:`~entry.kafka_client.KafkaClient`, re-exported here (imported on first use: an HTTP
caller does not load Kafka, nor the webhook models' SQL stack until it registers a webhook)::

    with KafkaClient() as c:
        result = c.query("What does VACUUM do?", tenant="default", on_token=print)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar
from urllib.parse import quote, urlencode

import httpx

from api.feedback_models import FeedbackOut
from api.models import DocumentAccepted, DocumentOut, JobOut, QueryResult, Route
from api.pages import MAX_LIMIT, DocumentPage
from api.search_models import RankerName, SearchResults
from ragstream.errors import RagstreamError
from ragstream.job_status import FINAL_JOB_STATUSES

if TYPE_CHECKING:
    from api.webhooks.protocol import EndpointCreated, EndpointList, EndpointOut, EventType
    from entry.kafka_client import KafkaClient, KafkaUnavailableError


def __getattr__(name: str) -> Any:
    """``KafkaClient`` and ``KafkaUnavailableError`` of :mod:`entry.kafka_client`, loaded on
    first use (PEP 562): ``ragstream query --api`` and the HTTP callers never load Kafka.

    Raises:
        AttributeError: any other name.
    """
    if name in ("KafkaClient", "KafkaUnavailableError"):
        from entry import kafka_client

        return getattr(kafka_client, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ApiRequestError(RagstreamError):
    """A non-2xx answer of the API: ``status``, typed ``code`` and ``message``."""

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.body = body


class ApiUnavailableError(RagstreamError):
    """The API could not be reached or stopped answering (``httpx``'s transport errors:
    refused, DNS, TLS, timeouts), with the URL and the cause."""


@contextlib.contextmanager
def _reaching(base_url: httpx.URL) -> Iterator[None]:
    """Translate ``httpx``'s transport errors into :class:`ApiUnavailableError`."""
    try:
        yield
    except httpx.TransportError as exc:
        cause = str(exc) or type(exc).__name__
        raise ApiUnavailableError(
            f"cannot reach the API at {base_url}: {cause} (is `ragstream api` running there?)"
        ) from exc


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One Server-Sent Event of a streamed query: ``kind`` is ``accepted``, ``queued``,
    ``evidence``, ``token``, ``replace``, ``answer``, ``error`` or ``timeout``; ``data`` its
    JSON; ``id`` its event id (``<request_id>:<position>``: resume after it with
    :meth:`HttpClient.events`; keep-alive comments are skipped)."""

    kind: str
    data: dict[str, Any]
    id: str = ""

    @property
    def result(self) -> QueryResult | None:
        """The result of an ``answer`` or ``error`` event."""
        if self.kind in ("answer", "error"):
            return QueryResult.model_validate(self.data)
        return None


T = TypeVar("T")
#: Job states after which a bulk ingest job changes no more.
JOB_FINAL = frozenset(FINAL_JOB_STATUSES)


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API request, built once for both HTTP clients: ``method``, ``path``, JSON
    ``body`` and ``parse``, which turns the checked response's JSON into the typed result."""

    method: str
    path: str
    body: dict[str, Any] | None
    parse: Callable[[Any], T]


def _params(**params: Any) -> dict[str, Any]:
    return {k: v for k, v in params.items() if v is not None}


def _doc_path(doc_id: str) -> str:
    return "/v1/documents/" + quote(doc_id, safe="")


class Calls:
    """The requests of the API (pure: no I/O, tested without a server)."""

    @staticmethod
    def query(query: str, **params: Any) -> Call[QueryResult]:
        """``POST /v1/query`` with ``params`` (``None`` values left out)."""
        return Call("POST", "/v1/query", {"query": query, **_params(**params)}, _query_result)

    @staticmethod
    def get_query(request_id: str) -> Call[QueryResult]:
        """``GET /v1/queries/{id}``."""
        return Call("GET", f"/v1/queries/{quote(request_id, safe='')}", None, _query_result)

    @staticmethod
    def search(
        query: str,
        *,
        top_k: int = 10,
        ranker: RankerName = "hybrid",
        filters: Sequence[Mapping[str, Any]] | None = None,
        score_threshold: float | None = None,
        history: Sequence[str | Mapping[str, str]] | None = None,
    ) -> Call[SearchResults]:
        """``POST /v1/search``: the passages of ``query``, no answer (``None`` values left out)."""
        body = {"query": query, "top_k": top_k, "ranker": ranker}
        body |= _params(
            filters=list(filters) if filters else None,
            score_threshold=score_threshold,
            history=list(history) if history else None,
        )
        return Call("POST", "/v1/search", body, SearchResults.model_validate)

    @staticmethod
    def feedback(
        request_id: str,
        helpful: bool,
        *,
        passage: int | None = None,
        sentence: int | None = None,
        comment: str | None = None,
    ) -> Call[FeedbackOut]:
        """``POST /v1/queries/{id}/feedback`` (``None`` values left out)."""
        body = {"helpful": helpful, **_params(passage=passage, sentence=sentence, comment=comment)}
        path = f"/v1/queries/{quote(request_id, safe='')}/feedback"
        return Call("POST", path, body, FeedbackOut.model_validate)

    @staticmethod
    def upsert_document(
        doc_id: str,
        text: str,
        *,
        content_type: str = "text/plain",
        title: str | None = None,
        source: str | None = None,
        metadata: dict[str, str | int | float | bool | None] | None = None,
    ) -> Call[DocumentAccepted]:
        """``POST /v1/documents``: one upsert event."""
        body = {"doc_id": doc_id, "text": text, "content_type": content_type}
        body |= _params(title=title, source=source, metadata=metadata)
        return Call("POST", "/v1/documents", body, DocumentAccepted.model_validate)

    @staticmethod
    def delete_document(doc_id: str) -> Call[DocumentAccepted]:
        """``DELETE /v1/documents/{id}``: one delete event."""
        return Call("DELETE", _doc_path(doc_id), None, DocumentAccepted.model_validate)

    @staticmethod
    def get_document(doc_id: str) -> Call[DocumentOut]:
        """``GET /v1/documents/{id}``: the registry row."""
        return Call("GET", _doc_path(doc_id), None, DocumentOut.model_validate)

    @staticmethod
    def list_documents(
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: str | None = None,
        source: str | None = None,
    ) -> Call[DocumentPage]:
        """``GET /v1/documents``: one page (at most ``limit``, newest first) after ``cursor``
        (a page's ``next_cursor``; ``None``: the first), only ``status``/``source`` if given."""
        query = urlencode(_params(limit=limit, cursor=cursor, status=status, source=source))
        return Call("GET", f"/v1/documents?{query}", None, DocumentPage.model_validate)

    @staticmethod
    def submit_job(paths: Sequence[str], callback_url: str | None = None) -> Call[JobOut]:
        """``POST /v1/ingest/jobs`` over server-side ``paths``."""
        body = {"paths": list(paths), **_params(callback_url=callback_url)}
        return Call("POST", "/v1/ingest/jobs", body, JobOut.model_validate)

    @staticmethod
    def get_job(job_id: str) -> Call[JobOut]:
        """``GET /v1/ingest/jobs/{id}``: progress and failures."""
        return Call("GET", f"/v1/ingest/jobs/{quote(job_id, safe='')}", None, JobOut.model_validate)

    @staticmethod
    def register_webhook(
        url: str, event_types: Sequence[EventType], description: str = ""
    ) -> Call[EndpointCreated]:
        """``POST /v1/webhooks``: the response holds the endpoint's signing ``secret``, once."""
        from api.webhooks.protocol import EndpointCreated  # SQL stack behind: on first use

        body = {"url": url, "event_types": list(event_types), "description": description}
        return Call("POST", "/v1/webhooks", body, EndpointCreated.model_validate)

    @staticmethod
    def list_webhooks(cursor: str | None = None) -> Call[EndpointList]:
        """``GET /v1/webhooks``: one page of the tenant's endpoints (the most a page holds),
        after ``cursor`` (a page's ``next_cursor``; ``None``: the first page)."""
        from api.webhooks.protocol import EndpointList  # SQL stack behind: on first use

        path = f"/v1/webhooks?limit={MAX_LIMIT}"
        if cursor is not None:
            path += f"&cursor={quote(cursor, safe='')}"
        return Call("GET", path, None, EndpointList.model_validate)

    @staticmethod
    def delete_webhook(endpoint_id: str) -> Call[None]:
        """``DELETE /v1/webhooks/{id}``."""
        return Call("DELETE", f"/v1/webhooks/{quote(endpoint_id, safe='')}", None, lambda _: None)


def _query_result(data: Any) -> QueryResult:
    return QueryResult.model_validate(data)


class HttpClient:
    """Client of the HTTP API.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000``.
        api_key: a key from ``ragstream keys create`` (it fixes the tenant).
        timeout_s: HTTP read timeout, s (a sync query waits server-side up to its own timeout).

    Raises:
        ApiRequestError: from every method, on a non-2xx answer.
        ApiUnavailableError: from every method, when the API cannot be reached.
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

    def _do(self, call: Call[T]) -> T:
        with _reaching(self._http.base_url):
            response = self._http.request(call.method, call.path, json=call.body)
        return call.parse(_json_or_raise(response))

    def query(
        self,
        query: str,
        *,
        top_n: int | None = None,
        top_k: int | None = None,
        route: Route = "auto",
        timeout_s: float | None = None,
        callback_url: str | None = None,
        history: Sequence[str | Mapping[str, str]] | None = None,
    ) -> QueryResult:
        """Ask and wait (server-side up to ``timeout_s``); ``status`` may still be
        ``pending`` after the wait (then :meth:`wait`). ``history``: the conversation's earlier
        turns, oldest first: questions, or ``{"question", "answer"}`` with the answer shown (a
        follow-up is made standalone from the questions and never given the last answer again)."""
        return self._do(
            Calls.query(
                query, top_n=top_n, top_k=top_k, route=route, timeout_s=timeout_s,
                callback_url=callback_url, history=list(history) if history else None,
            )
        )  # fmt: skip

    def submit(
        self, query: str, *, route: Route = "auto", callback_url: str | None = None
    ) -> QueryResult:
        """Ask without waiting (``mode="async"``): a ``pending`` result with ``request_id``."""
        return self._do(Calls.query(query, route=route, mode="async", callback_url=callback_url))

    def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        ranker: RankerName = "hybrid",
        filters: Sequence[Mapping[str, Any]] | None = None,
        score_threshold: float | None = None,
        history: Sequence[str | Mapping[str, str]] | None = None,
    ) -> SearchResults:
        """The ``top_k`` passages of ``query`` (``POST /v1/search``), best first, no answer:
        ``ranker`` ``hybrid`` (RRF score), ``keyword`` (BM25) or ``vector`` (cosine);
        ``filters`` as ``POST /v1/query`` takes them; ``score_threshold`` in the ranker's score."""
        return self._do(
            Calls.search(
                query, top_k=top_k, ranker=ranker, filters=filters,
                score_threshold=score_threshold, history=history,
            )
        )  # fmt: skip

    def get(self, request_id: str) -> QueryResult:
        """The current state of a query."""
        return self._do(Calls.get_query(request_id))

    def feedback(
        self,
        request_id: str,
        helpful: bool,
        *,
        passage: int | None = None,
        sentence: int | None = None,
        comment: str | None = None,
    ) -> FeedbackOut:
        """Say whether a query's answer helped, and optionally which cited passage (``[n]``) or
        evidence span (index into ``evidence``) answered; replaces this key's earlier feedback."""
        call = Calls.feedback(request_id, helpful, passage=passage, sentence=sentence,
                              comment=comment)  # fmt: skip
        return self._do(call)

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
        call = Calls.query(query, route=route, stream=True, top_k=top_k, timeout_s=timeout_s)
        with (
            _reaching(self._http.base_url),
            self._http.stream(call.method, call.path, json=call.body) as response,
        ):
            if response.status_code >= 300:
                response.read()
                _json_or_raise(response)
            yield from parse_sse(response.iter_lines())

    def events(self, request_id: str, last_event_id: str | None = None) -> Iterator[StreamEvent]:
        """Resume a streamed query: its events after ``last_event_id`` (``None``: all), from
        the log and then live (``GET /v1/queries/{id}/events``); nothing when the stream had
        ended there.

        Raises:
            ApiRequestError: 404, 410 ``STREAM_EXPIRED`` (past ``rag.tokens``' retention), ...
        """
        path = f"/v1/queries/{quote(request_id, safe='')}/events"
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        with (
            _reaching(self._http.base_url),
            self._http.stream("GET", path, headers=headers) as response,
        ):
            if response.status_code == 204:
                return
            if response.status_code >= 300:
                response.read()
                _json_or_raise(response)
            yield from parse_sse(response.iter_lines())

    def upsert_document(
        self,
        doc_id: str,
        text: str,
        *,
        content_type: str = "text/plain",
        title: str | None = None,
        source: str | None = None,
        metadata: dict[str, str | int | float | bool | None] | None = None,
    ) -> DocumentAccepted:
        """Upsert one document from text (indexed asynchronously; see :meth:`get_document`)."""
        return self._do(
            Calls.upsert_document(
                doc_id,
                text,
                content_type=content_type,
                title=title,
                source=source,
                metadata=metadata,
            )
        )

    def delete_document(self, doc_id: str) -> DocumentAccepted:
        """Delete one document."""
        return self._do(Calls.delete_document(doc_id))

    def list_documents(
        self,
        *,
        limit: int = 100,
        cursor: str | None = None,
        status: str | None = None,
        source: str | None = None,
    ) -> DocumentPage:
        """One page of the documents the key may read (:meth:`Calls.list_documents`)."""
        return self._do(
            Calls.list_documents(limit=limit, cursor=cursor, status=status, source=source)
        )

    def get_document(self, doc_id: str) -> DocumentOut:
        """A document's registry row (``status``: ``indexed``, ``deleted``, ...)."""
        return self._do(Calls.get_document(doc_id))

    def submit_job(self, paths: Sequence[str], *, callback_url: str | None = None) -> JobOut:
        """Start a bulk ingest job over server-side paths under the allowed roots."""
        return self._do(Calls.submit_job(paths, callback_url))

    def get_job(self, job_id: str) -> JobOut:
        """A bulk job's progress."""
        return self._do(Calls.get_job(job_id))

    def register_webhook(
        self, url: str, event_types: Sequence[EventType], *, description: str = ""
    ) -> EndpointCreated:
        """Register an endpoint; keep the returned ``secret`` (shown once)."""
        return self._do(Calls.register_webhook(url, event_types, description))

    def list_webhooks(self) -> list[EndpointOut]:
        """The tenant's endpoints, oldest first: every page (``next_cursor`` followed)."""
        found: list[EndpointOut] = []
        cursor: str | None = None
        while True:
            page = self._do(Calls.list_webhooks(cursor))
            found += page.items
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    def delete_webhook(self, endpoint_id: str) -> None:
        """Remove an endpoint."""
        self._do(Calls.delete_webhook(endpoint_id))


class AsyncHttpClient:
    """Asynchronous client of the HTTP API (``httpx.AsyncClient``); the same methods as
    :class:`HttpClient`, awaited, plus :meth:`wait_job`.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000``.
        api_key: a key from ``ragstream keys create`` (it fixes the tenant).
        timeout_s: HTTP read timeout, s (a sync query waits server-side up to its own timeout).
        transport: an httpx transport (tests: ``httpx.MockTransport`` or ``ASGITransport``).

    Raises:
        ApiRequestError: from every method, on a non-2xx answer.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout_s: float = 330.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self._http = httpx.AsyncClient(
            base_url=base_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=httpx.Timeout(timeout_s, connect=10.0),
            transport=transport,
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _do(self, call: Call[T]) -> T:
        with _reaching(self._http.base_url):
            response = await self._http.request(call.method, call.path, json=call.body)
        return call.parse(_json_or_raise(response))

    async def query(
        self,
        query: str,
        *,
        top_n: int | None = None,
        top_k: int | None = None,
        route: Route = "auto",
        timeout_s: float | None = None,
        callback_url: str | None = None,
        history: Sequence[str | Mapping[str, str]] | None = None,
    ) -> QueryResult:
        """Ask and wait (server-side up to ``timeout_s``); ``status`` may still be
        ``pending`` after the wait (then :meth:`wait`). ``history``: the conversation's earlier
        turns, oldest first: questions, or ``{"question", "answer"}`` with the answer shown (a
        follow-up is made standalone from the questions and never given the last answer again)."""
        return await self._do(
            Calls.query(
                query, top_n=top_n, top_k=top_k, route=route, timeout_s=timeout_s,
                callback_url=callback_url, history=list(history) if history else None,
            )
        )  # fmt: skip

    async def search(
        self,
        query: str,
        *,
        top_k: int = 10,
        ranker: RankerName = "hybrid",
        filters: Sequence[Mapping[str, Any]] | None = None,
        score_threshold: float | None = None,
        history: Sequence[str | Mapping[str, str]] | None = None,
    ) -> SearchResults:
        """The ``top_k`` passages of ``query`` (``POST /v1/search``), best first, no answer:
        ``ranker`` ``hybrid`` (RRF score), ``keyword`` (BM25) or ``vector`` (cosine);
        ``filters`` as ``POST /v1/query`` takes them; ``score_threshold`` in the ranker's score."""
        return await self._do(
            Calls.search(
                query, top_k=top_k, ranker=ranker, filters=filters,
                score_threshold=score_threshold, history=history,
            )
        )  # fmt: skip

    async def submit(
        self, query: str, *, route: Route = "auto", callback_url: str | None = None
    ) -> QueryResult:
        """Ask without waiting (``mode="async"``): a ``pending`` result with ``request_id``."""
        call = Calls.query(query, route=route, mode="async", callback_url=callback_url)
        return await self._do(call)

    async def get(self, request_id: str) -> QueryResult:
        """The current state of a query (from the query log)."""
        return await self._do(Calls.get_query(request_id))

    async def feedback(
        self,
        request_id: str,
        helpful: bool,
        *,
        passage: int | None = None,
        sentence: int | None = None,
        comment: str | None = None,
    ) -> FeedbackOut:
        """As :meth:`HttpClient.feedback`."""
        call = Calls.feedback(request_id, helpful, passage=passage, sentence=sentence,
                              comment=comment)  # fmt: skip
        return await self._do(call)

    async def wait(
        self, request_id: str, timeout_s: float = 120.0, poll_s: float = 0.5
    ) -> QueryResult:
        """Poll until the query is no longer pending or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = await self.get(request_id)
            if result.status != "pending" or time.monotonic() >= deadline:
                return result
            await asyncio.sleep(poll_s)

    async def stream(
        self,
        query: str,
        *,
        route: Route = "auto",
        top_k: int | None = None,
        timeout_s: float | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """Ask with ``stream=true`` and yield the Server-Sent Events as they arrive:
        ``accepted``, ``queued``, ``evidence``, ``token``..., then ``answer``, ``error`` or
        ``timeout``. Stopping early closes the connection (the API cancels the query)."""
        call = Calls.query(query, route=route, stream=True, top_k=top_k, timeout_s=timeout_s)
        with _reaching(self._http.base_url):
            async with self._http.stream(call.method, call.path, json=call.body) as response:
                if response.status_code >= 300:
                    await response.aread()
                    _json_or_raise(response)
                parser = SseParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield event
                last = parser.end()
                if last is not None:
                    yield last

    async def upsert_document(
        self,
        doc_id: str,
        text: str,
        *,
        content_type: str = "text/plain",
        title: str | None = None,
        source: str | None = None,
        metadata: dict[str, str | int | float | bool | None] | None = None,
    ) -> DocumentAccepted:
        """Upsert one document from text (indexed asynchronously; see :meth:`get_document`)."""
        call = Calls.upsert_document(
            doc_id, text, content_type=content_type, title=title, source=source, metadata=metadata
        )
        return await self._do(call)

    async def delete_document(self, doc_id: str) -> DocumentAccepted:
        """Delete one document."""
        return await self._do(Calls.delete_document(doc_id))

    async def get_document(self, doc_id: str) -> DocumentOut:
        """A document's registry row (``status``: ``indexed``, ``deleted``, ...)."""
        return await self._do(Calls.get_document(doc_id))

    async def submit_job(self, paths: Sequence[str], *, callback_url: str | None = None) -> JobOut:
        """Start a bulk ingest job over server-side paths under the allowed roots."""
        return await self._do(Calls.submit_job(paths, callback_url))

    async def get_job(self, job_id: str) -> JobOut:
        """A bulk job's progress."""
        return await self._do(Calls.get_job(job_id))

    async def wait_job(self, job_id: str, timeout_s: float = 3600.0, poll_s: float = 2.0) -> JobOut:
        """Poll until the job's status is final (:data:`JOB_FINAL`) or ``timeout_s`` passes."""
        deadline = time.monotonic() + timeout_s
        while True:
            job = await self.get_job(job_id)
            if job.status in JOB_FINAL or time.monotonic() >= deadline:
                return job
            await asyncio.sleep(poll_s)

    async def register_webhook(
        self, url: str, event_types: Sequence[EventType], *, description: str = ""
    ) -> EndpointCreated:
        """Register an endpoint; keep the returned ``secret`` (shown once)."""
        return await self._do(Calls.register_webhook(url, event_types, description))

    async def list_webhooks(self) -> list[EndpointOut]:
        """The tenant's endpoints, oldest first: every page (``next_cursor`` followed)."""
        found: list[EndpointOut] = []
        cursor: str | None = None
        while True:
            page = await self._do(Calls.list_webhooks(cursor))
            found += page.items
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    async def delete_webhook(self, endpoint_id: str) -> None:
        """Remove an endpoint."""
        await self._do(Calls.delete_webhook(endpoint_id))


class SseParser:
    """Server-Sent Events (``event:``/``data:`` lines, blank-line separated), line by line;
    comments (keep-alive ``: ping``) and other fields are skipped."""

    def __init__(self) -> None:
        self._kind, self._data, self._id = "message", list[str](), ""

    def feed(self, line: str) -> StreamEvent | None:
        """Take one line; the event it completes, if any."""
        if not line:
            return self.end()
        if line.startswith("event:"):
            self._kind = line[6:].strip()
        elif line.startswith("data:"):
            self._data.append(line[5:].strip())
        elif line.startswith("id:"):
            self._id = line[3:].strip()
        return None

    def end(self) -> StreamEvent | None:
        """The pending event (at a blank line or the end of the stream), if any."""
        kind, data, id_ = self._kind, self._data, self._id
        self._kind, self._data, self._id = "message", [], ""
        return StreamEvent(kind, json.loads("\n".join(data)), id_) if data else None


def parse_sse(lines: Iterator[str]) -> Iterator[StreamEvent]:
    """Server-Sent Events (``event:``/``data:`` lines, blank-line separated) from ``lines``."""
    parser = SseParser()
    for line in lines:
        event = parser.feed(line)
        if event is not None:
            yield event
    last = parser.end()
    if last is not None:
        yield last


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


__all__ = [
    "ApiRequestError",
    "AsyncHttpClient",
    "Call",
    "Calls",
    "HttpClient",
    "KafkaClient",
    "KafkaUnavailableError",
    "QueryResult",
    "SseParser",
    "StreamEvent",
    "parse_sse",
]
