"""A cheap back-pressure signal: each pool process reports its lag and in-flight count to Redis.

Layout: one hash per pool, ``ragstream:pressure:<pool>``, field = member id, value = JSON
``{"lag": int, "in_flight": int, "at": unix_seconds}``. Readers sum the members that reported
within ``max_age_s``; a dead process simply stops counting.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import redis

KEY_PREFIX = "ragstream:pressure:"


@dataclass(frozen=True, slots=True)
class Pressure:
    """Summed lag (records behind the high watermark) and in-flight events of a pool."""

    pool: str
    lag: int
    in_flight: int
    members: int


class PressureReporter:
    """Writes one member's numbers at most every ``interval_s`` seconds."""

    def __init__(
        self, client: redis.Redis, pool: str, member: str, interval_s: float = 1.0
    ) -> None:
        self._client = client
        self._key = KEY_PREFIX + pool
        self._member = member
        self._interval_s = interval_s
        self._last = 0.0

    def report(self, lag: int, in_flight: int, force: bool = False) -> None:
        """Record ``lag`` and ``in_flight``; errors are swallowed (the signal is advisory)."""
        now = time.time()
        if not force and now - self._last < self._interval_s:
            return
        self._last = now
        value = json.dumps({"lag": lag, "in_flight": in_flight, "at": now})
        try:
            self._client.hset(self._key, self._member, value)
            self._client.expire(self._key, 3600)
        except redis.RedisError:
            return

    def clear(self) -> None:
        """Remove this member (on shutdown)."""
        try:
            self._client.hdel(self._key, self._member)
        except redis.RedisError:
            return


def read_pressure(client: redis.Redis, pool: str, max_age_s: float = 10.0) -> Pressure:
    """Sum the fresh reports of ``pool``'s members (one HGETALL round trip)."""
    now = time.time()
    lag = in_flight = members = 0
    raw: dict[bytes, bytes] = client.hgetall(KEY_PREFIX + pool)  # type: ignore[assignment]
    for value in raw.values():
        data = json.loads(value)
        if now - float(data["at"]) <= max_age_s:
            lag += int(data["lag"])
            in_flight += int(data["in_flight"])
            members += 1
    return Pressure(pool, lag, in_flight, members)
