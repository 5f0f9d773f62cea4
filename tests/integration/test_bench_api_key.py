"""``bench api`` against a real gateway (uvicorn, the real Redis rate limiter and key revocation,
issue 53 item 3): a key's 429s are counted as ``rate_limited`` and the run goes on; the key the
benchmark makes has no limit (even where the deployment's default is 2 a minute) and is refused
by the running gateway as soon as the benchmark ends."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from api.auth import create_key
from bench.query.api_key import bench_key
from bench.query.search_load import measure_api_search_load
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import DatabaseSettings, Settings
from tests.integration.stack import ApiServer

pytestmark = pytest.mark.integration


@pytest.fixture
def gateway(
    settings: Settings, tmp_path: Path, unique_name: Callable[[str], str]
) -> Iterator[ApiServer]:
    """An API server of its own SQLite registry and index alias, default rate limit 2/min."""
    url = f"sqlite:///{tmp_path / 'api.db'}"
    upgrade_head(url)
    s = settings.model_copy(update={
        "database": DatabaseSettings(url=url),
        "api": settings.api.model_copy(update={"rate_per_minute": 2}),
        "elasticsearch": settings.elasticsearch.model_copy(
            update={"index_alias": unique_name("bench-api")}
        ),
    })  # fmt: skip
    server = ApiServer(s).start()
    try:
        yield server
    finally:
        server.stop()
        client = redis.Redis.from_url(settings.redis.url)
        for key in client.scan_iter(match="ragstream:rate:t-bench-*"):
            client.delete(key)
        client.close()


def test_a_limited_key_is_counted_as_rate_limited_and_the_run_goes_on(
    gateway: ApiServer, unique_name: Callable[[str], str]
) -> None:
    sessions = make_session_factory(make_engine(gateway.settings.database_url))
    warm, _ = create_key(sessions, unique_name("bench"), principals=["*"])
    measure_api_search_load(gateway.url, warm, ["q"], 1, seconds=0.1)  # loads the query model
    for _ in range(3):  # a try that crossed a minute's boundary is tried again
        window = int(time.time() // 60)
        key, _ = create_key(sessions, unique_name("bench"), principals=["*"])  # the default: 2
        result = measure_api_search_load(gateway.url, key, ["q"], 1, seconds=2.0)
        if int(time.time() // 60) == window:
            break
    assert result["rate_limited"] == 1  # the third request; then the client waits to the end
    assert result["searched"] + result["errors"] == 2 and result["seconds"] < 5


def test_the_benchmarks_own_key_has_no_limit_and_is_refused_once_it_ends(
    gateway: ApiServer, unique_name: Callable[[str], str]
) -> None:
    with bench_key(gateway.settings, unique_name("bench"), None) as key:
        measure_api_search_load(gateway.url, key.key, ["q"], 1, seconds=0.1)  # loads the model
        result = measure_api_search_load(gateway.url, key.key, ["q"], 2, seconds=2.0)
        assert result["rate_limited"] == 0 and result["searched"] + result["errors"] > 2
        headers = {"Authorization": f"Bearer {key.key}"}
        assert httpx.get(f"{gateway.url}/v1/models", headers=headers).status_code == 200
    deadline = time.monotonic() + 5
    while httpx.get(f"{gateway.url}/v1/models", headers=headers).status_code != 401:
        assert time.monotonic() < deadline, "the revoked key was still accepted after 5 s"
        time.sleep(0.1)
