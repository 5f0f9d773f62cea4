from __future__ import annotations

from pathlib import Path

import pytest

from ragstream.settings import PROJECT_ROOT, Settings


def test_nested_environment_variables_override_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS", "broker-a:19092")
    monkeypatch.setenv("RAGSTREAM_INFRA__ELASTICSEARCH_HEAP_MB", "512")
    monkeypatch.setenv("RAGSTREAM_DATABASE__URL", "postgresql+psycopg://u@h:1/db")
    s = Settings()
    assert s.kafka.bootstrap_servers == "broker-a:19092"
    assert s.infra.elasticsearch_heap_mb == 512
    assert s.database_url == "postgresql+psycopg://u@h:1/db"


def test_invalid_value_is_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_INFRA__KAFKA_PORT", "not-a-port")
    with pytest.raises(ValueError, match="kafka_port"):
        Settings()


def test_client_defaults_match_local_infra(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("KAFKA__BOOTSTRAP_SERVERS", "ELASTICSEARCH__URL", "REDIS__URL", "DATABASE__URL"):
        monkeypatch.delenv(f"RAGSTREAM_{var}", raising=False)
    s = Settings()
    host = s.infra.host
    assert s.kafka.bootstrap_servers == f"{host}:{s.infra.kafka_port}"
    assert s.elasticsearch.url == f"http://{host}:{s.infra.elasticsearch_port}"
    assert s.redis.url.startswith(f"redis://{host}:{s.infra.redis_port}/")
    assert s.database_url == f"sqlite:///{PROJECT_ROOT / '.local' / 'ragstream.db'}"


def test_nothing_else_reads_the_environment() -> None:
    """Only ragstream/settings.py may read environment variables (CONVENTIONS.md)."""
    offenders = []
    for folder in ("ragstream", "topics", "index", "ingest", "workers", "api", "infra"):
        for path in (PROJECT_ROOT / folder).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if any(p in text for p in ("os.getenv", "os.environ[", "environ.get(", "getenv(")):
                offenders.append(str(Path(path).relative_to(PROJECT_ROOT)))
    assert offenders == []


def test_one_pool_variable_keeps_that_pools_other_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGSTREAM_POOLS__RERANK__METRICS_PORT", "1234")
    monkeypatch.setenv("RAGSTREAM_POOLS__GENERATION_SMALL__MAX_BATCH", "4")
    s = Settings()
    assert s.pools.rerank.metrics_port == 1234
    assert s.pools.rerank.max_batch == 16 and s.pools.rerank.max_wait_ms == 10
    assert s.pools.generation_small.max_batch == 4
    assert s.pools.generation_small.metrics_port == 9104
