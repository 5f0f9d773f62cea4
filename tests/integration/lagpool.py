"""A consumer-group member that takes ``--work-ms`` per record: the process the lag-scaling
test (test_autoscale.py) has the supervisor add and remove, so that the lag it builds depends
on the processes alone (a real pool's speed depends on the machine's load).

``python -m tests.integration.lagpool --bootstrap B --topic T --group G --out DIR`` consumes
from ``earliest``, writes each record's value as a line of ``DIR/<pid>.txt``, commits after each
poll's records, prints ``assigned [...]`` on each rebalance and leaves its group on SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import time
from pathlib import Path

from kafka import ConsumerRebalanceListener, KafkaConsumer


class _Print(ConsumerRebalanceListener):  # type: ignore[misc]
    def on_partitions_revoked(self, revoked: object) -> None:
        print(f"revoked {sorted(tp.partition for tp in revoked)}", flush=True)  # type: ignore[attr-defined]

    def on_partitions_assigned(self, assigned: object) -> None:
        print(f"assigned {sorted(tp.partition for tp in assigned)}", flush=True)  # type: ignore[attr-defined]


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--bootstrap", "--topic", "--group", "--out"):
        parser.add_argument(name, required=True)
    parser.add_argument("--work-ms", type=float, default=20.0)
    args = parser.parse_args()
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        max_poll_records=10,
        session_timeout_ms=10_000,
        heartbeat_interval_ms=1_000,
    )
    consumer.subscribe([args.topic], listener=_Print())
    out = (Path(args.out) / f"{os.getpid()}.txt").open("a")
    try:
        while not stopping:
            batches = consumer.poll(timeout_ms=200)
            for records in batches.values():
                for record in records:
                    time.sleep(args.work_ms / 1000)
                    out.write(record.value.decode() + "\n")
            if batches:
                out.flush()
                consumer.commit()
    finally:
        out.close()
        consumer.close()  # leaves the group: its partitions move at once


if __name__ == "__main__":
    main()
