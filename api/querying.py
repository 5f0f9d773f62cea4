"""The API's side of the query path: admission, the exact-cache fast path, produce, await.

One :class:`QueryService` per API process. It starts its Kafka producer and its
:class:`~api.replies.ReplyRouter` on first use (so the process starts, and ``/readyz``
answers, even while Kafka is down), and then:

1. admission: 429 + ``Retry-After`` when a query pool's summed consumer lag exceeds
   ``api.max_lag`` (read from the pools' Redis pressure reports, cached 0.5 s);
2. the exact answer cache (same key as the retrieval pool: tenant, index version, normalised
   query and parameters): a hit is answered at once, and its response event is still published
   to ``rag.responses`` so the delivery pool writes the query log and fires webhooks as for any
   answer; a miss is marked on the query event (``exact_cache_checked``), so the retrieval pool
   does not read the exact cache again;
3. otherwise a ``pending`` query-log row, a waiter registered *before* the query event is
   produced (acks=all), and an await on the waiter's queue.
"""

from __future__ import annotations

import asyncio
import math
import threading
import time

import redis
import structlog
from kafka import KafkaProducer
from kafka import errors as kafka_errors
from prometheus_client import Counter
from sqlalchemy.orm import Session, sessionmaker

from api.asked import Asked
from api.errors import ApiError
from api.replies import Reply, ReplyRouter, Waiter
from api.streams.attach import Attachments
from index.versions import IndexVersions
from ragstream import tracing
from ragstream.db.acl import CurrentReaders
from ragstream.settings import Settings
from topics.base import Event
from topics.producer import make_producer
from topics.queries import QueryRequest
from topics.registry import QUERIES, RESPONSES, TopicRegistry
from topics.responses import QueryResponse
from topics.serde import encode
from workers import query_log
from workers.caches import AnswerCache, answer_config
from workers.cancel import Cancellations
from workers.runtime.pressure import read_pressure

log = structlog.get_logger(__name__)

#: The pools whose lag gates admission of new queries.
QUERY_POOLS = ("retrieval", "rerank", "generation-small", "generation-large")
PRESSURE_TTL_S = 0.5
STREAM_DETACHED = Counter(
    "ragstream_api_stream_detached_total",
    "Streams whose client left before the answer, by what followed: another stream of the "
    "request was attached within api.resume_grace_s (resumed) or not (cancelled).",
    ["outcome"],
)
START_RETRY_S = 5.0


class QueryService:
    """Admission, cache, produce and await for one API process.

    Args:
        settings: the process settings (Kafka, Redis, API limits).
        sessions: SQL session factory (query log).
        client: Redis client (cache, index versions, pressure).
    """

    def __init__(
        self, settings: Settings, sessions: sessionmaker[Session], client: redis.Redis
    ) -> None:
        self.settings = settings
        self.sessions = sessions
        self.registry = TopicRegistry(settings.kafka.topic_prefix)
        self.cache = AnswerCache(
            client,
            ttl_s=settings.cache.ttl_s,
            threshold=settings.cache.semantic_threshold,
            max_entries=settings.cache.semantic_max_entries,
            config=answer_config(settings),
            enabled=settings.cache.enabled,
            readers=CurrentReaders(sessions),  # a hit is re-checked against current readers
        )
        self.versions = IndexVersions(client)
        self.cancellations = Cancellations(client)
        self.attachments = Attachments(client, settings.api.query_deadline_s)
        self._subscriptions: dict[asyncio.Queue[Reply], Waiter] = {}
        self._redis = client
        self._producer: KafkaProducer | None = None
        self.replies: ReplyRouter | None = None
        self._start_lock = threading.Lock()
        self._pressure: tuple[float, int, str] = (0.0, 0, "")
        self._failed: tuple[float, str] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def _ensure_started(self) -> tuple[KafkaProducer, ReplyRouter]:
        if self._producer is not None and self.replies is not None and self.replies.running:
            return self._producer, self.replies
        # While Kafka is down, fail fast for a few seconds instead of queueing every request
        # behind one slow connection attempt (each would hold a thread).
        failed = self._failed
        if failed is not None and time.monotonic() - failed[0] < START_RETRY_S:
            raise ApiError(503, "UNAVAILABLE", f"Kafka unreachable: {failed[1]}")
        with self._start_lock:
            if self.replies is not None and not self.replies.running:
                log.warning("api.reply_router_restarting")
                self.replies.close()
                self.replies = None
            if self._producer is None or self.replies is None:
                try:
                    producer = self._producer or make_producer(
                        self.settings.kafka,
                        max_block_ms=int(self.settings.api.produce_timeout_s * 1000),
                    )
                except Exception as exc:
                    self._failed = (time.monotonic(), str(exc))
                    raise ApiError(503, "UNAVAILABLE", f"Kafka unreachable: {exc}") from exc
                router = ReplyRouter(self.settings)
                try:
                    router.start()
                except Exception as exc:
                    self._failed = (time.monotonic(), str(exc))
                    producer.close(timeout=1)
                    self._producer = None
                    raise ApiError(503, "UNAVAILABLE", f"Kafka unreachable: {exc}") from exc
                self._producer, self.replies, self._failed = producer, router, None
            return self._producer, self.replies

    async def start(self) -> tuple[KafkaProducer, ReplyRouter]:
        """Start the producer and reply router if not yet started.

        Raises:
            ApiError: 503 ``UNAVAILABLE`` when Kafka cannot be reached.
        """
        return await asyncio.to_thread(self._ensure_started)

    def close(self) -> None:
        """Flush and close the producer; stop the reply router."""
        if self.replies is not None:
            self.replies.close()
        if self._producer is not None:
            self._producer.close(timeout=5)
        self._producer, self.replies = None, None

    # -- admission -------------------------------------------------------------------------
    def _lagging(self) -> tuple[int, str]:
        now = time.monotonic()
        at, lag, pool = self._pressure
        if now - at < PRESSURE_TTL_S:
            return lag, pool
        worst = (0, "")
        try:
            for name in QUERY_POOLS:
                p = read_pressure(self._redis, self.settings.kafka.topic_prefix + name)
                if p.lag > worst[0]:
                    worst = (p.lag, name)
        except (redis.RedisError, ValueError, KeyError, TypeError) as exc:  # advisory signal
            log.warning("api.pressure_unavailable", error=str(exc))
        self._pressure = (now, *worst)
        return worst

    async def backlog(self) -> tuple[int, str]:
        """``(lag, pool)``: the most lagging query pool's summed consumer lag (events queued
        ahead of a new query there), from the pools' pressure reports (cached 0.5 s)."""
        return await asyncio.to_thread(self._lagging)

    async def admit(self) -> None:
        """Refuse new work while a query pool lags.

        Raises:
            ApiError: 429 ``OVERLOADED`` with ``Retry-After`` (lag x per-event cost, 1-60 s).
        """
        limit = self.settings.api.max_lag
        if limit <= 0:
            return
        lag, pool = await asyncio.to_thread(self._lagging)
        if lag > limit:
            retry = min(60, max(1, math.ceil(lag * self.settings.api.retry_after_per_event_s)))
            raise ApiError(
                429,
                "OVERLOADED",
                f"the {pool} pool is {lag} events behind; retry later",
                headers={"Retry-After": str(retry)},
            )

    # -- the cache fast path ---------------------------------------------------------------
    def cached(self, request: QueryRequest) -> tuple[QueryResponse | None, QueryRequest]:
        """``(the exact-cache answer re-addressed to request, None)`` on a hit; on a miss
        ``(None, request marked exact_cache_checked)`` so the retrieval pool does not read the
        cache again (unmarked when the lookup could not be made: Redis unreachable)."""
        try:
            version = self.versions.get(request.tenant)
        except redis.RedisError:
            return None, request
        hit = self.cache.get_exact(request, version)
        if hit is None:
            return None, request.model_copy(update={"exact_cache_checked": True})
        return hit.readdress(request, "api"), request

    # -- produce and await -----------------------------------------------------------------
    async def produce(self, event: Event, response: bool = False) -> None:
        """Produce ``event`` to ``rag.queries`` (or ``rag.responses``) and await the ack.

        Raises:
            ApiError: 503 ``UNAVAILABLE`` when the broker does not acknowledge in time.
        """
        producer, _ = await self.start()
        topic = self.registry.name(RESPONSES if response else QUERIES)
        await send_acked(producer, topic, event.key(), encode(event), self.settings)

    def subscribe(self, request_id: str, tokens: bool) -> asyncio.Queue[Reply]:
        """Register a waiter for ``request_id`` on the reply router; replies arrive on the
        returned queue. Call :meth:`unsubscribe` when done (always, in ``finally``)."""
        assert self.replies is not None, "start() first"
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[Reply] = asyncio.Queue()

        def deliver(reply: Reply) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, reply)

        waiter = Waiter(request_id, deliver, tokens=tokens)
        self._subscriptions[queue] = waiter
        self.replies.register(waiter)
        return queue

    async def attach(self, request_id: str) -> None:
        """Count a stream of ``request_id`` as open (:mod:`api.streams.attach`), so that a
        disconnected stream of the same request does not cancel it; a Redis error is logged.
        Nothing is counted when ``api.resume_grace_s`` is 0 (a disconnect cancels at once)."""
        if self.settings.api.resume_grace_s <= 0:
            return
        try:
            await asyncio.to_thread(self.attachments.attach, request_id)
        except redis.RedisError as exc:
            log.warning("api.attach_failed", request_id=request_id, error=str(exc))

    def detach(self, request_id: str, *, left: bool = False) -> None:
        """A stream of ``request_id`` ended (its :meth:`attach` is undone). ``left``: its client
        disconnected before the answer, so the request is cancelled (:meth:`cancel`) unless
        another stream of it is attached ``api.resume_grace_s`` later. Fire-and-forget in a
        thread of its own, so it can be called from a stream that is being cancelled."""
        grace_s = self.settings.api.resume_grace_s

        def run() -> None:
            if grace_s > 0:
                try:
                    self.attachments.detach(request_id)
                except redis.RedisError as exc:
                    log.warning("api.detach_failed", request_id=request_id, error=str(exc))
            if not left:
                return
            if grace_s > 0:
                time.sleep(grace_s)
                if self.attachments.attached(request_id) > 0:
                    STREAM_DETACHED.labels("resumed").inc()
                    log.info("api.stream_resumed_in_grace", request_id=request_id)
                    return
            STREAM_DETACHED.labels("cancelled").inc()
            self._flag_cancelled(request_id)

        threading.Thread(target=run, name="detach", daemon=True).start()

    def cancel(self, request_id: str) -> None:
        """Ask the pools to stop working on ``request_id`` (its client disconnected), unless
        it resumes within ``api.resume_grace_s`` (:meth:`detach` with ``left``): a Redis flag for
        ``api.query_deadline_s`` (:mod:`workers.cancel`) that the generation pools check before
        and while generating. Returns at once; a failure is logged."""
        self.detach(request_id, left=True)

    def _flag_cancelled(self, request_id: str) -> None:
        try:
            self.cancellations.cancel(request_id, self.settings.api.query_deadline_s)
            log.info("api.query_cancelled", request_id=request_id)
        except redis.RedisError as exc:
            log.warning("api.cancel_failed", request_id=request_id, error=str(exc))

    def unsubscribe(self, request_id: str, queue: asyncio.Queue[Reply] | None = None) -> None:
        """Drop the waiter of ``queue`` (``None``: every waiter of ``request_id``; idempotent)."""
        waiter = self._subscriptions.pop(queue, None) if queue is not None else None
        if self.replies is not None and (queue is None or waiter is not None):
            self.replies.unregister(request_id, waiter)

    async def ask(
        self, request: QueryRequest, *, wait_s: float | None, tokens: bool = False
    ) -> Asked:
        """Admit, try the cache, log, subscribe and produce ``request``.

        Returns:
            The :class:`Asked` handle (use it as an async context manager: it unsubscribes on
            exit): a cache hit's, whose stream is the hit; one waiting on the reply router; or,
            when ``wait_s`` is ``None`` (async mode: nobody waits), one with nothing to wait on.

        Raises:
            ApiError: 429 (pool lag), 503 (Kafka unreachable).
        """
        await self.admit()
        await self.start()
        hit, request = await asyncio.to_thread(self.cached, request)
        await asyncio.to_thread(query_log.log_pending, self.sessions, request)
        if hit is not None:
            try:  # the delivery pool logs it and fires webhooks, as for any answer
                await self.produce(hit, response=True)
            except ApiError as exc:  # the answer is in hand: log it here, answer anyway
                log.warning("api.cache_hit_not_published", error=exc.message)
                await asyncio.to_thread(query_log.settle, self.sessions, hit, None)
            return Asked.of(self, request, hit=hit)
        queue = self.subscribe(request.request_id, tokens) if wait_s is not None else None
        try:
            await self.produce(request)
        except ApiError as exc:
            self.unsubscribe(request.request_id, queue)
            await asyncio.to_thread(
                query_log.settle, self.sessions, None, (request.request_id, exc.message)
            )
            raise
        except BaseException:
            self.unsubscribe(request.request_id, queue)
            raise
        return Asked.of(self, request, queue=queue)


#: Bytes a record needs beyond its key and value (record batch and record headers), so that a
#: value checked against ``max_request_size`` also fits once framed.
RECORD_OVERHEAD_BYTES = 512


def unavailable(message: str, settings: Settings) -> ApiError:
    """503 ``UNAVAILABLE`` with ``Retry-After`` (``api.unavailable_retry_after_s``)."""
    retry = str(settings.api.unavailable_retry_after_s)
    return ApiError(503, "UNAVAILABLE", message, headers={"Retry-After": retry})


async def send_acked(
    producer: KafkaProducer, topic: str, key: bytes | None, value: bytes, settings: Settings
) -> None:
    """Produce one record and wait for the broker's acknowledgement, failing fast.

    The record carries the current trace context in its headers (``traceparent``, when tracing
    is on), so the pools continue the request's trace.

    Both the hand-over to the producer (which blocks while it has no metadata, e.g. with the
    broker down) and the acknowledgement are bounded by ``api.produce_timeout_s``.

    Raises:
        ApiError: 413 ``PAYLOAD_TOO_LARGE`` when the record cannot fit the broker's limit
            (``kafka.max_request_size``); 503 ``UNAVAILABLE`` with ``Retry-After`` when Kafka
            does not take or acknowledge it in time.
    """
    limit = settings.kafka.max_request_size
    size = len(value) + len(key or b"") + RECORD_OVERHEAD_BYTES
    if size > limit:
        raise ApiError(
            413,
            "PAYLOAD_TOO_LARGE",
            f"the event would be {size} bytes, over the {limit}-byte record limit of {topic}; "
            "send a smaller body (or load large files with a bulk job)",
        )
    timeout_s = settings.api.produce_timeout_s
    loop = asyncio.get_running_loop()
    done: asyncio.Future[None] = loop.create_future()
    try:
        future = await asyncio.wait_for(
            asyncio.to_thread(
                producer.send, topic, key=key, value=value, headers=tracing.inject_headers()
            ),
            timeout=timeout_s,
        )
    except Exception as exc:
        raise _produce_error(
            exc, topic, f"Kafka did not take the record for {topic}", settings
        ) from exc
    future.add_callback(lambda _: loop.call_soon_threadsafe(_settle, done, None))
    future.add_errback(lambda exc: loop.call_soon_threadsafe(_settle, done, exc))
    try:
        await asyncio.wait_for(done, timeout=timeout_s)
    except Exception as exc:
        raise _produce_error(exc, topic, "Kafka did not acknowledge", settings) from exc


def _produce_error(exc: Exception, topic: str, what: str, settings: Settings) -> ApiError:
    """The API error for a failed produce step: 413 when the broker refused the size, 503 with
    ``Retry-After`` otherwise (``what`` says which step failed)."""
    if isinstance(exc, kafka_errors.MessageSizeTooLargeError):
        return ApiError(413, "PAYLOAD_TOO_LARGE", f"the event is too large for {topic}: {exc}")
    if isinstance(exc, TimeoutError):
        return unavailable(f"{what} within {settings.api.produce_timeout_s}s", settings)
    return unavailable(f"{what}: {type(exc).__name__}: {exc}", settings)


def _settle(future: asyncio.Future[None], exc: BaseException | None) -> None:
    if future.done():
        return
    if exc is None:
        future.set_result(None)
    else:
        future.set_exception(exc)
