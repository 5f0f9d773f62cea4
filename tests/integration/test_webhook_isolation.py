"""A dead receiver beside a live one (issue 25, item 5): the live receiver's deliveries do not
wait behind the dead one's, which holds at most ``per_receiver_concurrency`` threads.

A real ``ragstream celery-worker --queues webhooks`` (threads), real Redis and SQLite; the dead
receiver accepts connections and never answers, so each attempt to it lasts the whole
``webhooks.timeout_s``.
"""

from __future__ import annotations

import os
import socket
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest
import redis

from tests.integration.hookkit import HookEnv, Receiver, deliveries, hook_env, receivers
from tests.integration.kafkakit import wait_for
from workers.webhooks import signing
from workers.webhooks.delivery import enqueue
from workers.webhooks.outbox import CeleryScheduler, Scheduled

__all__ = ["hook_env", "receivers"]  # fixtures

TIMEOUT_S = 5.0


@dataclass
class DeadReceiver:
    """Accepts TCP connections, reads what is sent and never answers; counts how many
    connections are open at once."""

    sock: socket.socket = field(default_factory=socket.socket)
    open_now: int = 0
    most_open: int = 0
    accepted: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.accepted += 1
                self.open_now += 1
                self.most_open = max(self.most_open, self.open_now)
            threading.Thread(target=self._hold, args=(conn,), daemon=True).start()

    def _hold(self, conn: socket.socket) -> None:
        with conn:
            while conn.recv(65536):  # until the client gives up and closes
                pass
        with self.lock:
            self.open_now -= 1

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def dead() -> Iterator[DeadReceiver]:
    receiver = DeadReceiver()
    yield receiver
    receiver.close()


@dataclass
class Outcome:
    """Seconds from scheduling to receipt of each live delivery; the dead receiver."""

    live_s: list[float]
    dead: DeadReceiver


def dead_beside_live(
    env: HookEnv,
    live: Receiver,
    dead: DeadReceiver,
    *,
    n_dead: int,
    n_live: int,
    worker_args: tuple[str, ...],
    settings: dict[str, str],
) -> Outcome:
    """Schedule ``n_dead`` deliveries to ``dead``, then ``n_live`` to ``live``, on a worker
    started with ``worker_args`` and ``settings``; wait for every live delivery."""
    env.env.update(
        {
            "RAGSTREAM_WEBHOOKS__TIMEOUT_S": str(TIMEOUT_S),
            "RAGSTREAM_WEBHOOKS__MAX_ATTEMPTS": "1",
            "RAGSTREAM_WEBHOOKS__SWEEP_INTERVAL_S": "0",
            **settings,
        }
    )
    env.start_worker(*worker_args)

    def add(url: str, i: int) -> Scheduled:
        delivery = enqueue(
            env.sessions,
            webhook_id=f"msg_{i}",
            tenant="acme",
            event_type="query.completed",
            url=url,
            payload={"n": i},
        )
        assert delivery is not None
        return Scheduled(delivery, f"msg_{i}")

    planned = [add(dead.url, i) for i in range(n_dead)]
    planned += [add(live.url, n_dead + i) for i in range(n_live)]
    client = redis.Redis.from_url(env.settings.redis.url)
    try:
        started = time.monotonic()
        assert len(CeleryScheduler(client, marker_ttl_s=3600).schedule(planned)) == len(planned)
        assert wait_for(lambda: live.verified == n_live, 120), env.log()
    finally:
        client.close()
    return Outcome([r.at - started for r in live.received], dead)


def test_a_dead_receiver_does_not_hold_up_a_live_one(
    hook_env: HookEnv, receivers: Callable[..., Receiver], dead: DeadReceiver
) -> None:
    key = signing.create_tenant_secret(hook_env.sessions, "acme")
    assert key is not None
    live = receivers(keys=[key])
    # 4 threads and 8 deliveries to the dead receiver queued first: without the per-receiver
    # limit all 4 threads would wait on it for two rounds of TIMEOUT_S.
    out = dead_beside_live(
        hook_env,
        live,
        dead,
        n_dead=8,
        n_live=8,
        worker_args=("--queues", "webhooks"),
        settings={
            "RAGSTREAM_WEBHOOKS__CONCURRENCY": "4",
            "RAGSTREAM_WEBHOOKS__PER_RECEIVER_CONCURRENCY": "2",
        },
    )
    report = (
        f"live deliveries: p50 {statistics.median(out.live_s):.2f} s, "
        f"max {max(out.live_s):.2f} s; dead receiver: at most {dead.most_open} connections"
    )
    print(report)
    # The old layout (one slot, deliveries in order) makes the first live delivery wait for
    # all 8 dead attempts (40 s); here the live ones are through before the dead ones are
    # (the limit lets 2 of them run at a time: 4 rounds of TIMEOUT_S).
    assert max(out.live_s) < 2 * TIMEOUT_S, report
    assert any(row.status == "pending" for row, _ in deliveries(hook_env.sessions)[:8]), report
    # The dead receiver's deliveries each get their one attempt, none burnt waiting for a slot.
    assert wait_for(
        lambda: all(row.status == "failed" for row, _ in deliveries(hook_env.sessions)[:8]),
        90,
    ), hook_env.log()
    assert [len(attempts) for _, attempts in deliveries(hook_env.sessions)] == [1] * 16
    assert dead.most_open <= 2 and dead.accepted == 8, report


@pytest.mark.skipif(
    not os.environ.get("RAGSTREAM_TEST_WEBHOOK_BASELINE"),
    reason="a measurement of the old layout (one process, no limit), not a check",
)
def test_baseline_one_slot_and_no_limit(
    hook_env: HookEnv, receivers: Callable[..., Receiver], dead: DeadReceiver
) -> None:
    key = signing.create_tenant_secret(hook_env.sessions, "acme")
    assert key is not None
    live = receivers(keys=[key])
    out = dead_beside_live(
        hook_env,
        live,
        dead,
        n_dead=8,
        n_live=8,
        worker_args=("--queues", "webhooks", "--concurrency", "1"),
        settings={"RAGSTREAM_WEBHOOKS__PER_RECEIVER_CONCURRENCY": "100"},
    )
    print(
        f"baseline live deliveries: p50 {statistics.median(out.live_s):.2f} s, "
        f"max {max(out.live_s):.2f} s"
    )
