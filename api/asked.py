"""The handle a question asked waits on (:class:`Asked`), and the reply queue it reads.

Every exit that waits for an answer (``POST /v1/query``, the OpenAI routes, MCP, the console,
and :class:`entry.kafka_client.KafkaClient` on the command line) holds one :class:`Asked`. It
lives apart from :mod:`api.querying` (the API's admission, cache and produce steps, with Redis,
SQL and FastAPI behind them) so that ``ragstream query`` loads only Kafka and the topic models
to wait for its answer (issue 37: the CLI's start-up was nearly all import time).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, Self

from topics.answers import Answer
from topics.responses import QueryResponse
from topics.tokens import AnswerToken, TokenOrder

if TYPE_CHECKING:
    from api.replies import Reply
    from topics.queries import QueryRequest

#: What an answer stream yields: the request's tokens, each ``seq`` once, then its answer.
Item = AnswerToken | Answer
#: How often a sync wait asks whether its client has disconnected, s.
DISCONNECT_POLL_S = 0.5


class ClientLeftError(Exception):
    """The client disconnected while it waited for the final answer (the request has been
    cancelled, :meth:`~api.querying.QueryService.cancel`)."""


class Asked:
    """One question asked, or one answer stream reopened: the single handle every exit
    (``POST /v1/query``, the OpenAI routes, MCP, the console) waits on.

    Use it as an async context manager: leaving it unsubscribes its waiter (and closes a
    reopened stream). :meth:`final` is the final answer, :meth:`items` the stream (the tokens,
    each ``seq`` once, then the answer); a cache hit is a handle whose stream is the hit.

    Args:
        svc: the query service (or a stand-in with ``unsubscribe``, ``cancel``, ``sessions``).
        request_id: the request.
        tenant: its tenant.
        query: the question as asked (the answers' ``query``).
        asker: the asker's principals (``None``: a tenant-wide key), for the query log.
        hit: the cache hit answering it, if any.
        queue: the reply router's queue of its replies (``None``: nobody waits on them).
        reopened: the items of a reopened stream (:mod:`api.streams.resume`): history, then
            live; they unsubscribe their own waiter when closed.
        waiting: whether the answer is still to come from the pools (a reopened stream of a
            pending request); by default, whether ``queue`` is given.
    """

    def __init__(
        self,
        svc: Any,
        request_id: str,
        *,
        tenant: str,
        query: str,
        asker: tuple[str, ...] | None = None,
        hit: QueryResponse | None = None,
        queue: asyncio.Queue[Reply] | None = None,
        reopened: AsyncGenerator[Item] | None = None,
        waiting: bool | None = None,
    ) -> None:
        self.svc = svc
        self.request_id = request_id
        self.tenant = tenant
        self.query = query
        self.asker = asker
        self.hit = hit
        self._queue = queue
        self._reopened = reopened
        self.waiting = queue is not None if waiting is None else waiting

    @classmethod
    def of(
        cls,
        svc: Any,
        request: QueryRequest,
        *,
        hit: QueryResponse | None = None,
        queue: asyncio.Queue[Reply] | None = None,
    ) -> Asked:
        """The handle of the query event ``request`` (its hit, or the queue of its replies)."""
        return cls(
            svc, request.request_id, tenant=request.tenant, query=request.query,
            asker=request.principals, hit=hit, queue=queue,
        )  # fmt: skip

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Unsubscribe the waiter (idempotent); close a reopened stream."""
        if self._reopened is not None:
            await self._reopened.aclose()
        if self._queue is not None:
            self.svc.unsubscribe(self.request_id, self._queue)

    async def items(self, until: float) -> AsyncGenerator[Item]:
        """The stream until the monotonic time ``until``: the tokens, each ``seq`` once (a
        replayed generation re-sends tokens), then the final answer; it ends without one when
        ``until`` comes first (or nobody waits). A cache hit's stream is its whole answer as
        the token ``seq`` 0, then the answer."""
        query = self.query
        if self.hit is not None:
            hit = self.hit
            text = hit.answer or ""
            yield AnswerToken(tenant=hit.tenant, request_id=hit.request_id, seq=0, text=text)
            yield Answer.of(hit, query=query)
            return
        if self._reopened is not None:
            async for item in self._reopened:
                yield item
            return
        if self._queue is not None:
            async for item in live(self._queue, until, query, TokenOrder()):
                yield item

    async def final(
        self,
        until: float,
        *,
        left: Callable[[], Awaitable[bool]] | None = None,
        poll_s: float = DISCONNECT_POLL_S,
    ) -> Answer | None:
        """The final answer, or ``None`` when the monotonic time ``until`` comes first.

        ``left``: asked every ``poll_s`` seconds whether the client disconnected; when it has,
        the request is cancelled (its LLM slot freed, :mod:`workers.cancel`).

        Raises:
            ClientLeftError: ``left()`` said the client had gone.
        """
        if self.hit is not None:
            return Answer.of(self.hit, query=self.query)
        if self._queue is None or self._reopened is not None:
            async for item in self.items(until):
                if isinstance(item, Answer):
                    return item
            return None
        while True:
            step = until if left is None else min(until, time.monotonic() + poll_s)
            reply = await next_reply(self._queue, step)
            if isinstance(reply, QueryResponse):
                return Answer.of(reply, query=self.query)
            if reply is not None:
                continue  # tokens, progress: the final answer only
            if time.monotonic() >= until:
                return None
            if left is not None and await left():
                self.svc.cancel(self.request_id)  # nobody waits: free the pools' work on it
                raise ClientLeftError(self.request_id)

    async def outcome(
        self,
        until: float | None,
        *,
        left: Callable[[], Awaitable[bool]] | None = None,
    ) -> Answer:
        """The answer a sync or async ``POST /v1/query`` returns, and the handle closed after:
        the final answer by the monotonic time ``until`` (:meth:`final`), else, or at once when
        ``until`` is ``None``, what the query log holds then (:meth:`settled`).

        Raises:
            ClientLeftError: ``left()`` said the client had gone (see :meth:`final`).
        """
        async with self:
            answer = None if until is None else await self.final(until, left=left)
            return answer if answer is not None else await self.settled()

    async def settled(self) -> Answer:
        """What the query log holds of the request now (for the asker's principals), else
        its ``pending`` view."""
        from workers import query_log  # SQL: only the API's exits ask for it

        logged = await asyncio.to_thread(
            query_log.read, self.svc.sessions, self.tenant, self.request_id, self.asker
        )
        return logged or Answer.pending(self.request_id, tenant=self.tenant, query=self.query)


async def live(
    queue: asyncio.Queue[Reply], until: float, query: str, order: TokenOrder
) -> AsyncGenerator[Item]:
    """The replies on ``queue`` until the monotonic time ``until``: each token ``order`` has
    not yet seen, then the :class:`Answer` of the response (``query``: the question asked)."""
    while (reply := await next_reply(queue, until)) is not None:
        if isinstance(reply, AnswerToken):
            if order.fresh(reply):
                yield reply
            continue
        yield Answer.of(reply, query=query)
        return


async def next_reply(queue: asyncio.Queue[Reply], until: float) -> Reply | None:
    """The next reply on ``queue`` before the monotonic time ``until``, else ``None``."""
    remaining = until - time.monotonic()
    if remaining <= 0:
        return None
    try:
        return await asyncio.wait_for(queue.get(), timeout=remaining)
    except TimeoutError:
        return None
