"""API keys: created by ``ragstream keys create``, stored as SHA-256, mapped to one tenant.

A key looks like ``rsk_<32 url-safe base64 chars>`` (192 random bits from :mod:`secrets`).
Requests present it as ``Authorization: Bearer <key>`` (what OpenAI clients send) or
``X-API-Key: <key>``. The tenant of the key scopes the request and every event it causes, and
the key's principals (``user:<id>``/``group:<id>``, or ``*``: every document of the tenant)
decide which of the tenant's documents it reads (``docs/permissions.md``).
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

import redis
import structlog
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.acl import from_column, to_column
from ragstream.db.models import ApiKey, utcnow
from topics.acl import ALL, PrincipalError, normalise

log = structlog.get_logger(__name__)

KEY_PREFIX = "rsk_"
Role = Literal["user", "operator", "cluster-operator"]
#: ``user``: the key's tenant's data; ``operator``: also its tenant's operations (its dead
#: letters, their replay, its lag on the console's Operations page and ``/v1/ops/...``);
#: ``cluster-operator``: the whole deployment's operations, every tenant's (processes, pools,
#: every dead letter). Keys are created only by ``ragstream keys create`` (no HTTP route).
ROLES: tuple[Role, ...] = ("user", "operator", "cluster-operator")


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the key's row id, its tenant, its rate limit (per minute, or None
    for the deployment default), its role (:data:`ROLES`) and the principals it reads as
    (``None``: every document of the tenant, a ``*`` key; ``()``: only documents without
    readers)."""

    key_id: int
    tenant: str
    rate_per_minute: int | None = None
    role: Role = "user"
    principals: tuple[str, ...] | None = ()

    @property
    def is_operator(self) -> bool:
        """True for an ``operator`` or ``cluster-operator`` key."""
        return self.role in ("operator", "cluster-operator")

    @property
    def is_cluster_operator(self) -> bool:
        """True for a ``cluster-operator`` key: operations of every tenant."""
        return self.role == "cluster-operator"


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
    principals: Sequence[str] = (),
) -> tuple[str, int]:
    """Create a key for ``tenant`` with ``role`` reading as ``principals`` (``user:<id>``,
    ``group:<id>``, or ``*`` alone: every document of the tenant; none: only documents
    without readers); return ``(key, id)``. The key is shown once, never stored.

    Raises:
        ValueError: ``role`` is not one of :data:`ROLES`; a principal is neither ``*`` nor
            ``user:<id>``/``group:<id>`` (:class:`topics.acl.PrincipalError`), or ``*`` is
            given with others.
    """
    if role not in ROLES:
        raise ValueError(f"role must be one of {', '.join(ROLES)}, not {role!r}")
    stored = key_principals(principals)
    key = KEY_PREFIX + secrets.token_urlsafe(24)
    with sessions.begin() as session:
        row = ApiKey(
            key_hash=hash_key(key),
            prefix=key[:12],
            tenant=tenant,
            name=name,
            rate_per_minute=rate_per_minute,
            role=role,
            principals=stored,
        )
        session.add(row)
        session.flush()
        return key, row.id


def revoke_key(
    sessions: sessionmaker[Session], key_id: int, client: redis.Redis | None = None
) -> bool:
    """Revoke key ``key_id``; False if there is no such live key. With ``client``, the
    revocation is then published (:func:`api.revocations.publish_revocation`), so every API
    process refuses the key at once; a Redis error there is logged, and the key is refused
    once the processes' cached lookups expire."""
    with sessions.begin() as session:
        row = session.get(ApiKey, key_id)
        if row is None or row.revoked_at is not None:
            return False
        row.revoked_at = utcnow()
    if client is not None:
        from api.revocations import publish_revocation

        try:
            publish_revocation(client, key_id)
        except redis.RedisError as exc:
            log.warning("keys.revocation_not_published", key_id=key_id, error=str(exc))
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
        role: Role = row.role if row.role in ROLES else "user"
        return Principal(row.id, row.tenant, row.rate_per_minute, role, reads_as(row.principals))


#: The header with which a request asks as fewer principals than its key holds (a service with
#: a tenant-wide key answering for one of its users): comma-separated principals.
ACT_AS_HEADER = "X-Ragstream-Act-As"


class ActAsError(PermissionError):
    """A request asked to act as a principal its key does not hold."""


def act_as(who: Principal, header: str) -> Principal:
    """``who`` narrowed to the principals of an :data:`ACT_AS_HEADER` value.

    Narrowing only: a tenant-wide key may act as any principals, a limited key only as a
    subset of its own; so the header needs no signature (it can never widen what the key
    reads, and an HMAC made with the key's secret would prove only what the bearer key
    proves already). An empty value acts as no principal (documents without readers only).

    Raises:
        PrincipalError: a value is not a principal.
        ActAsError: the key does not hold one of them.
    """
    asked = normalise(p for p in header.split(",") if p.strip())
    if who.principals is not None:
        missing = sorted(set(asked) - set(who.principals))
        if missing:
            raise ActAsError(f"the API key does not hold {missing[0]!r}")
    return replace(who, principals=asked)


def key_principals(principals: Sequence[str]) -> str | None:
    """The stored form of a key's principals (:mod:`ragstream.db.acl`; ``",*,"`` for ``*``).

    Raises:
        PrincipalError: as :func:`topics.acl.normalise`, or ``*`` with other principals.
    """
    given = {p.strip() for p in principals}
    if ALL in given:
        if len(given) > 1:
            raise PrincipalError(f"{ALL!r} reads every document: give it alone")
        return to_column([ALL])
    return to_column(normalise(given)) if given else None


def reads_as(stored: str | None) -> tuple[str, ...] | None:
    """The principals a key reads as, from its stored form: ``None`` for a ``*`` key (no
    filter), ``()`` for a key without principals."""
    values = from_column(stored) or ()
    return None if ALL in values else values
