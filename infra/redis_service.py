"""A private Redis instance from Debian's ``redis-server`` (never the system service).

Our own ``redis.conf`` under ``.local/redis``: bound to ``host:redis_port``, AOF on
(``appendonly yes``), ``daemonize no`` and started detached by :mod:`infra.proc`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from infra import proc
from infra.service import Service
from infra.system import apt_install, user_env


class RedisService(Service):
    """Redis for Celery, caches and idempotency keys."""

    name = "redis"
    port_fields = ("redis_port",)

    @property
    def config_file(self) -> Path:
        """The generated ``redis.conf``."""
        return self.home / "redis.conf"

    @property
    def marker(self) -> str:
        """Redis rewrites its process title to ``redis-server HOST:PORT``; match the name."""
        return "redis-server"

    def log_files(self) -> list[Path]:
        """The server's stdout/stderr (Redis logs to stdout with ``logfile ""``)."""
        return [self.home / "logs" / "redis.log"]

    def redis_conf(self) -> str:
        """Return the configuration of the private instance."""
        lines = [
            "# Written by infra/redis_service.py on every start; edit the settings instead.",
            f"bind {self.infra.host}",
            f"port {self.infra.redis_port}",
            "protected-mode yes",
            "daemonize no",
            'logfile ""',
            f"dir {self.home / 'data'}",
            "appendonly yes",
            "save 3600 1 300 100 60 10000",
        ]
        return "\n".join(lines) + "\n"

    def install(self) -> None:
        """Install ``redis-server`` if missing; write ``redis.conf``."""
        apt_install("redis-server", "redis-server")
        (self.home / "data").mkdir(parents=True, exist_ok=True)
        self.config_file.write_text(self.redis_conf())

    def launch(self) -> int:
        """Start ``redis-server redis.conf`` detached; write and return its PID."""
        binary = shutil.which("redis-server") or "redis-server"
        pid = proc.spawn_detached(
            [binary, str(self.config_file)],
            self.log_files()[0],
            env=user_env(None, self.home),
            cwd=self.home,
        )
        proc.write_pid(self.pid_file, pid)
        return pid

    def probe(self, timeout_s: float) -> tuple[bool, str]:
        """Send ``PING`` with redis-py."""
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        client = redis.Redis(
            host=self.infra.host,
            port=self.infra.redis_port,
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 0),  # a health check answers now, it does not retry
        )
        try:
            pong = client.ping()
            version = client.info("server").get("redis_version", "?")
        except (redis.RedisError, OSError) as exc:
            return False, f"PING failed: {exc}"
        finally:
            client.close()
        return bool(pong), f"PONG, redis {version}"
