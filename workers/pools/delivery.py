"""The delivery pool: ``rag.responses`` in; the SQL query log, the answer cache and the webhooks
out.

Exactly-once out: the first final response of a ``request_id`` is recorded; a replayed or
duplicate response (at-least-once upstream) finds the row final and changes nothing. In the
same SQL transaction, each response that became final gets one ``query.completed`` webhook
delivery per target (its ``callback_url`` and the tenant's endpoints registered for the event),
with a webhook id derived from (tenant, request id, URL) - so a replay creates nothing and
schedules nothing. After the commit a Celery task is sent per new delivery; if the broker is
down they stay ``pending`` and the Celery workers' sweeper schedules them later (see
:mod:`workers.webhooks.outbox`). The SSRF guard runs at delivery time, on every attempt.

This pool is the answer cache's one writer: in the same transaction, each response that became final
and carries ``cache_keys`` (put there by the stage that answered, which knew the request's
parameters and the index version it answered against) is stored at those keys
(:meth:`workers.caches.AnswerCache.store`). A replay became final before, so it writes nothing;
a cache hit carries no keys; shadow traffic never reaches this pool. Why here and not in the
answering pools: ``docs/answers.md`` (one writer of the answer cache).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from sqlalchemy.orm import Session, sessionmaker

from ragstream.settings import PoolSettings, Settings
from topics.registry import RESPONSES
from topics.responses import QueryResponse
from workers import query_log
from workers.caches import AnswerCache
from workers.metrics import count_answers, init_answer_labels
from workers.registry import register_pool
from workers.runtime.build import pool_handler
from workers.runtime.handler import Handler, Outcome
from workers.webhooks.outbox import Scheduled, add_query_deliveries


class Scheduler(Protocol):
    """Sends the Celery task of new deliveries (``workers.webhooks.outbox.CeleryScheduler``)."""

    def schedule(self, deliveries: Sequence[Scheduled]) -> list[Scheduled]:
        """Schedule ``deliveries``; return those sent (the rest are left to the sweeper)."""
        ...


def record_responses(
    sessions: sessionmaker[Session],
    responses: Sequence[QueryResponse],
    cache: AnswerCache | None = None,
) -> tuple[list[QueryResponse], list[Scheduled]]:
    """Record the batch in one transaction: query log rows and their webhook deliveries; the
    responses that became final go into ``cache`` before the commit, so a query log row that
    says ``answered`` means its answer is cached (a commit that fails leaves the batch to be
    retried, which stores the same keys again).

    Returns ``(responses that became final, deliveries created)``; both are empty for a batch
    of replays. Nothing is scheduled here (see :func:`delivery_handler`). The responses that
    became final are counted in ``ragstream_answers_total`` once the transaction committed.
    """
    with sessions.begin() as session:
        written = query_log.record_final(session, responses)
        questions = query_log.questions(session, [r.request_id for r in written])
        created = add_query_deliveries(session, written, questions)
        if cache is not None:
            for response in written:
                cache.store(response)
    count_answers(written)
    return written, created


def delivery_handler(
    sessions: sessionmaker[Session],
    *,
    pool: PoolSettings,
    scheduler: Scheduler,
    group: str | None = None,
    cache: AnswerCache | None = None,
) -> Handler[QueryResponse]:
    """The delivery pool's handler: one SQL transaction per batch, then the answer cache (the
    responses that became final; ``cache=None``: none is cached) and one Celery task per new
    webhook delivery; no output events."""
    init_answer_labels()

    def fn(events: list[QueryResponse]) -> Sequence[Outcome]:
        _, created = record_responses(sessions, events, cache)
        if created:
            scheduler.schedule(created)
        return []

    return pool_handler("delivery", input=RESPONSES, outputs=(), fn=fn, pool=pool, group=group)


def run_delivery_pool(settings: Settings) -> Callable[[], None]:
    """Pool factory of ``ragstream worker delivery``."""
    import redis

    from ragstream.db.engine import make_engine, make_session_factory
    from workers.pools.components import build_answer_cache
    from workers.runtime.build import build_runner, pool_group, until_signalled
    from workers.webhooks.outbox import CeleryScheduler

    sessions = make_session_factory(make_engine(settings.database_url))
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    scheduler = CeleryScheduler(client, marker_ttl_s=settings.webhooks.schedule_marker_ttl_s)
    handler = delivery_handler(
        sessions,
        pool=settings.pools.delivery,
        scheduler=scheduler,
        group=pool_group(settings, "delivery"),
        cache=build_answer_cache(settings, sessions),
    )
    runner = build_runner(handler, settings, settings.pools.delivery)
    return until_signalled(runner, cleanup=client.close)


register_pool("delivery", run_delivery_pool)
