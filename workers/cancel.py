"""Cancellation of a query whose client went away: a flag in Redis the pools check.

The API sets ``ragstream:cancel:<request_id>`` (value ``1``, with a TTL: the query's remaining
life) when a streaming client disconnects before its answer; the generation pools read the
flags of the requests they are about to generate and, every
:data:`~workers.generation.generator.CANCEL_POLL_S` while generating, of those in flight
(one ``MGET`` per batch), and stop a flagged request's LLM stream (closing the HTTP
stream makes llama.cpp and vLLM free the slot). Reading is advisory: a Redis error reads as "not
cancelled", so the answer is still produced.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import redis
import structlog

log = structlog.get_logger(__name__)

KEY_PREFIX = "ragstream:cancel:"


class Cancellations:
    """Set and read cancellation flags.

    Args:
        client: the Redis client.
    """

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client

    def cancel(self, request_id: str, ttl_s: float) -> None:
        """Flag ``request_id`` as cancelled for ``ttl_s`` seconds (at least 1).

        Raises:
            redis.RedisError: when Redis cannot be reached.
        """
        self._redis.set(KEY_PREFIX + request_id, b"1", ex=max(1, math.ceil(ttl_s)))

    def cancelled(self, request_ids: Sequence[str]) -> set[str]:
        """The flagged ones among ``request_ids`` (one ``MGET``; empty on a Redis error)."""
        ids = list(request_ids)
        if not ids:
            return set()
        try:
            values = self._redis.mget([KEY_PREFIX + r for r in ids])
        except redis.RedisError as exc:
            log.warning("cancel.unreadable", error=str(exc))
            return set()
        return {r for r, v in zip(ids, values, strict=True) if v is not None}
