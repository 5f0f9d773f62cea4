"""``bench api`` never aborts on a rate limit (issue 53, item 3): 429s are counted apart, and
without ``--api-key`` it asks with a key of its own that has no limit and is revoked at the end."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from api.auth import list_keys, lookup
from bench.query.api_key import bench_key, created_key
from bench.query.api_probe import (
    measure_api_exact_cache_hit,
    measure_api_load,
    measure_api_tier_latency,
)
from bench.query.search_load import measure_api_search_load
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import Settings


def limited() -> httpx.Response:
    """The gateway's refusal of a spent rate limit (``api.deps.check_rate``)."""
    return httpx.Response(
        429, headers={"Retry-After": "0"}, json={"error": {"code": "RATE_LIMITED"}}
    )


def every_third_limited() -> tuple[httpx.MockTransport, list[httpx.Request]]:
    """A gateway that refuses every third request with 429 and answers the others."""
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        if len(seen) % 3 == 0:
            return limited()
        if request.url.path == "/v1/search":
            return httpx.Response(200, json={"data": [{"id": "c1"}]})
        return httpx.Response(200, json={"status": "answered", "cached": len(seen) > 1})

    return httpx.MockTransport(handler), seen


def test_the_answer_load_counts_429s_as_rate_limited_not_as_errors() -> None:
    transport, seen = every_third_limited()
    result = measure_api_load(
        "http://api.test", "rsk_x", ["a?"], 2, seconds=0.2, transport=transport
    )
    assert result["rate_limited"] == len(seen) // 3 and result["rate_limited"] >= 1
    assert result["errors"] == 0
    assert result["answered"] + result["rate_limited"] == len(seen)


def test_the_search_load_counts_429s_as_rate_limited_not_as_errors() -> None:
    transport, seen = every_third_limited()
    result = measure_api_search_load(
        "http://api.test", "rsk_x", ["a?"], 2, seconds=0.2, transport=transport
    )
    assert result["rate_limited"] == len(seen) // 3 and result["rate_limited"] >= 1
    assert result["errors"] == 0 and result["searched"] + result["rate_limited"] == len(seen)


def test_a_refused_client_waits_for_retry_after_or_the_end_of_the_run() -> None:
    calls: list[int] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        return httpx.Response(429, headers={"Retry-After": "30"})

    result = measure_api_load(
        "http://api.test", "rsk_x", ["a?"], 1, seconds=0.3,
        transport=httpx.MockTransport(handler),
    )  # fmt: skip
    assert len(calls) == 1 and result["rate_limited"] == 1  # no hammering: one refusal
    assert result["seconds"] < 2 and result["answered"] == 0 and "p50" not in result


def test_the_exact_cache_probe_leaves_refused_repeats_out_and_counts_them() -> None:
    transport, seen = every_third_limited()
    result = measure_api_exact_cache_hit(
        "http://api.test", "rsk_x", "Why?", repeats=6, transport=transport
    )
    assert len(seen) == 7 and result["rate_limited"] == 2 and result["repeats"] == 6
    assert result["misses"] == 0


def test_a_refused_priming_request_says_429() -> None:
    with pytest.raises(RuntimeError, match=r"\(429\)"):
        measure_api_exact_cache_hit(
            "http://api.test", "k", "q", repeats=1,
            transport=httpx.MockTransport(lambda request: limited()),
        )  # fmt: skip


def test_tier_latency_counts_refusals_apart() -> None:
    transport, _ = every_third_limited()
    result = measure_api_tier_latency(
        "http://api.test", "rsk_x", ["a?", "b?", "c?", "d?"], "evidence", transport=transport
    )
    assert result["rate_limited"] == 1 and result["asked"] == 4
    assert result["statuses"] == {"answered": 3}


def _settings(tmp_path: Path) -> Settings:
    from ragstream.settings import DatabaseSettings

    url = f"sqlite:///{tmp_path / 'keys.db'}"
    base = Settings()
    nowhere = base.redis.model_copy(update={"url": "redis://127.0.0.1:1/0"})  # refused at once
    return base.model_copy(update={"database": DatabaseSettings(url=url), "redis": nowhere})


def test_the_benchmark_key_has_no_limit_and_is_revoked_even_when_the_run_fails(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    with pytest.raises(RuntimeError, match="boom"), created_key(sessions, "acme") as key:
        found = lookup(sessions, key.key)
        assert found is not None and found.tenant == "acme" and found.rate_per_minute == 0
        assert found.principals is None and not found.is_operator  # reads all, operates nothing
        raise RuntimeError("boom")
    assert lookup(sessions, key.key) is None
    (row,) = list_keys(sessions, "acme")
    assert row.revoked_at is not None and row.id == key.key_id and key.source == "created"


def test_a_given_key_is_used_as_is_and_never_revoked(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with bench_key(settings, "acme", "rsk_given") as key:
        assert (key.key, key.key_id, key.source) == ("rsk_given", None, "given")
    assert not (tmp_path / "keys.db").exists()  # the registry was never touched


def test_bench_key_makes_its_key_in_the_settings_registry(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    with bench_key(settings, "acme", None) as key:
        sessions = make_session_factory(make_engine(settings.database_url))
        assert lookup(sessions, key.key) is not None
    assert lookup(sessions, key.key) is None  # revoked though its revocation was not published
    assert key.source == "created"


@pytest.mark.parametrize(("note", "exit_code"), [("x (429)", 0), ("connection refused", 1)])
def test_bench_api_goes_on_after_a_rate_limited_probe_and_revokes_its_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, note: str, exit_code: int
) -> None:
    import json

    from typer.testing import CliRunner

    import bench.query.run
    import bench.query.search_load
    import ragstream.settings
    from bench.cli import bench_app

    settings = _settings(tmp_path)
    used: list[str] = []

    def probe(url: str, key: str, question: str) -> dict[str, object]:
        used.append(key)
        return {"measured": False, "note": f"not measured: {note}"}

    def search(url: str, key: str, pool: list[str], n: int, **kw: object) -> dict[str, object]:
        used.append(key)
        return {"concurrency": n, "rate_per_s": 1.0, "errors": 0, "rate_limited": 0,
                "empty": 0, "machine_core_ms_per_search": None}  # fmt: skip

    monkeypatch.setattr(ragstream.settings, "get_settings", lambda: settings)
    monkeypatch.setattr(bench.query.run, "probe_exact_cache_hit", probe)
    monkeypatch.setattr(bench.query.search_load, "measure_api_search_load", search)
    out = tmp_path / "api.json"
    args = ["api", "--tenant", "acme", "--search", "--search-clients", "1", "--out", str(out)]
    result = CliRunner().invoke(bench_app, args)
    assert result.exit_code == exit_code, result.output
    sessions = make_session_factory(make_engine(settings.database_url))
    assert used and all(lookup(sessions, key) is None for key in used)  # revoked either way
    (row,) = list_keys(sessions, "acme")
    assert row.rate_per_minute == 0 and row.revoked_at is not None
    if exit_code == 0:
        payload = json.loads(out.read_text())
        assert payload["api_key"] == "created" and len(payload["search_load"]) == 1
        assert len(set(used)) == 1  # the probe and the load asked with the same key
    else:
        assert not out.exists()
