"""Webhook endpoints a tenant registers per event type: register, page, get, delete, targets.

Every function is scoped to one tenant: a tenant never sees, matches or deletes another
tenant's endpoints (an endpoint of another tenant is reported as missing, not as forbidden).
A URL is checked by the SSRF guard at registration (after DNS resolution, with the
deployment's allowlist) and again at every delivery attempt, since DNS answers change.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.models import WebhookEndpoint, as_utc
from ragstream.errors import PermanentError
from workers.webhooks.events import EVENT_TYPES, WILDCARD
from workers.webhooks.signing import new_secret
from workers.webhooks.ssrf import Network, SsrfBlockedError, check_url

MAX_URL_CHARS = 2048
MAX_DESCRIPTION_CHARS = 256


class EndpointError(PermanentError):
    """A registration was refused: bad URL, refused address, unknown event type."""

    code = "INVALID_REQUEST"


class EndpointLimitError(EndpointError):
    """The tenant already has the maximum number of endpoints."""

    code = "CONFLICT"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A registered endpoint. ``event_types`` is sorted; ``("*",)`` means every event type."""

    id: str
    tenant: str
    url: str
    event_types: tuple[str, ...]
    description: str
    created_at: dt.datetime
    #: The signing key, set only on the result of :func:`register` (it is shown once).
    secret: str | None = None

    def wants(self, event_type: str) -> bool:
        """True if this endpoint subscribes to ``event_type``."""
        return WILDCARD in self.event_types or event_type in self.event_types


def normalise_event_types(event_types: Iterable[str]) -> tuple[str, ...]:
    """De-duplicated, sorted event types; ``("*",)`` if ``*`` is among them.

    Raises:
        EndpointError: empty, or a type outside ``query.completed``, ``ingest.job.completed``
            and ``*``.
    """
    given = set(event_types)
    if not given:
        raise EndpointError("event_types must name at least one event type")
    unknown = sorted(given - {*EVENT_TYPES, WILDCARD})
    if unknown:
        allowed = ", ".join([*EVENT_TYPES, WILDCARD])
        raise EndpointError(f"unknown event type(s) {unknown}; allowed: {allowed}")
    return (WILDCARD,) if WILDCARD in given else tuple(sorted(given))


def _check_text(name: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise EndpointError(f"{name} is longer than {limit} characters")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in value):
        raise EndpointError(f"{name} must not contain control characters")


def _view(row: WebhookEndpoint) -> Endpoint:
    return Endpoint(
        row.id, row.tenant, row.url, tuple(row.event_types), row.description, as_utc(row.created_at)
    )


def register(
    sessions: sessionmaker[Session],
    tenant: str,
    url: str,
    event_types: Iterable[str],
    *,
    allow: Sequence[Network],
    description: str = "",
    max_per_tenant: int = 20,
) -> Endpoint:
    """Register ``url`` for ``event_types`` of ``tenant``; return the new endpoint with its
    signing key (``secret``: a fresh ``whsec_`` key, :mod:`workers.webhooks.signing`).

    The URL's host is resolved now and every address checked (see :mod:`workers.webhooks.ssrf`).

    Raises:
        EndpointError: URL too long, with control characters, not http(s), unresolvable, or
            resolving to a refused address; unknown event types; description too long.
        EndpointLimitError: the tenant already has ``max_per_tenant`` endpoints.
    """
    kinds = normalise_event_types(event_types)
    _check_text("url", url, MAX_URL_CHARS)
    _check_text("description", description, MAX_DESCRIPTION_CHARS)
    try:
        check_url(url, allow)
    except SsrfBlockedError as exc:
        raise EndpointError(f"webhook URL refused: {exc}") from exc
    with sessions.begin() as session:
        count = session.scalar(
            select(func.count())
            .select_from(WebhookEndpoint)
            .where(WebhookEndpoint.tenant == tenant)
        )
        if (count or 0) >= max_per_tenant:
            raise EndpointLimitError(
                f"tenant already has {count} webhook endpoints (limit {max_per_tenant}); "
                "delete one first"
            )
        row = WebhookEndpoint(
            id=str(uuid.uuid4()),
            tenant=tenant,
            url=url,
            event_types=list(kinds),
            description=description,
            secret=new_secret(),
        )
        session.add(row)
        session.flush()
        return dataclasses.replace(_view(row), secret=row.secret)


def page_endpoints(
    sessions: sessionmaker[Session],
    tenant: str,
    *,
    limit: int,
    after: tuple[dt.datetime, str] | None = None,
) -> list[Endpoint]:
    """Up to ``limit`` of the tenant's enabled endpoints, oldest first by ``(created_at, id)``,
    those after the sort key ``after`` of the previous page's last endpoint (keyset
    pagination, as :mod:`api.pages` describes)."""
    stmt = (
        select(WebhookEndpoint)
        .where(WebhookEndpoint.tenant == tenant, WebhookEndpoint.disabled_at.is_(None))
        .order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)
        .limit(limit)
    )
    if after is not None:
        at, last = after
        created, key = WebhookEndpoint.created_at, WebhookEndpoint.id
        stmt = stmt.where(or_(created > at, and_(created == at, key > last)))
    with sessions() as session:
        return [_view(r) for r in session.scalars(stmt)]


def get_endpoint(sessions: sessionmaker[Session], tenant: str, endpoint_id: str) -> Endpoint | None:
    """The tenant's endpoint ``endpoint_id``, or ``None`` (unknown, or another tenant's)."""
    with sessions() as session:
        row = session.get(WebhookEndpoint, endpoint_id)
        if row is None or row.tenant != tenant or row.disabled_at is not None:
            return None
        return _view(row)


def delete_endpoint(sessions: sessionmaker[Session], tenant: str, endpoint_id: str) -> bool:
    """Delete the tenant's endpoint; False if there is none (or it is another tenant's).

    No new deliveries are created for it, and those still pending fail at their next attempt
    (its signing key is gone with it).
    """
    with sessions.begin() as session:
        row = session.get(WebhookEndpoint, endpoint_id)
        if row is None or row.tenant != tenant:
            return False
        session.delete(row)
        return True


def _enabled(session: Session, tenant: str) -> list[WebhookEndpoint]:
    stmt = (
        select(WebhookEndpoint)
        .where(WebhookEndpoint.tenant == tenant, WebhookEndpoint.disabled_at.is_(None))
        .order_by(WebhookEndpoint.created_at, WebhookEndpoint.id)
    )
    return list(session.scalars(stmt))


def targets_in(session: Session, tenant: str, event_type: str) -> list[Endpoint]:
    """:func:`targets` inside an open session (so callers can write in the same transaction)."""
    return [e for e in map(_view, _enabled(session, tenant)) if e.wants(event_type)]


def targets(sessions: sessionmaker[Session], tenant: str, event_type: str) -> list[Endpoint]:
    """The tenant's enabled endpoints subscribed to ``event_type`` (directly or with ``*``)."""
    with sessions() as session:
        return targets_in(session, tenant, event_type)
