"""Webhook delivery: one logical delivery per ``webhook_id``, every attempt recorded in SQL.

A delivery is a POST of the JSON payload with Standard Webhooks headers (``webhook-id``,
``webhook-timestamp``, ``webhook-signature``: HMAC-SHA256 via the ``standardwebhooks``
library, with the keys of the delivery's endpoint or tenant, :mod:`workers.webhooks.signing`).
Each attempt connects only to the addresses the SSRF guard checked and has a total deadline of
``timeout_s`` (:mod:`workers.webhooks.transport`). Timeouts, connection errors, 429 and 5xx are
retried with exponential back-off; after ``max_attempts`` the delivery is ``failed``.
Redirects are followed by hand (at most 3), each target checked by the SSRF guard again. The
stable ``webhook_id`` lets receivers de-duplicate, and :func:`enqueue` never creates a second
delivery for the same id.
:func:`get_delivery` is the read side (status and every attempt) behind the HTTP API.
"""

from __future__ import annotations

import datetime as dt
import json
import ssl
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin

import httpx
from opentelemetry.trace import SpanKind, Status, StatusCode
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from ragstream import tracing
from ragstream.db.models import WebhookAttempt, WebhookDelivery, as_utc, utcnow
from ragstream.errors import transient_http_status
from workers.webhooks.signing import sign_headers, signing_keys
from workers.webhooks.ssrf import Network, SsrfBlockedError, check_url
from workers.webhooks.transport import pinned_client

MAX_REDIRECTS = 3


@dataclass(frozen=True, slots=True)
class AttemptResult:
    """One attempt: HTTP status (``None`` on a transport error), error text, retryable?"""

    status_code: int | None
    error: str | None
    retryable: bool
    latency_ms: float

    @property
    def ok(self) -> bool:
        """A 2xx answer."""
        return self.status_code is not None and 200 <= self.status_code < 300


def enqueue(
    sessions: sessionmaker[Session],
    *,
    webhook_id: str,
    tenant: str,
    event_type: str,
    url: str,
    payload: dict[str, Any],
    endpoint_id: str | None = None,
) -> int | None:
    """Record a pending delivery; return its id, or ``None`` if ``webhook_id`` exists already.

    ``endpoint_id``: the registered endpoint it goes to (``None``: a ``callback_url``)."""
    try:
        with sessions.begin() as session:
            row = WebhookDelivery(
                webhook_id=webhook_id,
                tenant=tenant,
                event_type=event_type,
                url=url,
                endpoint_id=endpoint_id,
                payload=payload,
            )
            session.add(row)
            session.flush()
            return row.id
    except IntegrityError:
        return None


def attempt(
    url: str,
    headers: dict[str, str],
    body: str,
    allow: Sequence[Network],
    *,
    timeout_s: float,
    ssl_context: ssl.SSLContext | None = None,
) -> AttemptResult:
    """POST once, following up to 3 redirects, each target SSRF-checked after resolution and
    connected to at a checked address only (:mod:`workers.webhooks.transport`); the whole
    attempt (connects, sends, reading every response) takes at most ``timeout_s`` seconds.

    Traced as one client span (``webhook POST``) whose ``traceparent`` the request carries, so
    a receiver can continue the trace (the signature covers the body only)."""
    host = _host_of(url)
    with tracing.span(
        "webhook POST",
        kind=SpanKind.CLIENT,
        attributes={"http.request.method": "POST", "server.address": host},
    ) as span:
        traced = dict(headers)
        tracing.inject_dict(traced)
        result = _attempt(url, traced, body, allow, timeout_s=timeout_s, ssl_context=ssl_context)
        if result.status_code is not None:
            span.set_attribute("http.response.status_code", result.status_code)
        if result.error is not None:
            span.set_status(Status(StatusCode.ERROR, result.error))
        return result


def _host_of(url: str) -> str:
    try:
        return httpx.URL(url).host
    except (httpx.InvalidURL, ValueError):
        return ""


def _attempt(
    url: str,
    headers: dict[str, str],
    body: str,
    allow: Sequence[Network],
    *,
    timeout_s: float,
    ssl_context: ssl.SSLContext | None = None,
) -> AttemptResult:
    started = time.perf_counter()
    target = url
    client, backend = pinned_client(timeout_s, ssl_context)
    try:
        for _ in range(MAX_REDIRECTS + 1):
            addresses = check_url(target, allow)
            backend.pin(httpx.URL(target).raw_host.decode("ascii"), addresses)
            response = client.post(target, content=body, headers=headers)
            if response.is_redirect and "location" in response.headers:
                target = urljoin(target, response.headers["location"])
                continue
            code = response.status_code
            ms = (time.perf_counter() - started) * 1000
            retry = transient_http_status(code)
            error = None if 200 <= code < 300 else f"HTTP {code}"
            return AttemptResult(code, error, retry, ms)
        return AttemptResult(
            None, "too many redirects", False, (time.perf_counter() - started) * 1000
        )
    except SsrfBlockedError as exc:
        return AttemptResult(None, str(exc), False, (time.perf_counter() - started) * 1000)
    except (httpx.InvalidURL, ValueError) as exc:  # a URL httpx cannot send: never will
        ms = (time.perf_counter() - started) * 1000
        return AttemptResult(None, f"invalid webhook URL: {exc}", False, ms)
    except httpx.HTTPError as exc:
        ms = (time.perf_counter() - started) * 1000
        return AttemptResult(None, f"{type(exc).__name__}: {exc}", True, ms)
    finally:
        client.close()


def run_attempt(
    sessions: sessionmaker[Session],
    delivery_id: int,
    *,
    allow: Sequence[Network],
    max_attempts: int,
    timeout_s: float,
    ssl_context: ssl.SSLContext | None = None,
) -> tuple[str, AttemptResult | None]:
    """Make the next attempt of a delivery and record it; the attempt takes at most
    ``timeout_s`` seconds in all (``ssl_context``: TLS settings, default certifi's CAs).

    It is signed with the keys of its endpoint, or of its tenant for a ``callback_url``
    (:mod:`workers.webhooks.signing`); a delivery whose endpoint was deleted fails at once.

    Returns ``(status, result)``: ``succeeded``, ``failed``, or ``retry`` (attempt again later).
    A delivery already final is left alone (``(status, None)``).
    """
    with sessions() as session:
        row = session.get(WebhookDelivery, delivery_id)
        if row is None:
            return "failed", None
        if row.status in ("succeeded", "failed"):
            return row.status, None
        webhook_id, url, payload = row.webhook_id, row.url, row.payload
        tenant, endpoint_id = row.tenant, row.endpoint_id
        number = row.attempt_count + 1
    keys = signing_keys(sessions, tenant, endpoint_id)
    if keys is None:  # the endpoint was deleted: its receiver is no longer to be called
        result = AttemptResult(None, "webhook endpoint deleted", False, 0.0)
    else:
        body = json.dumps(payload, separators=(",", ":"), sort_keys=True)
        headers = sign_headers(keys, webhook_id, body, dt.datetime.now(dt.UTC))
        result = attempt(url, headers, body, allow, timeout_s=timeout_s, ssl_context=ssl_context)
    status = "succeeded" if result.ok else ("retry" if result.retryable else "failed")
    if status == "retry" and number >= max_attempts:
        status = "failed"
    with sessions.begin() as session:
        row = session.scalars(
            select(WebhookDelivery).where(WebhookDelivery.id == delivery_id).with_for_update()
        ).one()
        row.attempt_count = number
        session.add(
            WebhookAttempt(
                delivery_id=delivery_id,
                attempt=number,
                status_code=result.status_code,
                error=result.error,
                latency_ms=round(result.latency_ms, 2),
            )
        )
        if status != "retry":
            row.status = status
            row.finished_at = utcnow()
    return status, result


def delivery_url(sessions: sessionmaker[Session], delivery_id: int) -> str | None:
    """The URL a pending delivery posts to; ``None`` when it is unknown or final already."""
    with sessions() as session:
        row = session.get(WebhookDelivery, delivery_id)
        if row is None or row.status in ("succeeded", "failed"):
            return None
        return row.url


def attempt_count(sessions: sessionmaker[Session], delivery_id: int) -> int | None:
    """Attempts made so far for delivery ``delivery_id`` (``None``: no such delivery)."""
    with sessions() as session:
        row = session.get(WebhookDelivery, delivery_id)
        return None if row is None else row.attempt_count


@dataclass(frozen=True, slots=True)
class AttemptView:
    """One recorded attempt: number (from 1), HTTP status (None on a transport error),
    error text, latency in ms and when it was made (UTC)."""

    attempt: int
    status_code: int | None
    error: str | None
    latency_ms: float | None
    attempted_at: dt.datetime


@dataclass(frozen=True, slots=True)
class DeliveryView:
    """A delivery with its attempts in order; ``status`` is pending, succeeded or failed."""

    webhook_id: str
    tenant: str
    event_type: str
    url: str
    status: str
    attempt_count: int
    created_at: dt.datetime
    finished_at: dt.datetime | None
    attempts: tuple[AttemptView, ...]


def get_delivery(
    sessions: sessionmaker[Session], tenant: str, webhook_id: str
) -> DeliveryView | None:
    """The tenant's delivery ``webhook_id`` with every attempt, or ``None`` (unknown, or
    another tenant's)."""
    with sessions() as session:
        row = session.scalars(
            select(WebhookDelivery).where(
                WebhookDelivery.webhook_id == webhook_id, WebhookDelivery.tenant == tenant
            )
        ).first()
        if row is None:
            return None
        attempts = session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id == row.id)
            .order_by(WebhookAttempt.attempt, WebhookAttempt.id)
        ).all()
        return DeliveryView(
            row.webhook_id,
            row.tenant,
            row.event_type,
            row.url,
            row.status,
            row.attempt_count,
            as_utc(row.created_at),
            as_utc(row.finished_at) if row.finished_at else None,
            tuple(
                AttemptView(a.attempt, a.status_code, a.error, a.latency_ms, as_utc(a.attempted_at))
                for a in attempts
            ),
        )
