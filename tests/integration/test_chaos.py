"""The chaos suite (issue 15) in its CI size; ``make chaos`` runs the full size
(``CHAOS_SIZE=full``). See :mod:`tests.integration.chaoskit` for what a run does and counts."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.integration.chaoskit import MANUAL, PAGES, SIZES, run


@pytest.mark.timeout(1800)  # the CI size takes ~3.5 min on 2 cores, the full size ~10 min
def test_under_faults_every_accepted_query_finishes_and_no_webhook_is_sent_twice(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    size = SIZES[os.environ.get("CHAOS_SIZE", "ci")]
    assert all((MANUAL / p).is_file() for p in PAGES), "the PostgreSQL manual: make docs"

    lock = threading.Lock()  # the receiver's outage is logged from its own thread

    def log(line: str) -> None:
        with lock, capsys.disabled():
            print(f"chaos | {line}", flush=True)

    counts = run(size, tmp_path, log)
    with capsys.disabled():
        print("\n" + counts.table(), flush=True)
    assert counts.requests, "nothing was accepted"
    assert counts.never_finished == 0, [
        r for r in counts.requests.values() if r.status == "pending"
    ]
    assert counts.duplicates == 0, {k: v for k, v in counts.deliveries.items() if v > 1}
    # Every fault happened: each killed process came back, the poison reached the DLQ.
    assert all(counts.restarts[name] >= 1 for name in size.kill), counts.restarts
    assert counts.poison_dead_lettered == counts.poison_sent
    assert counts.by_status("answered"), "nothing was answered"


@pytest.mark.skipif(
    not os.environ.get("CHAOS_CLUSTER"),
    reason="the cluster run takes ~15 min: make chaos CLUSTER=1 (CHAOS_CLUSTER=1)",
)
@pytest.mark.timeout(3600)
def test_on_a_cluster_faults_refuse_nothing_lose_nothing_and_every_rebalance_completes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests.integration import chaos_cluster

    assert all((MANUAL / p).is_file() for p in PAGES), "the PostgreSQL manual: make docs"
    lock = threading.Lock()

    def log(line: str) -> None:
        with lock, capsys.disabled():
            print(f"chaos-cluster | {line}", flush=True)

    counts = chaos_cluster.run(tmp_path, log)
    with capsys.disabled():
        print("\n" + counts.table(), flush=True)
    assert counts.requests, "nothing was accepted"
    assert counts.never_finished == 0, [
        r for r in counts.requests.values() if r.status == "pending"
    ]
    assert counts.duplicates == 0, {k: v for k, v in counts.deliveries.items() if v > 1}
    # A quorum stood through every fault: nothing may be refused or fail at submission.
    assert counts.refused_total == 0, (counts.refused, counts.submit_errors)
    # Every fault and every rebalance happened (each wait fails the run when it times out).
    assert len(counts.windows) == 6, counts.windows
    assert len(counts.rebalances) == 2 * len(chaos_cluster.ADDED) + 2, counts.rebalances
    assert counts.poison_dead_lettered == counts.poison_sent
    assert counts.by_status("answered"), "nothing was answered"
