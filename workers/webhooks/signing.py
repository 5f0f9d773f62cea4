"""Webhook signing keys: one per registered endpoint, one per tenant for ``callback_url``s.

Each key is a Standard Webhooks secret, ``whsec_`` + base64 of 32 random bytes (the spec asks
for 24 to 64), shown once: in the registration response, or the response of a rotation. A
receiver holds only its own endpoint's key, so no tenant can forge another tenant's
callbacks (issue 15, item 10: one deployment-wide key let every receiver do so).

Rotation makes a new key current and keeps the old one signing until the overlap window
(``webhooks.secret_overlap_s``, 24 h by default) ends: meanwhile every delivery carries two
``v1,`` signatures, space-separated in ``webhook-signature`` as the spec allows, so a receiver
can switch keys without losing a delivery. A second rotation within the window drops the
oldest key.

Deliveries to a query's or job's ``callback_url`` have no endpoint: they are signed with the
tenant's key, created on first use (by ``POST /v1/webhooks/secret``, its rotation, or the first
such delivery) and rotated the same way. One key per tenant rather than per URL: callback URLs
are given per request and can be many, while a tenant's receivers are its own to trust.
Keys are stored in SQL in the clear: an HMAC key must be readable to sign with it.
"""

from __future__ import annotations

import base64
import datetime as dt
import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker
from standardwebhooks.webhooks import Webhook

from ragstream import __version__
from ragstream.db.models import WebhookEndpoint, WebhookTenantSecret, as_utc, utcnow

PREFIX = "whsec_"
#: The ``User-Agent`` of every delivery.
USER_AGENT = f"ragstream-webhooks/{__version__}"
KEY_BYTES = 32


def new_secret() -> str:
    """A fresh Standard Webhooks secret: ``whsec_`` + base64 of 32 random bytes."""
    return PREFIX + base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")


@dataclass(frozen=True, slots=True)
class Rotated:
    """The new key (shown once) and until when the previous one still signs (UTC)."""

    secret: str
    previous_valid_until: dt.datetime | None


def keys_of(row: WebhookEndpoint | WebhookTenantSecret, now: dt.datetime) -> list[str]:
    """The keys that sign now: the current one, then the previous one within its window."""
    keys = [row.secret]
    until = row.previous_secret_until
    if row.previous_secret and until is not None and as_utc(until) > now:
        keys.append(row.previous_secret)
    return keys


def _rotate(row: WebhookEndpoint | WebhookTenantSecret, overlap_s: float) -> Rotated:
    now = utcnow()
    row.previous_secret = row.secret
    row.previous_secret_until = now + dt.timedelta(seconds=overlap_s)
    row.secret = new_secret()
    return Rotated(row.secret, row.previous_secret_until)


def rotate_endpoint_secret(
    sessions: sessionmaker[Session], tenant: str, endpoint_id: str, overlap_s: float
) -> Rotated | None:
    """Give the tenant's endpoint a new key; the old one signs for ``overlap_s`` seconds more.

    Returns ``None`` if the endpoint is unknown or another tenant's.
    """
    with sessions.begin() as session:
        row = session.get(WebhookEndpoint, endpoint_id, with_for_update=True)
        if row is None or row.tenant != tenant or row.disabled_at is not None:
            return None
        return _rotate(row, overlap_s)


def _tenant_row(session: Session, tenant: str) -> WebhookTenantSecret | None:
    return session.get(WebhookTenantSecret, tenant, with_for_update=True)


def create_tenant_secret(sessions: sessionmaker[Session], tenant: str) -> str | None:
    """Create the tenant's ``callback_url`` key and return it; ``None`` if it exists already
    (it was shown when created; :func:`rotate_tenant_secret` makes a new one)."""
    try:
        with sessions.begin() as session:
            if _tenant_row(session, tenant) is not None:
                return None
            row = WebhookTenantSecret(tenant=tenant, secret=new_secret())
            session.add(row)
            return row.secret
    except IntegrityError:  # created concurrently
        return None


def rotate_tenant_secret(sessions: sessionmaker[Session], tenant: str, overlap_s: float) -> Rotated:
    """A new ``callback_url`` key for the tenant (created if it had none); the old one signs
    for ``overlap_s`` seconds more."""
    created = create_tenant_secret(sessions, tenant)
    if created is not None:
        return Rotated(created, None)
    with sessions.begin() as session:
        row = _tenant_row(session, tenant)
        assert row is not None  # created above or before, never deleted
        return _rotate(row, overlap_s)


def signing_keys(
    sessions: sessionmaker[Session], tenant: str, endpoint_id: str | None
) -> list[str] | None:
    """The keys that sign a delivery now: its endpoint's, or the tenant's ``callback_url`` key
    (created if missing) when ``endpoint_id`` is ``None``. ``None``: the endpoint is gone."""
    now = utcnow()
    if endpoint_id is not None:
        with sessions() as session:
            row = session.get(WebhookEndpoint, endpoint_id)
            if row is None or row.tenant != tenant or row.disabled_at is not None:
                return None
            return keys_of(row, now)
    create_tenant_secret(sessions, tenant)
    with sessions() as session:
        tenant_row = session.get(WebhookTenantSecret, tenant)
        assert tenant_row is not None
        return keys_of(tenant_row, now)


def sign_headers(
    keys: Sequence[str], webhook_id: str, body: str, now: dt.datetime
) -> dict[str, str]:
    """Standard Webhooks headers for ``body`` sent at ``now``, one ``v1,`` signature per key
    (space-separated), so a receiver holding any one of them verifies the delivery; and
    ``user-agent: ragstream-webhooks/<version>`` (:data:`USER_AGENT`), so a receiver's logs
    and firewall can tell the deliveries apart."""
    signature = " ".join(Webhook(key).sign(webhook_id, now, body) for key in keys)
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
        "content-type": "application/json",
        "user-agent": USER_AGENT,
    }
