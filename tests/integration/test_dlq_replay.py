"""A DLQ replay that terminates (issue 52, item 3), on the real broker with a real pool that
fails the replayed poison event again: a replay reads the DLQ only up to the end offsets it saw
at its start, re-publishes each letter once (``limit`` counts letters), marks each record with
its replay id and attempt, and counts the letters that come back (``failed_again``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from api.app import create_app
from api.auth import Principal
from api.deps import operator
from api.ops import OpsService
from bench.echo import EchoEvent, echo_handler, echo_topic
from entry.cli import app
from ragstream.retry import RetryPolicy
from ragstream.settings import DatabaseSettings, PoolSettings, Settings, get_settings
from tests.integration.kafkakit import consume_all, create_topics, produce_echo
from topics.dlq import ReplayMark, dead_letter_context, replay_mark
from topics.dlq_replay import replay_dead_letters
from topics.producer import EventProducer, make_producer
from topics.registry import TopicRegistry
from topics.serde import decode
from workers.runtime.runner import PoolRunner

RAGSTREAM = str(Path(sys.executable).parent / "ragstream")
#: Long enough for the pool to fail a replayed record again (the wait ends when all are back).
SETTLE_MS = 30_000


@dataclass(frozen=True)
class Ingest:
    """``{prefix}rag.ingest`` (consumed by a running echo pool that dead-letters ``poison``),
    its DLQ and a replay group of this test's own."""

    prefix: str
    src: str
    dlq: str
    group: str


def _dlq_letters(settings: Settings, dlq: str, n: int, timeout_s: float = 30) -> list[object]:
    """The DLQ's letters once it holds ``n`` (and whatever else arrived meanwhile)."""
    return consume_all(settings, dlq, lambda r: len(r) >= n, timeout_s=timeout_s)


@pytest.fixture
def ingest(settings: Settings, unique_name: Callable[[str], str]) -> Iterator[Ingest]:
    prefix = unique_name("dlqr") + "."
    src = prefix + "rag.ingest"
    out = Ingest(prefix, src, src + ".dlq", unique_name("replay"))
    create_topics(settings, [src, out.dlq, src + ".out"])
    pool = PoolSettings(max_batch=10, max_wait_ms=50, retry_base_ms=10)
    handler = echo_handler(echo_topic(src), echo_topic(src + ".out"), unique_name("pool"), pool)
    runner: PoolRunner[EchoEvent] = PoolRunner(
        handler,
        kafka=settings.kafka,
        producer=EventProducer(make_producer(settings.kafka)),
        registry=TopicRegistry(""),
        failure_backoff=RetryPolicy(max_attempts=1000, base_ms=50, cap_ms=200),
    )
    thread = threading.Thread(target=runner.run, daemon=True)
    thread.start()
    try:
        yield out
    finally:
        runner.stop()
        thread.join(timeout=60)
        assert not thread.is_alive()


def test_a_poison_letter_is_replayed_once_and_comes_back_marked(
    settings: Settings, ingest: Ingest, tmp_path: Path
) -> None:
    """Through ``POST /v1/ops/dlq/{topic}/replay?limit=5`` (the console's Replay button)."""
    produce_echo(settings, ingest.src, ["poison"])
    [original] = _dlq_letters(settings, ingest.dlq, 1)
    app_settings = settings.model_copy(
        update={
            "database": DatabaseSettings(url=f"sqlite:///{tmp_path / 'api.db'}"),
            "kafka": settings.kafka.model_copy(update={"topic_prefix": ingest.prefix}),
        }
    )
    app = create_app(app_settings)
    app.state.services.extras["ops"] = OpsService(app_settings, None)  # type: ignore[arg-type]
    # The deployment's operator: a tenant's operator replays only its tenant's letters, and
    # the echo pool's poison letter names no tenant.
    app.dependency_overrides[operator] = lambda: Principal(1, "acme", role="cluster-operator")

    with TestClient(app) as client:
        r = client.post(f"/v1/ops/dlq/{ingest.dlq}/replay?limit=5&settle_ms={SETTLE_MS}")

    assert r.status_code == 200, r.text
    report = r.json()
    assert (report["replayed"], report["failed_again"], report["remaining"]) == (1, 1, 0)
    assert report["end_offsets"] == {"0": 0, "1": 0, "2": 0} | {str(original.partition): 1}  # type: ignore[attr-defined]
    time.sleep(3)  # anything more would be a replay that read its own letters
    letters = _dlq_letters(settings, ingest.dlq, 3, timeout_s=3)
    assert len(letters) == 2, [r.headers for r in letters]  # type: ignore[attr-defined]
    first = (original.partition, original.offset)  # type: ignore[attr-defined]
    [again] = [r for r in letters if (r.partition, r.offset) != first]  # type: ignore[attr-defined]
    assert replay_mark(list(original.headers)) is None  # type: ignore[attr-defined]
    assert replay_mark(list(again.headers)) == ReplayMark(report["replay_id"], 1)
    context = dead_letter_context(list(again.headers))
    assert context["source.topic"] == ingest.src and "poison" in context["error.message"]
    assert decode(EchoEvent, again.value).payload == "poison"  # the original bytes, again


def test_a_replay_without_limit_ends_while_the_pool_fails_its_letters_again(
    settings: Settings, ingest: Ingest
) -> None:
    produce_echo(settings, ingest.src, ["poison", "ok", "poison", "poison"])
    assert len(_dlq_letters(settings, ingest.dlq, 3)) == 3
    env = {"RAGSTREAM_KAFKA__TOPIC_PREFIX": ingest.prefix}
    started = time.monotonic()
    done = subprocess.run(  # killed after 90 s: the old replay never ended here
        [RAGSTREAM, "dlq", "replay", "rag.ingest", "--group", ingest.group, "--settle-ms", "0"],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, **env},
        check=False,
    )
    took_s = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert f"replayed 3 dead letter(s) from {ingest.dlq}, replay " in done.stdout, done.stdout
    assert took_s < 60
    letters = _dlq_letters(settings, ingest.dlq, 6)
    assert len(letters) == 6  # each poison letter failed once more, and only once
    replay_id = done.stdout.split(", replay ", 1)[1].split()[0]
    marks = [replay_mark(list(r.headers)) for r in letters]  # type: ignore[attr-defined]
    assert marks.count(None) == 3
    assert [m for m in marks if m] == [ReplayMark(replay_id, 1)] * 3


def test_a_second_replay_sends_the_letter_that_failed_again_as_attempt_2(
    settings: Settings, ingest: Ingest, monkeypatch: pytest.MonkeyPatch
) -> None:
    produce_echo(settings, ingest.src, ["poison"])
    _dlq_letters(settings, ingest.dlq, 1)
    kafka, dlq, group = settings.kafka, ingest.dlq, ingest.group

    first = replay_dead_letters(kafka, dlq, group=group, settle_ms=SETTLE_MS)
    second = replay_dead_letters(kafka, dlq, group=group, settle_ms=SETTLE_MS)

    assert (first.replayed, first.failed_again) == (1, 1)
    # Only the letter the first replay caused: the group remembers the original.
    assert (second.replayed, second.failed_again) == (1, 1)
    assert sum(second.end_offsets.values()) == 2 and second.replay_id != first.replay_id
    letters = _dlq_letters(settings, dlq, 3)
    marks = sorted(
        (m.attempt, m.replay_id)
        for r in letters
        if (m := replay_mark(list(r.headers))) is not None  # type: ignore[attr-defined]
    )
    assert len(letters) == 3
    assert marks == [(1, first.replay_id), (2, second.replay_id)]

    monkeypatch.setenv("RAGSTREAM_KAFKA__TOPIC_PREFIX", ingest.prefix)
    get_settings.cache_clear()
    try:
        shown = CliRunner().invoke(app, ["dlq", "inspect", "rag.ingest", "--json"])
    finally:
        get_settings.cache_clear()
    assert shown.exit_code == 0, shown.output
    rows = [json.loads(line) for line in shown.output.splitlines()]
    assert sorted(r.get("replay.attempt", 0) for r in rows) == [0, 1, 2]
    assert {r.get("replay.id") for r in rows} == {None, first.replay_id, second.replay_id}
