"""The Python client of ragstream straight on Kafka (:class:`KafkaClient`): a service inside
the trust boundary produces query events for any tenant and awaits the answers::

    with KafkaClient() as c:
        result = c.query("What does VACUUM do?", tenant="default", on_token=print)

It lives apart from the HTTP clients (:mod:`entry.client`, which re-exports it) so that
``ragstream query`` loads Kafka, the settings and the topic models only, and neither httpx,
FastAPI nor SQLAlchemy (issue 37: the command's start-up was nearly all import time).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as dt
import time
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, Self, TypeVar

from api.asked import Asked
from api.models import QueryResult, Route
from api.replies import Reply, ReplyRouter, Waiter
from ragstream.errors import RagstreamError
from ragstream.settings import Settings, get_settings
from topics.answers import Answer
from topics.producer import make_producer
from topics.queries import QueryRequest
from topics.registry import QUERIES, TopicRegistry
from topics.serde import encode

T = TypeVar("T")


class KafkaUnavailableError(RagstreamError):
    """The Kafka brokers could not be reached (``kafka-python``'s errors, translated)."""


class KafkaClient:
    """Produce query events and await the matching response on Kafka (no HTTP, no API key:
    for services inside the trust boundary, which name the tenant themselves).

    Args:
        settings: Kafka settings and topic prefix; default :func:`get_settings`.
        reply_poll_ms: the reply consumer's poll timeout, ms: how long :meth:`close` may wait
            for its thread (records end a poll at once; a shorter timeout wakes an idle
            consumer more often). ``ragstream query``, which closes right after one answer,
            takes 20.

    Raises:
        KafkaUnavailableError: on start, when the broker cannot be reached.
    """

    def __init__(self, settings: Settings | None = None, *, reply_poll_ms: int = 100) -> None:
        from kafka.errors import KafkaError

        self.settings = settings or get_settings()
        self._registry = TopicRegistry(self.settings.kafka.topic_prefix)
        servers = self.settings.kafka.bootstrap_servers
        try:
            self._producer = make_producer(self.settings.kafka)
        except KafkaError as exc:
            raise KafkaUnavailableError(
                f"cannot reach Kafka at {servers}: {type(exc).__name__} "
                "(is `ragstream infra up` running?)"
            ) from exc
        self._replies = ReplyRouter(self.settings, poll_ms=reply_poll_ms)
        try:
            self._replies.start()
        except KafkaError as exc:
            self._producer.close(timeout=1)
            raise KafkaUnavailableError(
                f"cannot consume replies from Kafka at {servers}: {type(exc).__name__}"
            ) from exc

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
        answer = _run(self._ask(request, started + timeout_s, on_token))
        if answer is None:
            answer = Answer.pending(request.request_id, tenant=tenant, query=query)
        return QueryResult.render(answer, latency_ms=(time.monotonic() - started) * 1000)

    async def _ask(
        self, request: QueryRequest, until: float, on_token: Callable[[str], None] | None
    ) -> Answer | None:
        """Produce ``request`` and wait on its :class:`~api.asked.Asked` handle, as the API
        does: the tokens (each ``seq`` once) to ``on_token``, then the answer; ``None`` when
        the monotonic time ``until`` comes first."""
        loop = asyncio.get_running_loop()
        inbox: asyncio.Queue[Reply] = asyncio.Queue()

        def deliver(reply: Reply) -> None:
            loop.call_soon_threadsafe(inbox.put_nowait, reply)

        rid = request.request_id
        self._replies.register(Waiter(rid, deliver, tokens=on_token is not None))
        async with Asked.of(self, request, queue=inbox) as asked:
            future = self._producer.send(
                self._registry.name(QUERIES), key=request.key(), value=encode(request)
            )
            await asyncio.to_thread(future.get, timeout=30)
            async for item in asked.items(until):
                if isinstance(item, Answer):
                    return item
                if on_token is not None and item.text:
                    on_token(item.text)
        return None

    def unsubscribe(self, request_id: str, queue: object = None) -> None:
        """Drop the reply waiter of ``request_id`` (what :class:`~api.asked.Asked` calls on
        exit)."""
        self._replies.unregister(request_id)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    """``coro``'s result, run to its end from synchronous code: on an event loop of its own,
    in a thread of its own when this thread already runs one."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()
