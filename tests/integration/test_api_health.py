"""The gateway's readiness probe really reaches Kafka, Elasticsearch, Redis and SQL."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from ragstream.db import upgrade_head
from ragstream.settings import DatabaseSettings, ElasticsearchSettings, Settings


def test_readyz_reports_every_service_healthy(settings: Settings, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'api.db'}"
    upgrade_head(url)
    s = settings.model_copy(update={"database": DatabaseSettings(url=url)})
    with TestClient(create_app(s)) as client:
        assert client.get("/healthz").json() == {"status": "ok"}
        ready = client.get("/readyz")
        body = ready.json()
        assert ready.status_code == 200, body
        assert set(body["checks"]) == {"kafka", "elasticsearch", "redis", "sql"}
        assert all(c["healthy"] for c in body["checks"].values())
        metrics = client.get("/metrics")
        assert metrics.status_code == 200
        assert "python_info" in metrics.text


def test_readyz_is_503_when_a_service_is_unreachable(settings: Settings) -> None:
    bad = settings.model_copy(
        update={
            "elasticsearch": ElasticsearchSettings(url="http://127.0.0.1:1", request_timeout_s=1)
        }
    )
    with TestClient(create_app(bad)) as client:
        ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json()["checks"]["elasticsearch"]["healthy"] is False
