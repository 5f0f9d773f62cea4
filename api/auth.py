"""API keys: created by ``ragstream keys create``, stored as SHA-256, mapped to one tenant.

A key looks like ``rsk_<32 url-safe base64 chars>`` (192 random bits from :mod:`secrets`).
Requests present it as ``Authorization: Bearer <key>`` (what OpenAI clients send) or
``X-API-Key: <key>``. The tenant of the key scopes the request and every event it causes.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.models import ApiKey, utcnow

KEY_PREFIX = "rsk_"
Role = Literal["user", "operator"]
#: ``user``: the key's tenant's data; ``operator``: also the deployment's operations (the
#: console's Operations page and ``/v1/ops/...``).
ROLES: tuple[Role, ...] = ("user", "operator")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's row id, its tenant, its rate limit (per minute, or None
    for the deployment default) and its role (:data:`ROLES`)."""

    key_id: int
    tenant: str
    rate_per_minute: int | None = None
    role: Role = "user"

    @property
    def is_operator(self) -> bool:
        """True for an ``operator`` key."""
        return self.role == "operator"


def hash_key(key: str) -> str:
    """Hex SHA-256 of ``key`` (the stored form)."""
    return hashlib.sha256(key.encode()).hexdigest()


def create_key(
    sessions: sessionmaker[Session],
    tenant: str,
    *,
    name: str = "",
    rate_per_minute: int | None = None,
    role: Role = "user",
) -> tuple[str, int]:
    """Create a key for ``tenant`` with ``role``; return ``(key, id)``. The key is shown once,
    never stored.

    Raises:
        ValueError: ``role`` is not one of :data:`ROLES`.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    key = KEY_PREFIX + secrets.token_urlsafe(24)
    with sessions.begin() as session:
        row = ApiKey(
            key_hash=hash_key(key),
            prefix=key[:12],
            tenant=tenant,
            name=name,
            rate_per_minute=rate_per_minute,
            role=role,
        )
        session.add(row)
        session.flush()
        return key, row.id


def revoke_key(sessions: sessionmaker[Session], key_id: int) -> bool:
    """Revoke key ``key_id``; False if there is no such live key."""
    with sessions.begin() as session:
        row = session.get(ApiKey, key_id)
        if row is None or row.revoked_at is not None:
            return False
        row.revoked_at = utcnow()
        return True


def list_keys(sessions: sessionmaker[Session], tenant: str | None = None) -> list[ApiKey]:
    """Every key (or a tenant's), newest first; hashes only."""
    with sessions() as session:
        stmt = select(ApiKey).order_by(ApiKey.id.desc())
        if tenant is not None:
            stmt = stmt.where(ApiKey.tenant == tenant)
        return list(session.scalars(stmt))


def lookup(sessions: sessionmaker[Session], key: str) -> Principal | None:
    """The principal of a live ``key``, or ``None`` (unknown or revoked)."""
    if not key.startswith(KEY_PREFIX) or len(key) > 128:
        return None
    with sessions() as session:
        row = session.scalars(select(ApiKey).where(ApiKey.key_hash == hash_key(key))).first()
        if row is None or row.revoked_at is not None:
            return None
        role: Role = "operator" if row.role == "operator" else "user"
        return Principal(row.id, row.tenant, row.rate_per_minute, role)
