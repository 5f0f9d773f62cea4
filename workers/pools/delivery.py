"""The delivery pool: ``rag.responses`` in; the SQL query log written idempotently.

Exactly-once out: the first final response of a ``request_id`` is recorded; a replayed or
duplicate response (at-least-once upstream) finds the row final and changes nothing. Webhook
delivery and HTTP waiters build on this log (see the API issue).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.models import QueryLog, utcnow
from ragstream.settings import PoolSettings, Settings
from topics.registry import RESPONSES
from topics.responses import QueryResponse
from workers.registry import register_pool
from workers.runtime.build import batch_policy, retry_policy
from workers.runtime.handler import Handler, Outcome

FINAL = ("answered", "failed")


def record_responses(sessions: sessionmaker[Session], responses: Sequence[QueryResponse]) -> int:
    """Write each first final response into the query log; return how many rows changed."""
    changed = 0
    with sessions.begin() as session:
        ids = list({r.request_id for r in responses})
        rows = {
            row.request_id: row
            for row in session.scalars(select(QueryLog).where(QueryLog.request_id.in_(ids)))
        }
        for r in responses:
            row = rows.get(r.request_id)
            if row is None:
                row = QueryLog(request_id=r.request_id, tenant=r.tenant, query="")
                session.add(row)
                rows[r.request_id] = row
            elif row.status in FINAL:
                continue  # a replay or a duplicate: the first answer stays
            row.status = "answered" if r.status == "answered" else "failed"
            row.answer = r.answer or None
            row.citations = [c.model_dump(mode="json") for c in r.citations]
            row.trace = {"stages": [t.model_dump(mode="json") for t in r.trace], "tier": r.tier}
            row.error_code = r.error.code.value if r.error else None
            row.error_message = r.error.message if r.error else None
            row.completed_at = utcnow()
            changed += 1
    return changed


def delivery_handler(
    sessions: sessionmaker[Session], *, pool: PoolSettings, group: str = "ragstream-delivery"
) -> Handler[QueryResponse]:
    """The delivery pool's handler: one SQL transaction per batch, no output events."""

    def fn(events: list[QueryResponse]) -> Sequence[Outcome]:
        record_responses(sessions, events)
        return []

    return Handler(
        name="delivery",
        input=RESPONSES,
        group=group,
        outputs=(),
        fn=fn,
        batch=batch_policy(pool),
        retry=retry_policy(pool),
    )


def run_delivery_pool(settings: Settings) -> Callable[[], None]:
    """Pool factory of ``ragstream worker delivery``."""
    from ragstream.db.engine import make_engine, make_session_factory
    from workers.runtime.build import build_runner, until_signalled

    sessions = make_session_factory(make_engine(settings.database_url))
    handler = delivery_handler(
        sessions,
        pool=settings.pools.delivery,
        group=settings.kafka.topic_prefix + "ragstream-delivery",
    )
    runner = build_runner(handler, settings, settings.pools.delivery)
    return until_signalled(runner)


register_pool("delivery", run_delivery_pool)
