"""A whole private ragstream for end-to-end tests: real pool processes (`ragstream worker`)
on their own topic prefix, index alias and SQL store, and API servers in this process (or, with
:meth:`Stack.api_process`, in processes of their own: `ragstream api`).

Everything the product talks to is real: Kafka, Elasticsearch, Redis, the embedding model and
the llama.cpp server that ``make up`` starts.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from api.app import create_app
from api.auth import create_key
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import Settings
from topics.admin import ensure_registry_topics, make_admin

RAGSTREAM = str(Path(sys.executable).parent / "ragstream")
QUERY_POOLS = ("ingest", "retrieval", "rerank", "generation-small", "generation-large", "delivery")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class ApiServer:
    """One uvicorn server (one API process's worth of state) in a thread."""

    settings: Settings
    port: int = field(default_factory=free_port)
    server: uvicorn.Server | None = None
    thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ApiServer:
        app = create_app(self.settings)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("API server did not start")
            time.sleep(0.05)
        self.app = app
        return self

    @property
    def waiting(self) -> int:
        """Registered reply waiters of this process (a leak shows here)."""
        replies = self.app.state.services.extras["queries"].replies
        return 0 if replies is None else int(replies.waiting)

    def stop(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(timeout=15)


@dataclass
class ApiProcess:
    """One API server as an OS process of its own: ``ragstream api`` (the Procfile's ``api``)
    with ``env`` (the stack's settings), its output in ``log_path``."""

    env: dict[str, str]
    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    _log: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "start() first"
        return self.proc.pid

    def start(self, timeout_s: float = 60) -> ApiProcess:
        """Start it and wait until ``GET /healthz`` answers 200.

        Raises:
            RuntimeError: it exited, or did not answer within ``timeout_s``.
        """
        self._log = self.log_path.open("wb")
        self.proc = subprocess.Popen(
            [RAGSTREAM, "api", "--host", "127.0.0.1", "--port", str(self.port)],
            env=self.env, stdout=self._log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                text = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"API process exited {self.proc.returncode}:\n{text}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise RuntimeError(f"API process did not answer within {timeout_s} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()


@dataclass
class Stack:
    """Pools as processes plus API servers, all under ``name``."""

    name: str
    settings: Settings
    env: dict[str, str]
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    apis: list[ApiServer] = field(default_factory=list)
    api_procs: list[ApiProcess] = field(default_factory=list)
    log_dir: Path | None = None
    keys: dict[str, str] = field(default_factory=dict)
    logs: list[Any] = field(default_factory=list)

    def key(self, tenant: str, **kw: Any) -> str:
        sessions = make_session_factory(make_engine(self.settings.database_url))
        return create_key(sessions, tenant, **kw)[0]

    def api(self, settings: Settings | None = None) -> ApiServer:
        server = ApiServer(settings or self.settings).start()
        self.apis.append(server)
        return server

    def api_process(self) -> ApiProcess:
        """An API server in an OS process of its own, with the stack's settings (stopped by
        :meth:`close`)."""
        assert self.log_dir is not None
        n = len(self.api_procs)
        server = ApiProcess(self.env, self.log_dir / f"api-{n}.log")
        self.api_procs.append(server)
        return server.start()

    def start_pools(self, pools: tuple[str, ...] = QUERY_POOLS) -> None:
        assert self.log_dir is not None
        for pool in pools:
            log = (self.log_dir / f"{pool}.log").open("wb")
            self.logs.append(log)
            self.procs[pool] = subprocess.Popen(
                [RAGSTREAM, "worker", pool], env=self.env, stdout=log, stderr=subprocess.STDOUT
            )

    def wait_ready(self, timeout_s: float = 180) -> None:
        """Wait until every pool process has joined its group (its log says so)."""
        assert self.log_dir is not None
        deadline = time.monotonic() + timeout_s
        pending = set(self.procs)
        while pending and time.monotonic() < deadline:
            for pool in list(pending):
                proc = self.procs[pool]
                text = (self.log_dir / f"{pool}.log").read_text(errors="replace")
                if proc.poll() is not None:
                    raise RuntimeError(f"pool {pool} exited {proc.returncode}:\n{text[-3000:]}")
                if "assigned" in text or "partitions assigned" in text:
                    pending.discard(pool)
            time.sleep(0.5)
        if pending:
            raise RuntimeError(f"pools not ready: {sorted(pending)}")

    def close(self) -> None:
        for server in self.apis:
            server.stop()
        for api in self.api_procs:
            api.stop()
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in self.logs:
            log.close()
        self.drop_resources()

    def drop_resources(self) -> None:
        """Delete this stack's topics and index (tests must not pile them up)."""
        from elasticsearch import Elasticsearch

        admin = make_admin(self.settings.kafka)
        prefix = self.settings.kafka.topic_prefix
        try:
            mine = [t for t in admin.list_topics() if t.startswith(prefix)]
            if mine:
                admin.delete_topics(mine)
        except Exception as exc:  # cleanup is best effort
            print(f"could not delete topics: {exc}")
        finally:
            admin.close()
        es = Elasticsearch(self.settings.elasticsearch.hosts)
        alias = self.settings.elasticsearch.index_alias
        try:  # by name: wildcard deletes are refused (action.destructive_requires_name)
            found = es.options(ignore_status=404).indices.get(index=f"{alias}-v*")
            names = [n for n in found if n.startswith(f"{alias}-v")]
            if names:
                es.indices.delete(index=",".join(names))
        finally:
            es.close()


def make_stack(tmp: Path, tag: str, **overrides: str) -> Stack:
    """Settings and environment of a private stack: topics ``<name>.*``, index ``<name>``,
    SQLite under ``tmp``, no pool metrics ports, webhooks allowed to 127.0.0.1."""
    name = f"t-{tag}-{int(time.time() * 1000) % 10_000_000}"
    env = dict(os.environ)  # the machine's own settings (e.g. service ports) stay
    env.update(
        {
            "RAGSTREAM_KAFKA__TOPIC_PREFIX": name + ".",
            "RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS": name,
            "RAGSTREAM_DATABASE__URL": f"sqlite:///{tmp / 'store.db'}",
            "RAGSTREAM_WEBHOOKS__ALLOW_NETWORKS": '["127.0.0.1/32"]',
            "RAGSTREAM_LOGGING__FORMAT": "json",
        }
    )
    for pool in ("ingest", "retrieval", "rerank", "generation_small", "generation_large"):
        env[f"RAGSTREAM_POOLS__{pool.upper()}__METRICS_PORT"] = "0"
        env[f"RAGSTREAM_POOLS__{pool.upper()}__MAX_WAIT_MS"] = "50"
    env["RAGSTREAM_POOLS__DELIVERY__METRICS_PORT"] = "0"
    env.update(overrides)
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.items() if k.startswith("RAGSTREAM_")})
    try:
        settings = Settings()
    finally:
        os.environ.clear()
        os.environ.update(saved)
    upgrade_head(settings.database_url)
    admin = make_admin(settings.kafka)
    ensure_registry_topics(admin, settings.kafka)
    admin.close()
    log_dir = tmp / "logs"
    log_dir.mkdir(exist_ok=True)
    return Stack(name, settings, env, log_dir=log_dir)


def wait_for(
    fn: Any, timeout_s: float = 60, interval_s: float = 0.25, what: str = "condition"
) -> Any:
    """Poll ``fn()`` until it returns a truthy value; return it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(interval_s)
    raise AssertionError(f"timed out waiting for {what}")


def get_json(url: str, key: str) -> tuple[int, Any]:
    r = httpx.get(url, headers={"Authorization": f"Bearer {key}"}, timeout=30)
    return r.status_code, r.json()


def index_document(url: str, key: str, doc_id: str, text: str, **fields: Any) -> dict[str, Any]:
    """``POST /v1/documents`` a Markdown document (``fields``: more of the body, ``readers``)
    and wait up to 120 s for it to be ``indexed``; its record (``GET /v1/documents/{id}``)."""
    body = {"doc_id": doc_id, "text": text, "content_type": "text/markdown", **fields}
    r = httpx.post(
        f"{url}/v1/documents", json=body, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )
    assert r.status_code == 202, r.text
    record: dict[str, Any] = wait_for(
        lambda: (
            (d := get_json(f"{url}/v1/documents/{doc_id}", key)[1]).get("status") == "indexed" and d
        ),
        timeout_s=120,
        what=f"document {doc_id} indexed",
    )
    return record
