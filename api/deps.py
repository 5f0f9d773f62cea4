"""Per-process services of the API and the request dependencies built on them.

:class:`Services` is created once per process (``app.state.services``) and holds the SQL
session factory, the Redis client, the Kafka producer and the response router. Routes get the
caller with ``Depends(principal)``: the API key is checked, then the key's rate limit; and the
query service with ``Depends(query_service)``.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import redis
import structlog
from fastapi import Depends, Request, Security
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from api.auth import ACT_AS_HEADER, ActAsError, Principal, act_as, lookup
from api.errors import ApiError
from api.revocations import UNSUBSCRIBED_CACHE_S, RevocationListener
from ragstream.settings import Settings
from topics.acl import PrincipalError

if TYPE_CHECKING:
    from sqlalchemy.orm import Session, sessionmaker

    from api.querying import QueryService

log = structlog.get_logger(__name__)

#: The two ways to present a key, as OpenAPI security schemes (Swagger UI's "Authorize").
#: They only document: :func:`principal` reads the headers itself.
BEARER = HTTPBearer(
    auto_error=False, scheme_name="bearer", description="`Authorization: Bearer <key>`"
)
API_KEY_HEADER = APIKeyHeader(
    name="X-API-Key", auto_error=False, scheme_name="apiKey", description="`X-API-Key: <key>`"
)
RATE_PREFIX = "ragstream:rate:"
KEY_CACHE_S = 30.0
KEY_CACHE_MAX = 10_000


@dataclass
class Services:
    """What the routes share in one API process (built lazily by :func:`api.app.create_app`)."""

    settings: Settings
    sessions: sessionmaker[Session]
    redis: redis.Redis
    extras: dict[str, Any] = field(default_factory=dict)
    _keys: dict[str, tuple[float, Principal | None]] = field(default_factory=dict)
    _revocations: RevocationListener | None = None

    def listen_for_revocations(self) -> None:
        """Start dropping revoked keys from this process's cache as their revocation is
        published (:mod:`api.revocations`); idempotent."""
        if self._revocations is None:
            self._revocations = RevocationListener(
                self.settings.redis.url, self.forget_key, self._keys.clear
            ).start()

    def close(self) -> None:
        """Stop the revocation listener."""
        if self._revocations is not None:
            self._revocations.close()
            self._revocations = None

    def forget_key(self, key_id: int) -> None:
        """Drop the cached lookups of key ``key_id`` (revoked)."""
        for key, (_, found) in list(self._keys.items()):
            if found is not None and found.key_id == key_id:
                self._keys.pop(key, None)

    def authenticate(self, key: str) -> Principal | None:
        """The principal of ``key``, cached for :data:`KEY_CACHE_S` while this process hears
        revocations (:meth:`listen_for_revocations`: a revoked key is refused as soon as its
        revocation arrives), for :data:`api.revocations.UNSUBSCRIBED_CACHE_S` otherwise."""
        now = time.monotonic()
        live = self._revocations is not None and self._revocations.subscribed.is_set()
        trust_s = KEY_CACHE_S if live else UNSUBSCRIBED_CACHE_S
        cached = self._keys.get(key)
        if cached is not None and now - cached[0] < trust_s:
            return cached[1]
        found = lookup(self.sessions, key)
        if len(self._keys) >= KEY_CACHE_MAX:
            self._keys.clear()
        self._keys[key] = (now, found)
        return found


def services(request: Request) -> Services:
    """The process's :class:`Services`."""
    return request.app.state.services  # type: ignore[no-any-return]


def query_service(request: Request) -> QueryService:
    """The process's :class:`~api.querying.QueryService` (a route's ``Depends``, resolved
    before its body runs, or called)."""
    return services(request).extras["queries"]  # type: ignore[no-any-return]


def _presented_key(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip()
    return request.headers.get("x-api-key")


def check_rate(client: redis.Redis, principal: Principal, default_per_minute: int) -> None:
    """Fixed one-minute window per key in Redis (shared by every API process), counted under
    the key's tenant and row id: a key's row id alone is 1 in every new database, so two
    deployments (or two test stacks) sharing one Redis counted each other's requests.

    Raises:
        ApiError: 429 ``RATE_LIMITED`` with ``Retry-After`` (seconds to the next window).
    """
    limit = default_per_minute if principal.rate_per_minute is None else principal.rate_per_minute
    if limit <= 0:
        return
    now = time.time()
    window = int(now // 60)
    key = f"{RATE_PREFIX}{principal.tenant}:{principal.key_id}:{window}"
    try:
        pipe = client.pipeline()
        pipe.incr(key)
        pipe.expire(key, 120)
        count = int(pipe.execute()[0])
    except redis.RedisError as exc:  # the limiter is advisory: fail open, loudly
        log.warning("rate_limit.redis_error", error=str(exc))
        return
    if count > limit:
        retry_after = max(1, int((window + 1) * 60 - now) + 1)
        raise ApiError(
            429,
            "RATE_LIMITED",
            f"rate limit of {limit} requests per minute exceeded for this API key",
            headers={"Retry-After": str(retry_after)},
        )


async def principal(
    request: Request,
    _bearer: HTTPAuthorizationCredentials | None = Security(BEARER),
    _header: str | None = Security(API_KEY_HEADER),
) -> Principal:
    """The authenticated caller, after its rate limit, narrowed to the principals of an
    ``X-Ragstream-Act-As`` header when the request has one (:func:`api.auth.act_as`).

    Raises:
        ApiError: 401 ``UNAUTHENTICATED`` (missing, unknown or revoked key); 429 (rate);
            422 ``INVALID_REQUEST`` (an act-as value that is no principal); 403 ``FORBIDDEN``
            (acting as a principal the key does not hold).
    """
    svc = services(request)
    key = _presented_key(request)
    if not key and request.headers.get("authorization", "").strip():
        raise ApiError(
            401,
            "UNAUTHENTICATED",
            "the Authorization header needs the Bearer scheme: "
            "use 'Authorization: Bearer <key>' (or 'X-API-Key: <key>')",
            headers={"WWW-Authenticate": "Bearer"},
        )
    if not key:
        raise ApiError(
            401,
            "UNAUTHENTICATED",
            "an API key is required: 'Authorization: Bearer <key>' or 'X-API-Key: <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    found = await asyncio.to_thread(svc.authenticate, key)
    if found is None:
        raise ApiError(
            401,
            "UNAUTHENTICATED",
            "unknown or revoked API key",
            headers={"WWW-Authenticate": "Bearer"},
        )
    await asyncio.to_thread(partial(check_rate, svc.redis, found, svc.settings.api.rate_per_minute))
    acting = request.headers.get(ACT_AS_HEADER)
    if acting is None:
        return found
    try:
        return act_as(found, acting)
    except PrincipalError as exc:
        raise ApiError(422, "INVALID_REQUEST", f"{ACT_AS_HEADER}: {exc}") from exc
    except ActAsError as exc:
        raise ApiError(403, "FORBIDDEN", f"{ACT_AS_HEADER}: {exc}") from exc


async def operator(request: Request, who: Principal = Depends(principal)) -> Principal:
    """The authenticated caller, who must hold an ``operator`` key.

    Raises:
        ApiError: 401 (as :func:`principal`); 403 ``FORBIDDEN`` for a ``user`` key.
    """
    if not who.is_operator:
        raise ApiError(
            403,
            "FORBIDDEN",
            "this needs an operator key (ragstream keys create --role operator)",
        )
    return who
