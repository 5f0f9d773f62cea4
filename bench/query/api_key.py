"""The API key ``ragstream bench api`` asks with (issue 53, item 3).

Without ``--api-key``, the benchmark runs on the gateway's machine, with its settings, and
makes a key of its own straight in the SQL key registry (:func:`api.auth.create_key`, as
``ragstream keys create`` does): rate limit 0 (none), so a load measures the stack and not the
limiter; the tenant of the run; reading every document of it (``*``). The key is revoked when
the benchmark ends, however it ends (:func:`api.auth.revoke_key`, published to every API
process).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import redis
    from sqlalchemy.orm import Session, sessionmaker

    from ragstream.settings import Settings

#: The label of the benchmark's keys in ``ragstream keys list``.
KEY_NAME = "bench api (revoked when it ends)"


@dataclass(frozen=True, slots=True)
class BenchKey:
    """The key a run uses: the key itself, its row id (``None``: given with ``--api-key``)
    and where it came from (``given`` or ``created``)."""

    key: str
    key_id: int | None
    source: str


@contextmanager
def created_key(
    sessions: sessionmaker[Session], tenant: str, client: redis.Redis | None = None
) -> Iterator[BenchKey]:
    """A new ``user`` key of ``tenant`` with no rate limit (``rate_per_minute=0``) reading
    every document of it (``*``), revoked on exit, also when the block raises; with
    ``client``, the revocation is then published on Redis
    (:func:`api.revocations.publish_revocation`: every API process refuses the key at once)."""
    from api.auth import create_key, revoke_key

    key, key_id = create_key(
        sessions, tenant, name=KEY_NAME, rate_per_minute=0, role="user", principals=["*"]
    )
    try:
        yield BenchKey(key, key_id, "created")
    finally:
        revoke_key(sessions, key_id, client)


@contextmanager
def bench_key(settings: Settings, tenant: str, given: str | None) -> Iterator[BenchKey]:
    """The key of a ``bench api`` run: ``given`` as is (its rate limit applies: 429s are
    counted apart), else :func:`created_key` in the SQL registry of ``settings.database_url``
    (the gateway's, when run beside it), revoked on exit with the revocation published on
    ``settings.redis.url``.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the key registry cannot be reached or migrated.
    """
    if given:
        yield BenchKey(given, None, "given")
        return
    import redis

    from ragstream.db.engine import make_engine, make_session_factory, upgrade_head

    upgrade_head(settings.database_url)
    engine = make_engine(settings.database_url)
    client = redis.Redis.from_url(settings.redis.url, socket_timeout=2)
    try:
        with created_key(make_session_factory(engine), tenant, client) as found:
            yield found
    finally:
        client.close()
        engine.dispose()
