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
