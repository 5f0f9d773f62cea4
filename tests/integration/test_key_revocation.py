"""Key revocation is an event (api/revocations.py): two API servers, each with its own key
cache and Redis subscription, refuse a revoked key as soon as its revocation is published,
long before their cached lookups (30 s) expire. Real Redis and SQL."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
import redis

from api.auth import create_key, revoke_key
from ragstream.db.engine import make_engine, make_session_factory
from tests.integration.stack import Stack, make_stack, wait_for

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    s = make_stack(tmp_path_factory.mktemp("revoke"), "revoke")
    try:
        s.api()
        s.api()
        yield s
    finally:
        s.close()


def _status(url: str, key: str) -> int:
    r = httpx.get(f"{url}/v1/documents?limit=1", headers={"Authorization": f"Bearer {key}"})
    return r.status_code


def test_a_revoked_key_is_refused_by_every_api_process_within_a_second(stack: Stack) -> None:
    sessions = make_session_factory(make_engine(stack.settings.database_url))
    key, key_id = create_key(sessions, "rv")
    urls = [api.url for api in stack.apis]
    for api in stack.apis:  # both listen before the revocation is published
        wait_for(
            lambda a=api: a.app.state.services._revocations.subscribed.is_set(),
            timeout_s=10,
            what="the revocation listener subscribed",
        )
    assert [_status(u, key) for u in urls] == [200, 200]  # now cached in both processes
    client = redis.Redis.from_url(stack.settings.redis.url)
    t0 = time.monotonic()
    assert revoke_key(sessions, key_id, client)
    refused_after: dict[str, float] = {}
    while len(refused_after) < len(urls) and time.monotonic() - t0 < 10:
        for u in urls:
            if u not in refused_after and _status(u, key) == 401:
                refused_after[u] = time.monotonic() - t0
        time.sleep(0.01)
    client.close()
    print(f"refused after {sorted(round(v * 1000) for v in refused_after.values())} ms")
    # Both processes had the key cached for 30 s: refusing it within 10 s (here, within tens of
    # ms) can only come from the published revocation. The latency is a measurement, printed
    # and written in docs/permissions.md, not a timed assertion.
    assert len(refused_after) == 2, refused_after
    assert not revoke_key(sessions, key_id, None)  # revoked already
