"""Which answer streams are attached right now, across API processes (a Redis counter).

A streaming client that disconnects before its answer used to cancel the request's generation
at once. A resumable stream needs the generation to go on while the client reconnects, maybe to
another API process, so the cancellation waits ``api.resume_grace_s``: every stream of a request
(the first connection and each resumed one) adds one to ``ragstream:streams:attached:<id>`` while
it is open; a stream whose client left takes its one away and, after the grace, cancels the
request (:class:`workers.cancel.Cancellations`) only when no stream of it is attached then.
A Redis error reads as "nobody is attached" (the cancellation is advisory anyway).
"""

from __future__ import annotations

import math

import redis
import structlog

log = structlog.get_logger(__name__)

KEY_PREFIX = "ragstream:streams:attached:"


class Attachments:
    """Count the open streams of each request.

    Args:
        client: the Redis client.
        ttl_s: how long a count lives after its last change, in seconds (the query's life:
            a process that dies holding a stream cannot keep it forever).
    """

    def __init__(self, client: redis.Redis, ttl_s: float) -> None:
        self._redis = client
        self._ttl = max(1, math.ceil(ttl_s))

    def attach(self, request_id: str) -> None:
        """One more open stream of ``request_id``.

        Raises:
            redis.RedisError: when Redis cannot be reached.
        """
        pipe = self._redis.pipeline()
        pipe.incr(KEY_PREFIX + request_id)
        pipe.expire(KEY_PREFIX + request_id, self._ttl)
        pipe.execute()

    def detach(self, request_id: str) -> None:
        """One open stream of ``request_id`` fewer.

        Raises:
            redis.RedisError: when Redis cannot be reached.
        """
        pipe = self._redis.pipeline()
        pipe.decr(KEY_PREFIX + request_id)
        pipe.expire(KEY_PREFIX + request_id, self._ttl)
        pipe.execute()

    def attached(self, request_id: str) -> int:
        """Open streams of ``request_id`` now (0 on a Redis error)."""
        try:
            value = self._redis.get(KEY_PREFIX + request_id)
        except redis.RedisError as exc:
            log.warning("streams.attachments_unreadable", error=str(exc))
            return 0
        return int(value) if value is not None else 0
