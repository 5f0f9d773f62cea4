"""Webhook test helpers: a local receiver that verifies Standard Webhooks signatures, and a
Celery worker of its own (private queue and SQLite store) for end-to-end delivery tests."""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from ragstream.celery_app import configure_celery
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import WebhookAttempt, WebhookDelivery
from ragstream.settings import Settings
from tests.integration.kafkakit import wait_for


@dataclass
class Received:
    """One POST the receiver accepted: its ``webhook-id`` header, verified JSON body and its
    ``webhook-signature`` header (``v1,...`` signatures, space-separated)."""

    webhook_id: str
    payload: Any
    signature: str = ""
    user_agent: str = ""
    at: float = 0.0  # time.monotonic() of its receipt


class Receiver:
    """A local HTTP server that answers each POST with the next of ``statuses`` (then 200).

    Every body is verified with ``standardwebhooks.Webhook(key).verify(body, headers)`` for
    each of ``keys`` (settable later: the key a receiver holds); a request that no key verifies
    is answered 401 and counted in ``rejected``.
    """

    def __init__(
        self,
        statuses: list[int] | None = None,
        redirect_to: str | None = None,
        keys: list[str] | None = None,
    ) -> None:
        self.statuses = list(statuses or [])
        self.keys = list(keys or [])
        self.received: list[Received] = []
        self.rejected = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                headers = {k.lower(): v for k, v in self.headers.items()}
                payload = outer.verify(body, headers)
                if payload is None:
                    with outer.lock:
                        outer.rejected += 1
                    self.send_response(401)
                else:
                    with outer.lock:
                        outer.received.append(
                            Received(
                                headers["webhook-id"],
                                payload,
                                headers["webhook-signature"],
                                headers.get("user-agent", ""),
                                time.monotonic(),
                            )
                        )
                        status = outer.statuses.pop(0) if outer.statuses else 200
                    if redirect_to:
                        self.send_response(307)
                        self.send_header("location", redirect_to)
                    else:
                        self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def verify(self, body: bytes, headers: dict[str, str]) -> Any:
        """The verified payload, or ``None`` if no key of the receiver verifies it."""
        for key in self.keys:
            try:
                return Webhook(key).verify(body, headers)
            except WebhookVerificationError:
                continue
        return None

    @property
    def verified(self) -> int:
        """POSTs whose signature verified."""
        with self.lock:
            return len(self.received)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    """``make(statuses=None, keys=None)`` -> a started :class:`Receiver`; all closed after the
    test."""
    made: list[Receiver] = []

    def make(statuses: list[int] | None = None, keys: list[str] | None = None) -> Receiver:
        r = Receiver(statuses, keys=keys)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


def deliveries(sessions: sessionmaker[Session]) -> list[tuple[WebhookDelivery, list[Any]]]:
    """Every delivery row with ``[(attempt, status_code), ...]``, in id order."""
    with sessions() as s:
        out = []
        for row in s.scalars(select(WebhookDelivery).order_by(WebhookDelivery.id)):
            attempts = s.scalars(
                select(WebhookAttempt)
                .where(WebhookAttempt.delivery_id == row.id)
                .order_by(WebhookAttempt.attempt)
            )
            out.append((row, [(a.attempt, a.status_code) for a in attempts]))
        return out


@dataclass
class HookEnv:
    """A private SQLite store and Celery queue, the settings built on them, and a worker."""

    settings: Settings
    sessions: sessionmaker[Session]
    env: dict[str, str]
    tmp: Path
    worker: subprocess.Popen[bytes] | None = None

    def start_worker(self, *args: str) -> None:
        """Start ``ragstream celery-worker [args]`` on the private queue; wait until it is
        ready."""
        log = self.tmp / "worker.log"
        with log.open("ab") as out:
            self.worker = subprocess.Popen(
                [sys.executable, "-m", "entry.cli", "celery-worker", *args],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=out,
                start_new_session=True,
            )
        assert wait_for(lambda: "ready" in self.log(), 120), self.log()

    def log(self) -> str:
        path = self.tmp / "worker.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def stop_worker(self) -> None:
        proc = self.worker
        if proc is None or proc.poll() is not None:
            return
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)


@pytest.fixture
def hook_env(
    unique_name: Callable[[str], str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[HookEnv]:
    """Settings for a private store and queue; loopback allowlisted; fast back-off and sweeps.

    The Celery app of this process sends to the private queue during the test.
    """
    before = Settings()
    name = unique_name("hooks")
    values = {
        "RAGSTREAM_DATABASE__URL": f"sqlite:///{tmp_path / 'hooks.db'}",
        "RAGSTREAM_CELERY__QUEUE": name,
        "RAGSTREAM_WEBHOOKS__ALLOW_NETWORKS": json.dumps(["127.0.0.1/32"]),
        "RAGSTREAM_WEBHOOKS__BACKOFF_BASE_S": "0.5",
        "RAGSTREAM_WEBHOOKS__TIMEOUT_S": "5",
        "RAGSTREAM_WEBHOOKS__SWEEP_INTERVAL_S": "1",
        "RAGSTREAM_WEBHOOKS__SWEEP_AFTER_S": "2",
    }
    for k, v in values.items():
        monkeypatch.setenv(k, v)
    settings = Settings()
    upgrade_head(settings.database_url)
    engine = make_engine(settings.database_url)
    configure_celery(settings)
    env = HookEnv(settings, make_session_factory(engine), values, tmp_path)
    try:
        yield env
    finally:
        env.stop_worker()
        configure_celery(before)
        engine.dispose()
