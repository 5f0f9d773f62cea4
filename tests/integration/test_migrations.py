"""``alembic upgrade head`` builds the metadata store on SQLite and on PostgreSQL, and the
migrations match the SQLAlchemy models exactly."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from ragstream.db import Base, Document, make_engine, make_session_factory, upgrade_head
from ragstream.settings import Settings

TABLES = {
    "documents",
    "ingest_jobs",
    "ingest_job_items",
    "query_log",
    "query_feedback",
    "webhook_deliveries",
    "webhook_attempts",
    "api_keys",
    "webhook_endpoints",
    "webhook_tenant_secrets",
    "ingest_events",
    "files",
    "vector_stores",
    "vector_store_files",
    "alembic_version",
}


def _check_schema(url: str) -> None:
    upgrade_head(url)
    upgrade_head(url)  # a second upgrade is a no-op
    engine = make_engine(url)
    try:
        assert set(inspect(engine).get_table_names()) == TABLES
        with engine.connect() as conn:
            diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
        assert diff == [], f"models and migrations differ: {diff}"
        with make_session_factory(engine)() as session:
            session.add(Document(tenant="t1", doc_id="d1", content_hash="0" * 64, version=1))
            session.commit()
            row = session.query(Document).filter_by(tenant="t1", doc_id="d1").one()
            assert row.created_at.tzinfo is not None or engine.dialect.name == "sqlite"
    finally:
        engine.dispose()


def test_upgrade_head_on_sqlite(tmp_path: Path) -> None:
    _check_schema(f"sqlite:///{tmp_path / 'meta.db'}")


@pytest.fixture
def postgres_url(settings: Settings) -> Iterator[str]:
    """A fresh database on the local PostgreSQL server, dropped afterwards."""
    from infra import postgres_url as server_url

    admin_url = server_url(settings)
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield admin_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.mark.postgres
def test_upgrade_head_on_postgresql(postgres_url: str) -> None:
    _check_schema(postgres_url)


def test_alembic_cli_upgrade_head(tmp_path: Path, unique_name: Callable[[str], str]) -> None:
    """The plain ``alembic upgrade head`` from the repository root uses the settings' URL."""
    import subprocess
    import sys

    from ragstream.settings import PROJECT_ROOT

    db = tmp_path / f"{unique_name('cli')}.db"
    env = {"RAGSTREAM_DATABASE__URL": f"sqlite:///{db}", "PATH": str(Path(sys.executable).parent)}
    subprocess.run(
        [sys.executable, "-m", "alembic", "upgrade", "head"],
        cwd=PROJECT_ROOT,
        env=env,
        check=True,
        capture_output=True,
    )
    engine = make_engine(f"sqlite:///{db}")
    assert "query_log" in inspect(engine).get_table_names()
    engine.dispose()


def test_endpoints_registered_before_per_endpoint_keys_get_one_each(tmp_path: Path) -> None:
    """Revision 0004 gives every existing webhook endpoint its own fresh signing key."""
    from alembic import command

    from ragstream.db.engine import alembic_config

    url = f"sqlite:///{tmp_path / 'old.db'}"
    command.upgrade(alembic_config(url), "0003")
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            for i in range(2):
                conn.execute(
                    text(
                        "INSERT INTO webhook_endpoints (id, tenant, url, event_types, description,"
                        " created_at) VALUES (:id, 't', 'http://x/', '[\"*\"]', '', :now)"
                    ),
                    {"id": f"e{i}", "now": "2026-11-30 00:00:00"},
                )
        upgrade_head(url)
        with engine.connect() as conn:
            keys = [r[0] for r in conn.execute(text("SELECT secret FROM webhook_endpoints"))]
        assert len(keys) == 2 and len(set(keys)) == 2
        assert all(k.startswith("whsec_") for k in keys)
    finally:
        engine.dispose()
