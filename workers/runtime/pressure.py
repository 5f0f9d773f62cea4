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
    """Writes one member's numbers: a change at most every ``interval_s`` seconds, the same
    numbers again only every ``refresh_s`` seconds (so that an idle member stays counted by
    readers with ``max_age_s`` above ``refresh_s``, at one Redis round trip per ``refresh_s``).

    Args:
        client: Redis client.
        pool: Pool name (the hash is ``ragstream:pressure:<pool>``).
        member: This member's field in the hash.
        interval_s: Shortest time between two writes, seconds.
        refresh_s: Longest time between two writes of unchanged numbers, seconds; must stay
            below :func:`read_pressure`'s ``max_age_s`` (10 s).
    """

    def __init__(
        self,
        client: redis.Redis,
        pool: str,
        member: str,
        interval_s: float = 1.0,
        refresh_s: float = 5.0,
    ) -> None:
        self._client = client
        self._key = KEY_PREFIX + pool
        self._member = member
        self._interval_s = interval_s
        self._refresh_s = max(refresh_s, interval_s)
        self._last = 0.0
        self._last_value: tuple[int, int] | None = None

    def due(self, lag: int, in_flight: int, now: float) -> bool:
        """Whether :meth:`report` writes ``(lag, in_flight)`` at time ``now`` (unix seconds)."""
        since = now - self._last
        if (lag, in_flight) != self._last_value:
            return since >= self._interval_s
        return since >= self._refresh_s

    def report(self, lag: int, in_flight: int, force: bool = False) -> None:
        """Record ``lag`` and ``in_flight`` when :meth:`due` (or ``force``); errors are
        swallowed (the signal is advisory). One round trip: HSET and EXPIRE pipelined."""
        now = time.time()
        if not force and not self.due(lag, in_flight, now):
            return
        self._last = now
        self._last_value = (lag, in_flight)
        value = json.dumps({"lag": lag, "in_flight": in_flight, "at": now})
        try:
            pipe = self._client.pipeline(transaction=False)
            pipe.hset(self._key, self._member, value)
            pipe.expire(self._key, 3600)
            pipe.execute()
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
