"""``python -m bench.idle_cpu``: how much CPU an idle pool process burns.

Starts ``ragstream worker POOL`` (``python -m entry.cli worker POOL``, from ``--repo``, so the
same script measures another checkout's code) on its own topic prefix, consumer group and
pressure key (``RAGSTREAM_KAFKA__TOPIC_PREFIX``, topics created first) and its own
Elasticsearch alias (``idlecpu-<run>-chunks``, empty), with its metrics endpoint off; waits
until the process has joined its group (the log line ``pool.partitions_assigned``, at most
``--warmup`` seconds), then reads its CPU time
(``utime + stime`` of ``/proc/PID/stat``, every thread of the process, in clock ticks of
``SC_CLK_TCK``) at the start and end of ``--seconds`` of idling and prints the share of one
core: ``ticks / CLK_TCK / seconds``. Nothing is produced to the topics, so the pool sees no
event. Needs the services (Kafka, Redis, Elasticsearch for the pools that open it). Its
topics and index are deleted afterwards.

``--first-event N`` measures instead what an idle pool costs in latency: it runs an echo pool
(``python -m bench.echo``, the same consumer runtime) from ``--repo`` on two fresh topics, and N
times lets it idle ``--seconds`` and then produces one event and times its echo (produce to
receipt by a reader that is already polling); it prints each latency and the echo pool's CPU.

Prints one line per pool: ``pool=rerank repo=... seconds=60 cpu_s=0.93 main_thread_s=0.80
cores=0.0155``. A benchmark, not a test: the numbers are in docs/benchmarks/index.md ("Idle cost").
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from ragstream.settings import PROJECT_ROOT

#: Log line of the consumer runtime once the member owns its partitions.
READY_MARK = "pool.partitions_assigned"


def cpu_ticks(pid: int, tid: int | None = None) -> int:
    """``utime + stime`` of process ``pid`` in clock ticks (fields 14 and 15 of
    ``/proc/PID/stat``, proc(5)), summed over all its threads; with ``tid``, of that thread
    only (``/proc/PID/task/TID/stat``).

    Raises:
        OSError: The process (or thread) does not exist.
    """
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    text = Path(path).read_text()
    # Field 2 (comm) may hold spaces; the rest follows its closing parenthesis.
    fields = text[text.rindex(")") + 2 :].split()
    return int(fields[11]) + int(fields[12])


def _wait_ready(log_path: Path, proc: subprocess.Popen[bytes], limit_s: float) -> bool:
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"pool exited with {proc.returncode}; see {log_path}")
        if READY_MARK in log_path.read_text(errors="replace"):
            return True
        time.sleep(0.5)
    return False


def cleanup(prefix: str) -> None:
    """Delete what a measurement created: the topics named ``<prefix>*`` and the
    Elasticsearch indices of its alias ``<prefix>-chunks`` (never anything else)."""
    from elasticsearch import Elasticsearch

    from ragstream.settings import get_settings
    from topics.admin import make_admin

    settings = get_settings()
    admin = make_admin(settings.kafka)
    try:
        mine = [t for t in admin.list_topics() if t.startswith(prefix)]
        if mine:
            admin.delete_topics(mine)
    finally:
        admin.close()
    es = Elasticsearch(settings.elasticsearch.url)
    pattern = f"{prefix.rstrip('.')}-chunks*"
    indices = list(es.indices.get(index=pattern, ignore_unavailable=True, allow_no_indices=True))
    if indices:
        es.indices.delete(index=",".join(indices))
    es.close()


def measure(
    pool: str, repo: Path, seconds: float, warmup_s: float, log_dir: Path
) -> tuple[float, float]:
    """Run pool ``pool`` from checkout ``repo`` idle for ``seconds``; return its CPU seconds,
    all threads and the main thread (the consumer loop; the others are kafka-python's
    heartbeat thread, the batch worker and the libraries' own).

    Raises:
        RuntimeError: The pool process or the topic creation failed.
    """
    prefix = f"idlecpu-{uuid.uuid4().hex[:8]}."
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(repo),
        RAGSTREAM_KAFKA__TOPIC_PREFIX=prefix,
        # never the live corpus's alias (a pool may create its index at start)
        RAGSTREAM_ELASTICSEARCH__INDEX_ALIAS=f"{prefix.rstrip('.')}-chunks",
        **{f"RAGSTREAM_POOLS__{pool.upper().replace('-', '_')}__METRICS_PORT": "0"},
    )
    cli = [sys.executable, "-m", "entry.cli"]
    created = subprocess.run(
        [*cli, "topics", "create"], cwd=repo, env=env, capture_output=True, check=False
    )
    if created.returncode != 0:
        raise RuntimeError(f"topics create failed: {created.stderr.decode()[-2000:]}")
    log_path = log_dir / f"idle-{pool}-{prefix.rstrip('.')}.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [*cli, "worker", pool], cwd=repo, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        if not _wait_ready(log_path, proc, warmup_s):
            print(f"# {pool}: no {READY_MARK} within {warmup_s:.0f}s, measuring anyway")
        time.sleep(2.0)  # the first poll after the assignment fetches offsets
        start, start_main = cpu_ticks(proc.pid), cpu_ticks(proc.pid, proc.pid)
        time.sleep(seconds)
        used = cpu_ticks(proc.pid) - start
        used_main = cpu_ticks(proc.pid, proc.pid) - start_main
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        cleanup(prefix)
    tick = os.sysconf("SC_CLK_TCK")
    return used / tick, used_main / tick


def _probe(producer: Any, reader: Any, topic: str, seq: int) -> float:
    """Produce echo event ``seq`` to ``topic``; milliseconds until ``reader`` sees its echo
    (NaN after 30 s)."""
    from bench.echo import EchoEvent
    from topics.serde import decode, encode

    event = EchoEvent(tenant="bench", seq=seq, sent_at_ns=time.time_ns())
    producer.send(topic, key=event.key(), value=encode(event))
    producer.flush()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for records in reader.poll(timeout_ms=100).values():
            for record in records:
                echoed = decode(EchoEvent, record.value)
                if echoed.seq == seq:
                    return (time.time_ns() - echoed.sent_at_ns) / 1e6
    return float("nan")


def first_event_latencies(
    repo: Path, probes: int, idle_s: float, warmup_s: float, log_dir: Path
) -> tuple[list[float], float, float]:
    """Run an echo pool from ``repo``; ``probes`` times idle ``idle_s`` seconds, then time one
    event through it. Returns the latencies (ms) and the pool's CPU seconds and wall seconds.

    Raises:
        RuntimeError: The echo pool exited or never joined its group.
    """
    from kafka import KafkaProducer

    from bench.echo import echo_topic
    from ragstream.settings import get_settings
    from topics.admin import ensure_topics, make_admin
    from topics.consumer import make_consumer
    from topics.registry import PhysicalTopic

    settings = get_settings()
    run = f"idlecpu-{uuid.uuid4().hex[:8]}"
    src, dst = echo_topic(f"{run}.in"), echo_topic(f"{run}.out")
    admin = make_admin(settings.kafka)
    ensure_topics(admin, [PhysicalTopic(t.name, t.partitions, t.configs()) for t in (src, dst)])
    admin.close()
    env = dict(os.environ, PYTHONPATH=str(repo))
    log_path = log_dir / f"{run}-echo.log"
    argv = [sys.executable, "-m", "bench.echo", "--input", src.name, "--output", dst.name]
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [*argv, "--group", f"{run}-echo"],
            cwd=repo,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    reader = make_consumer(settings.kafka, dst.name, group=None, auto_offset_reset="latest")
    producer = KafkaProducer(bootstrap_servers=settings.kafka.bootstrap_servers, acks=1)
    latencies: list[float] = []
    try:
        if not _wait_ready(log_path, proc, warmup_s):
            raise RuntimeError(f"echo pool did not join within {warmup_s:.0f}s; see {log_path}")
        reader.poll(timeout_ms=1000)  # join the partitions at their end before the first probe
        start, wall0 = cpu_ticks(proc.pid), time.monotonic()
        for seq in range(probes):
            time.sleep(idle_s)
            latencies.append(_probe(producer, reader, src.name, seq))
        cpu_s = (cpu_ticks(proc.pid) - start) / os.sysconf("SC_CLK_TCK")
        wall_s = time.monotonic() - wall0
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        reader.close()
        producer.close()
        cleanup(f"{run}.")
    return latencies, cpu_s, wall_s


def main(argv: list[str] | None = None) -> None:
    """Parse the options and print one line per pool."""
    parser = argparse.ArgumentParser(prog="python -m bench.idle_cpu", description=__doc__)
    parser.add_argument("--pool", action="append", help="Pool name (repeatable; rerank).")
    parser.add_argument("--seconds", type=float, default=60.0, help="Idle time measured.")
    parser.add_argument("--warmup", type=float, default=120.0, help="Longest wait to join.")
    parser.add_argument("--repo", type=Path, default=PROJECT_ROOT, help="Checkout to run.")
    parser.add_argument(
        "--log-dir", type=Path, default=Path(tempfile.gettempdir()), help="Pool logs."
    )
    parser.add_argument(
        "--first-event", type=int, default=0, metavar="N", help="N latency probes (echo pool)."
    )
    args = parser.parse_args(argv)
    if args.first_event:
        latencies, cpu_s, wall_s = first_event_latencies(
            args.repo.resolve(), args.first_event, args.seconds, args.warmup, args.log_dir
        )
        shown = " ".join(f"{ms:.0f}" for ms in latencies)
        print(
            f"echo repo={args.repo} idle_s={args.seconds:.0f} first_event_ms=[{shown}] "
            f"cpu_s={cpu_s:.2f} cores={cpu_s / wall_s:.4f}",
            flush=True,
        )
        return
    for pool in args.pool or ["rerank"]:
        cpu_s, main_s = measure(pool, args.repo.resolve(), args.seconds, args.warmup, args.log_dir)
        print(
            f"pool={pool} repo={args.repo} seconds={args.seconds:.0f} "
            f"cpu_s={cpu_s:.2f} main_thread_s={main_s:.2f} cores={cpu_s / args.seconds:.4f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
