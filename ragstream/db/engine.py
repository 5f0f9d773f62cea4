"""Engine and session factories, and the Alembic upgrade entry point."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

MIGRATIONS_DIR = Path(__file__).resolve().parents[1] / "migrations"


def make_engine(url: str, *, echo: bool = False) -> Engine:
    """Create an engine for ``url``.

    For SQLite the parent folder is created, foreign keys are enforced and WAL journaling is
    enabled so that readers do not block the single writer.

    Args:
        url: SQLAlchemy URL, e.g. ``sqlite:///.local/ragstream.db`` or
            ``postgresql+psycopg://user@127.0.0.1:5433/ragstream``.
        echo: log every SQL statement.
    """
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, echo=echo, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: object, _record: object) -> None:
            cur = dbapi_conn.cursor()  # type: ignore[attr-defined]
            cur.execute("PRAGMA foreign_keys=ON")
            cur.execute("PRAGMA journal_mode=WAL")
            cur.close()

        return engine
    return create_engine(url, echo=echo, pool_pre_ping=True)


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """Return a session factory bound to ``engine`` (``expire_on_commit=False``)."""
    return sessionmaker(engine, expire_on_commit=False)


def alembic_config(url: str) -> Config:
    """Build an Alembic config for ``url`` pointing at the packaged migrations."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade_head(url: str) -> None:
    """Run ``alembic upgrade head`` against ``url``.

    Raises:
        sqlalchemy.exc.OperationalError: the database cannot be reached.
    """
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    command.upgrade(alembic_config(url), "head")
