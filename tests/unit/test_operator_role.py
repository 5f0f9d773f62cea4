"""Operator keys: ``keys create --role operator``, the role travels with the key, the demo's key
is one, and a ``user`` key gets 403 on the operations data (``/v1/ops/...``) and pages."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.auth import create_key, list_keys, lookup
from api.ops_models import IndexOut, OpsStatus, ProcessesOut
from entry.cli import app as cli
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import get_settings
from tests.unit.apikit import settings_for

OPS_PATHS = (
    ("GET", "/v1/ops/status"),
    ("GET", "/v1/ops/dlq/rag.queries.dlq"),
    ("POST", "/v1/ops/dlq/rag.queries.dlq/replay"),
)


class FakeOps:
    """Answers :meth:`status` without Kafka, Elasticsearch or an LLM server."""

    def __init__(self) -> None:
        self.calls = 0
        self.scopes: list[str | None] = []

    def status(self, tenant: str | None = None) -> OpsStatus:
        self.calls += 1
        self.scopes.append(tenant)
        return OpsStatus(
            collected_at=time.time(), processes=ProcessesOut(error="none here"), pools=[],
            dlq=[], llm=[], index=IndexOut(alias="a"),
        )  # fmt: skip

    def close(self) -> None:
        pass


@pytest.fixture
def client(tmp_path: Path) -> Iterator[Any]:
    settings = settings_for(tmp_path)
    upgrade_head(settings.database_url)
    sessions = make_session_factory(make_engine(settings.database_url))
    app = create_app(settings)
    fake = FakeOps()
    app.state.services.extras["ops"] = fake
    with TestClient(app) as c:
        c.user = create_key(sessions, "acme", rate_per_minute=0)[0]
        c.operator = create_key(sessions, "acme", rate_per_minute=0, role="operator")[0]
        c.cluster = create_key(sessions, "acme", rate_per_minute=0, role="cluster-operator")[0]
        c.fake = fake
        yield c


def test_a_user_key_gets_403_on_the_operations_data_and_an_operator_key_200(client: Any) -> None:
    for method, path in OPS_PATHS:
        r = client.request(method, path, headers={"Authorization": f"Bearer {client.user}"})
        assert r.status_code == 403, r.text
        assert r.json()["error"]["code"] == "FORBIDDEN"
        assert client.request(method, path).status_code == 401
    assert client.fake.calls == 0  # nothing was collected for the refused key
    r = client.get("/v1/ops/status", headers={"Authorization": f"Bearer {client.operator}"})
    assert r.status_code == 200 and r.json()["index"]["alias"] == "a"
    # The user key still reads its tenant's data.
    r = client.get("/v1/documents", headers={"Authorization": f"Bearer {client.user}"})
    assert r.status_code == 200


def test_an_operator_sees_its_tenant_and_a_cluster_operator_the_deployment(client: Any) -> None:
    for key in (client.operator, client.cluster):
        r = client.get("/v1/ops/status", headers={"Authorization": f"Bearer {key}"})
        assert r.status_code == 200, r.text
    assert client.fake.scopes == ["acme", None]
    me = client.get("/v1/me", headers={"Authorization": f"Bearer {client.cluster}"}).json()
    assert me == {"tenant": "acme", "role": "cluster-operator"}


def test_the_role_is_stored_with_the_key_and_checked(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'k.db'}"
    upgrade_head(url)
    sessions = make_session_factory(make_engine(url))
    user, _ = create_key(sessions, "acme")
    op, _ = create_key(sessions, "acme", role="operator")
    found_user, found_op = lookup(sessions, user), lookup(sessions, op)
    assert found_user is not None and found_user.role == "user" and not found_user.is_operator
    assert found_op is not None and found_op.is_operator and not found_op.is_cluster_operator
    cluster = lookup(sessions, create_key(sessions, "acme", role="cluster-operator")[0])
    assert cluster is not None and cluster.is_operator and cluster.is_cluster_operator
    with pytest.raises(ValueError, match="role"):
        create_key(sessions, "acme", role="root")  # type: ignore[arg-type]


def test_keys_create_role_operator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    monkeypatch.setenv("RAGSTREAM_DATABASE__URL", url)
    get_settings.cache_clear()
    try:
        runner = CliRunner()
        result = runner.invoke(
            cli, ["keys", "create", "--tenant", "ops", "--role", "operator", "-q"]
        )
        assert result.exit_code == 0, result.output
        key = result.output.strip()
        sessions = make_session_factory(make_engine(url))
        found = lookup(sessions, key)
        assert found is not None and found.is_operator and found.tenant == "ops"
        plain = runner.invoke(cli, ["keys", "create", "--tenant", "ops", "-q"])
        assert lookup(sessions, plain.output.strip()).role == "user"  # type: ignore[union-attr]
        bad = runner.invoke(cli, ["keys", "create", "--role", "admin"])
        assert bad.exit_code == 2 and "role" in bad.output
        listing = runner.invoke(cli, ["keys", "list"], env={"COLUMNS": "200"})
        assert "operator" in listing.output and "user" in listing.output
        assert [k.role for k in list_keys(sessions)] == ["user", "operator"]
    finally:
        get_settings.cache_clear()


def test_the_demo_key_is_an_operator_key_and_replaces_a_user_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from entry import demo

    settings = settings_for(tmp_path)
    settings = settings.model_copy(
        update={"infra": settings.infra.model_copy(update={"local_dir": tmp_path})}
    )
    upgrade_head(settings.database_url)
    sessions = make_session_factory(make_engine(settings.database_url))
    old, _ = create_key(sessions, "default", name="demo")
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "api_key").write_text(old)
    key = demo.demo_key(settings)
    found = lookup(sessions, key)
    assert key != old and found is not None and found.is_cluster_operator
    assert demo.demo_key(settings) == key  # kept from then on
