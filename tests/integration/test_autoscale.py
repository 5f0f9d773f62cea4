"""Scaling on consumer lag on one machine (issue 26, item 3): the supervisor's autoscaler
starts more processes of a pool while its group's lag on the real broker stays above the
threshold, never more than the maximum, and stops the added ones once the lag stays 0."""

from __future__ import annotations

import io
import sys
import threading
import time
import uuid
from pathlib import Path

from kafka import KafkaProducer
from kafka.admin import KafkaAdminClient

from entry.autoscale import Autoscaler, LagPolicy, ScaledPool
from entry.supervisor import Supervisor
from ragstream.retry import RetryPolicy
from ragstream.settings import Settings
from tests.integration.kafkakit import create_topics, wait_for
from topics.lag import GroupLag

RECORDS = 1200
MAX = 3


def _members(admin: KafkaAdminClient, group: str) -> int:
    (described,) = admin.describe_consumer_groups([group])
    return len(described.members) if described.state == "Stable" else -1


def test_lag_adds_processes_up_to_the_maximum_and_idle_removes_them(tmp_path: Path) -> None:
    settings = Settings()
    bootstrap = settings.kafka.bootstrap_servers
    run = f"autoscale-{uuid.uuid4().hex[:8]}"
    topic, group = f"{run}.work", f"{run}.group"
    create_topics(settings, [topic], partitions=6)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    for i in range(RECORDS):
        producer.send(topic, value=str(i).encode())
    producer.flush()
    producer.close()
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    # 20 ms a record: one process works off ~50 records/s, the backlog takes it ~24 s.
    command = (
        f"exec {sys.executable} -m tests.integration.lagpool --bootstrap {bootstrap} "
        f"--topic {topic} --group {group} --out {out_dir} --work-ms 20"
    )
    log = io.StringIO()
    supervisor = Supervisor(
        {"lagpool": command},
        cwd=Path.cwd(),
        state_dir=tmp_path,
        backoff=RetryPolicy(max_attempts=100, base_ms=500, cap_ms=2000, jitter=False),
        stop_timeout_s=15,
        out=log,
    )
    policy = LagPolicy(floor=1, ceiling=MAX, lag_threshold=100, up_after_s=2, idle_after_s=4)
    pool = ScaledPool("lagpool", command, group, topic, policy, base=1)
    lags = GroupLag(settings.kafka)
    scaler = Autoscaler(supervisor, [pool], lags.lag, interval_s=0.5)
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    threads = [threading.Thread(target=t, daemon=True) for t in (supervisor.run, scaler.run)]
    seen_processes: list[int] = []
    seen_members: list[int] = []
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            seen_processes.append(len(supervisor.states))
            seen_members.append(_members(admin, group))
            if max(seen_processes) == MAX and lags.lag(group, topic) == 0:
                break
            time.sleep(0.5)
        assert max(seen_processes) == MAX, (seen_processes, log.getvalue()[-3000:])
        assert pool.peak == MAX
        # The group really grew: all MAX processes were members at once after a rebalance.
        assert max(seen_members) == MAX, seen_members
        assert wait_for(lambda: lags.lag(group, topic) == 0, 120, 0.5), log.getvalue()[-3000:]
        # Idle: the added processes are stopped again, the Procfile's one stays.
        assert wait_for(lambda: len(supervisor.states) == 1, 60, 0.5), log.getvalue()[-3000:]
        assert list(supervisor.states) == ["lagpool"] and not pool.added
        assert wait_for(lambda: _members(admin, group) == 1, 60, 0.5)
    finally:
        scaler.stop()
        supervisor.stop()
        for t in threads:
            t.join(timeout=60)
        lags.close()
        admin.delete_topics([topic])
        admin.close()
    text = log.getvalue()
    assert text.count("autoscale.up") == MAX - 1 and text.count("autoscale.down") == MAX - 1
    done = {line for f in out_dir.iterdir() for line in f.read_text().split()}
    assert done == {str(i) for i in range(RECORDS)}  # every record worked off
    assert max(seen_processes) <= MAX
