"""Per-receiver slots: at most N webhook attempts in flight to one receiver, across workers.

A receiver that never answers holds each attempt for the whole ``webhooks.timeout_s``. With a
pool of threads shared by every endpoint, enough deliveries to one dead receiver would fill
every thread and make the live receivers' deliveries wait (a bulkhead, as in Nygard, *Release
It!*, ch. 5). Each attempt first takes a slot of its receiver (scheme, host and port of the
URL): a Redis sorted set ``ragstream:webhooks:slots:<receiver>`` of lease tokens scored by
their expiry. Taking a slot drops expired leases, then adds one if fewer than ``limit`` remain,
atomically (one Lua script), so workers on several machines share the limit. A lease expires
after the attempt's deadline plus a margin, so a worker that dies mid-attempt frees its slot.
Expiry times are the worker's clock (hosts are assumed NTP-synchronised; a skew shortens or
lengthens a dead worker's lease, never the limit of live ones).
"""

from __future__ import annotations

import hashlib
import secrets
import time
from urllib.parse import urlsplit

import redis

PREFIX = "ragstream:webhooks:slots:"
#: Seconds a lease outlives its attempt's deadline (``timeout_s``).
LEASE_MARGIN_S = 5.0
#: An attempt in flight for longer than this (seconds) makes its receiver slow: deliveries
#: waiting for it wait until that attempt's deadline.
SLOW_AFTER_S = 1.0

# Returns 1 when a slot was taken, else the expiry (as a string) of the lease that ends first.
_TAKE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
  redis.call('EXPIRE', KEYS[1], ARGV[5])
  return 1
end
return redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')[2]
"""


def receiver_of(url: str) -> str:
    """The receiver a URL posts to: ``scheme://host:port`` (default ports filled in).

    A URL that cannot be split is its own receiver (its attempt fails on the URL anyway)."""
    try:
        parts = urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
        return f"{parts.scheme}://{(parts.hostname or '').lower()}:{port}"
    except ValueError:
        return url


class ReceiverSlots:
    """Leases of at most ``limit`` concurrent attempts per receiver.

    Args:
        client: the Redis holding the leases (the broker's, in practice).
        limit: attempts in flight per receiver (``webhooks.per_receiver_concurrency``).
        lease_s: how long a lease lives without being released, in seconds (the attempt's
            ``timeout_s`` plus :data:`LEASE_MARGIN_S`).
    """

    def __init__(self, client: redis.Redis, *, limit: int, lease_s: float) -> None:
        self._redis = client
        self._limit = limit
        self._lease_s = lease_s
        self._take = client.register_script(_TAKE)

    @staticmethod
    def key(url: str) -> str:
        """The Redis key of ``url``'s receiver (hashed: a URL may hold anything)."""
        digest = hashlib.sha256(receiver_of(url).encode()).hexdigest()[:32]
        return PREFIX + digest

    def acquire(self, url: str) -> tuple[str | None, float]:
        """``(token, 0.0)``: a lease for one attempt to ``url``'s receiver; or ``(None,
        wait_s)`` when it has ``limit`` attempts in flight already. ``wait_s`` is 0 while the
        oldest of them started less than :data:`SLOW_AFTER_S` ago (a busy receiver: ask again
        soon), else the seconds until it must have ended (its lease's expiry less
        :data:`LEASE_MARGIN_S`): deliveries waiting on a slow or dead receiver ask again then,
        not in a busy loop.

        Raises:
            redis.RedisError: Redis is unreachable (the task is retried by Celery).
        """
        now = time.time()
        token = secrets.token_hex(8)
        expire_s = int(self._lease_s) + 1
        args: list[str | float] = [now, self._limit, now + self._lease_s, token, expire_s]
        taken = self._take(keys=[self.key(url)], args=args)
        if taken == 1:
            return token, 0.0
        expiry = float(taken)
        if now - (expiry - self._lease_s) < SLOW_AFTER_S:
            return None, 0.0  # the receiver is busy, not slow: ask again soon
        return None, max(0.0, expiry - LEASE_MARGIN_S - now)

    def release(self, url: str, token: str) -> None:
        """Give the slot back (a Redis error is swallowed: the lease expires on its own)."""
        try:
            self._redis.zrem(self.key(url), token)
        except redis.RedisError:
            return

    def in_flight(self, url: str) -> int:
        """Live leases of ``url``'s receiver now."""
        key = self.key(url)
        return int(self._redis.zcount(key, time.time(), "+inf"))
