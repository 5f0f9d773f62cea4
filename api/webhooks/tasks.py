"""Celery task ``ragstream.webhooks.deliver``: one attempt per run, retried with back-off."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from api.webhooks.delivery import run_attempt
from api.webhooks.ssrf import parse_networks
from ragstream.celery_app import celery_app
from ragstream.settings import get_settings


@lru_cache(maxsize=1)
def _sessions() -> sessionmaker[Session]:
    from ragstream.db.engine import make_engine, make_session_factory

    return make_session_factory(make_engine(get_settings().database_url))


def backoff_s(attempt: int, base_s: float, cap_s: float) -> float:
    """Exponential back-off before attempt ``attempt + 1``: ``min(cap, base * 2**(attempt-1))``."""
    return float(min(cap_s, base_s * 2.0 ** max(0, attempt - 1)))


@celery_app.task(name="ragstream.webhooks.deliver", bind=True, acks_late=True, max_retries=None)  # type: ignore[untyped-decorator]
def deliver(self: Any, delivery_id: int) -> str:
    """Attempt delivery ``delivery_id``; schedule the next attempt if it may succeed later."""
    cfg = get_settings().webhooks
    status, _ = run_attempt(
        _sessions(),
        delivery_id,
        secret=cfg.signing_secret,
        allow=parse_networks(cfg.allow_networks),
        max_attempts=cfg.max_attempts,
        timeout_s=cfg.timeout_s,
    )
    if status == "retry":
        attempt_no = self.request.retries + 1
        raise self.retry(countdown=backoff_s(attempt_no, cfg.backoff_base_s, cfg.backoff_cap_s))
    return status
