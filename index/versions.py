"""Per-tenant index version counters in Redis.

Every acknowledged ingest change bumps its tenant's version, and answer caches key on it, so a
cached answer can never outlive the chunks it was built from.
"""

from __future__ import annotations

import redis

KEY_PREFIX = "ragstream:index_version:"


class IndexVersions:
    """``INCR``/``GET`` of ``ragstream:index_version:<tenant>`` (0 when never bumped)."""

    def __init__(self, client: redis.Redis) -> None:
        self._client = client

    def bump(self, tenant: str) -> int:
        """Increment ``tenant``'s version; return the new value."""
        return int(self._client.incr(KEY_PREFIX + tenant))

    def get(self, tenant: str) -> int:
        """Current version of ``tenant``."""
        value = self._client.get(KEY_PREFIX + tenant)
        return int(value) if value is not None else 0
