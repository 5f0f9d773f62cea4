"""Optional PostgreSQL 15 cluster from Debian's ``postgresql-15`` binaries.

A private cluster in ``.local/postgres/data``, created with ``initdb`` as the service user
(``initdb`` and ``pg_ctl`` refuse root), trust authentication, listening on
``host:postgres_port`` with its unix socket under ``.local/postgres/run``. The superuser
role is named after the service user, and a database ``ragstream`` is created once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import structlog

from infra import proc
from infra.errors import InfraError, ServiceStartError
from infra.service import Service
from infra.system import apt_install, ensure_reachable, owned_dirs, run, service_user, user_env
from ragstream.settings import Settings

log = structlog.get_logger(__name__)

DATABASE = "ragstream"


def postgres_url(settings: Settings) -> str:
    """Return the SQLAlchemy URL of the local PostgreSQL database.

    Args:
        settings: The settings tree (``settings.infra`` host, port and service user).

    Returns:
        ``postgresql+psycopg://ragstream@127.0.0.1:5433/ragstream`` for the defaults.
    """
    infra = settings.infra
    return (
        f"postgresql+psycopg://{infra.service_user}@{infra.host}:{infra.postgres_port}/{DATABASE}"
    )


class PostgresService(Service):
    """Private PostgreSQL cluster (only when ``settings.infra.postgres`` or ``--postgres``)."""

    name = "postgres"
    port_fields = ("postgres_port",)

    def __init__(self, settings: Settings) -> None:
        """Remember the settings; nothing is installed or started here."""
        super().__init__(settings)
        self._user: str | None = None

    @property
    def data_dir(self) -> Path:
        """``PGDATA``."""
        return self.home / "data"

    @property
    def pid_file(self) -> Path:
        """PostgreSQL's own ``postmaster.pid``."""
        return self.data_dir / "postmaster.pid"

    @property
    def marker(self) -> str:
        """The data directory, on the postmaster's command line (``postgres -D DIR``)."""
        return str(self.data_dir)

    def log_files(self) -> list[Path]:
        """The server log that ``pg_ctl -l`` writes."""
        return [self.home / "logs" / "postgres.log"]

    def _bin(self, name: str) -> str:
        return str(self.infra.postgres_bin_dir / name)

    def _env(self) -> dict[str, str]:
        return user_env(self._user, self.home, PGDATA=str(self.data_dir))

    def ragstream_conf(self) -> str:
        """Return the settings included from ``postgresql.conf``."""
        lines = [
            "# Written by infra/postgres_service.py on every start; edit the settings instead.",
            f"listen_addresses = '{self.infra.host}'",
            f"port = {self.infra.postgres_port}",
            f"unix_socket_directories = '{self.home / 'run'}'",
        ]
        return "\n".join(lines) + "\n"

    def install(self) -> None:
        """Install postgresql-15 if missing; ``initdb`` once; write our config include."""
        apt_install("postgresql-15", self.infra.postgres_bin_dir / "postgres")
        self._user = service_user(self.infra.service_user)
        ensure_reachable(self._user, self.home)
        owned_dirs(self._user, self.home, self.home / "run", self.home / "logs")
        if not (self.data_dir / "PG_VERSION").is_file():
            run(
                [
                    self._bin("initdb"),
                    "-D",
                    str(self.data_dir),
                    "-U",
                    self.infra.service_user,
                    "--auth=trust",
                    "-E",
                    "UTF8",
                    "--locale=C.UTF-8",
                ],
                user=self._user,
                env=self._env(),
                cwd=self.home,
            )
            conf = self.data_dir / "postgresql.conf"
            with conf.open("a") as fh:
                fh.write("\ninclude = 'ragstream.conf'\n")
        conf_include = self.data_dir / "ragstream.conf"
        conf_include.write_text(self.ragstream_conf())

    def launch(self) -> None:
        """``pg_ctl start -w`` as the service user (waits for the server itself)."""
        timeout = str(int(self.infra.start_timeout_s))
        try:
            run(
                [
                    self._bin("pg_ctl"),
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_files()[0]),
                    "-t",
                    timeout,
                    "-w",
                    "start",
                ],
                user=self._user,
                env=self._env(),
                cwd=self.home,
                timeout_s=self.infra.start_timeout_s + 10,
            )
        except InfraError as exc:
            raise ServiceStartError(self._failure(f"did not start: {exc}")) from exc

    def after_ready(self) -> None:
        """Create the ``ragstream`` database once."""
        import psycopg

        with psycopg.connect(self._conninfo("postgres"), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)
            ).fetchone()
            if exists is None:
                conn.execute(f'CREATE DATABASE "{DATABASE}"')

    def probe(self, timeout_s: float) -> tuple[bool, str]:
        """Run ``SELECT 1`` with psycopg."""
        import psycopg

        try:
            with psycopg.connect(
                self._conninfo("postgres"), connect_timeout=max(1, int(timeout_s))
            ) as conn:
                conn.execute("SELECT 1").fetchone()
                version = conn.info.server_version
        except psycopg.Error as exc:
            return False, f"SELECT 1 failed: {str(exc).strip().splitlines()[0]}"
        return True, f"SELECT 1 ok, server {version // 10000}.{version % 10000}"

    def stop(self) -> None:
        """``pg_ctl stop -m fast``; SIGINT (fast shutdown) to the postmaster if that fails."""
        pid = self.running_pid()
        if pid is None:
            return
        self._user = service_user(self.infra.service_user)
        try:
            run(
                [self._bin("pg_ctl"), "-D", str(self.data_dir), "-m", "fast", "-w", "stop"],
                user=self._user,
                env=self._env(),
                cwd=self.home,
                timeout_s=60.0,
            )
        except InfraError as exc:
            log.warning("pg_ctl stop failed, signalling", service=self.name, error=str(exc))
            proc.terminate(pid, name=self.name, sig=signal.SIGINT)
        if proc.wait_gone(pid, 30.0):
            log.info("service stopped", service=self.name, pid=pid)

    def _conninfo(self, dbname: str) -> str:
        return (
            f"host={self.infra.host} port={self.infra.postgres_port} "
            f"user={self.infra.service_user} dbname={dbname}"
        )
