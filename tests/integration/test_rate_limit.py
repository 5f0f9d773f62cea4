"""The per-key rate limit in the real Redis: a fixed one-minute window, shared by every API
process; a key is counted under its tenant and row id, so keys of two databases that share one
Redis (every new database's first key is row 1) do not count each other's requests."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from api.auth import Principal
from api.deps import check_rate
from api.errors import ApiError
from ragstream.settings import Settings

pytestmark = pytest.mark.integration


def test_keys_with_one_row_id_in_two_tenants_are_counted_apart(
    settings: Settings, unique_name: Callable[[str], str]
) -> None:
    client = redis.Redis.from_url(settings.redis.url)
    try:
        for _ in range(3):  # a try that crossed a minute's boundary is tried again
            window = int(time.time() // 60)
            first = Principal(key_id=1, tenant=unique_name("rate-a"), rate_per_minute=2)
            second = Principal(key_id=1, tenant=unique_name("rate-b"), rate_per_minute=2)
            check_rate(client, first, 0)
            check_rate(client, first, 0)
            check_rate(client, second, 0)  # another tenant's key 1: a count of its own
            try:
                check_rate(client, first, 0)
            except ApiError as refused:
                assert refused.status == 429 and int(refused.headers["Retry-After"]) >= 1
                return
            assert int(time.time() // 60) != window, "a third request in one minute passed"
        pytest.fail("every try crossed a minute's boundary")
    finally:
        for key in client.scan_iter(match="ragstream:rate:t-rate-*"):
            client.delete(key)
        client.close()
