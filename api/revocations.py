"""Key revocation as an event: every API process forgets a revoked key at once.

Each API process caches who a key is (:meth:`api.deps.Services.authenticate`) so that a request
costs no SQL lookup. A revocation (:func:`api.auth.revoke_key`) is published on the Redis
channel :data:`CHANNEL` (the key's id); each process listens on it (:class:`RevocationListener`,
a daemon thread of Redis pub/sub) and drops the key from its cache when the message arrives,
so a revoked key is refused by every process within the time of one Redis message, not a
cache period. While the listener is not subscribed (Redis down, reconnecting) the process
trusts its cache for :data:`UNSUBSCRIBED_CACHE_S` only, and after a reconnection it drops its
whole cache (a message may have been missed meanwhile).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis
import structlog

log = structlog.get_logger(__name__)

#: The Redis pub/sub channel of revoked key ids (a message is the id in decimal).
CHANNEL = "ragstream:keys:revoked"
#: How long a process trusts a cached key while it is not subscribed to :data:`CHANNEL`, s.
UNSUBSCRIBED_CACHE_S = 1.0
#: Back-off between reconnections of the listener, s.
RECONNECT_S = 1.0


def publish_revocation(client: redis.Redis, key_id: int) -> int:
    """Tell every API process that key ``key_id`` is revoked; return how many listened.

    Raises:
        redis.RedisError: Redis is unreachable (the revocation in SQL stands: processes then
            stop accepting the key when their cached lookup expires).
    """
    return int(client.publish(CHANNEL, str(key_id)))


class RevocationListener:
    """Calls ``on_revoked(key_id)`` for each revocation published on :data:`CHANNEL`, and
    ``on_resubscribed()`` after each (re)subscription, from a daemon thread.

    ``subscribed`` is set while the subscription is live. :meth:`close` stops the thread.
    """

    def __init__(
        self,
        redis_url: str,
        on_revoked: Callable[[int], None],
        on_resubscribed: Callable[[], None],
    ) -> None:
        self._url = redis_url
        self._on_revoked = on_revoked
        self._on_resubscribed = on_resubscribed
        self._stop = threading.Event()
        self.subscribed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="key-revocations", daemon=True)

    def start(self) -> RevocationListener:
        """Start listening; return self."""
        self._thread.start()
        return self

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop listening and wait up to ``timeout_s`` for the thread."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            client = redis.Redis.from_url(self._url, socket_timeout=5)
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                pubsub.subscribe(CHANNEL)
                self.subscribed.set()
                self._on_resubscribed()
                while not self._stop.is_set():
                    message = pubsub.get_message(timeout=0.5)
                    if message is not None and message.get("type") == "message":
                        self._deliver(message.get("data"))
            except redis.RedisError as exc:
                log.warning("keys.revocation_listener_error", error=f"{type(exc).__name__}: {exc}")
                self._stop.wait(RECONNECT_S)
            finally:
                self.subscribed.clear()
                pubsub.close()
                client.close()

    def _deliver(self, data: object) -> None:
        try:
            key_id = int(data.decode() if isinstance(data, bytes) else str(data))
        except ValueError:
            log.warning("keys.revocation_message_invalid", data=repr(data)[:100])
            return
        self._on_revoked(key_id)
