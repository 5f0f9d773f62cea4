"""The DLQ replay without a broker (issue 52, item 3): the ``replay.*`` headers, and the replay
run against an in-memory broker whose "pool" dead-letters every replayed poison record again at
once: the replay stops at the end offsets it started with, re-publishes each letter once,
``limit`` counts letters, progress is committed, and ``failed_again`` counts this run's letters.
"""

from __future__ import annotations

import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition

from topics.dlq import (
    REPLAY_ATTEMPT_HEADER,
    REPLAY_ID_HEADER,
    ReplayMark,
    SourceRecord,
    dead_letter_context,
    dead_letter_headers,
    replay_mark,
    replayed_headers,
)
from topics.dlq_replay import replay

SRC, DLQ = "rag.ingest", "rag.ingest.dlq"


# -- headers ----------------------------------------------------------------------------------


def test_a_first_replay_strips_dlq_headers_and_marks_attempt_1() -> None:
    source = SourceRecord(SRC, 0, 4, b"k", b"v", [("traceparent", b"00-a"), ("x", b"1")])
    letter = dead_letter_headers(source, ValueError("bad"), 3, "ingest")
    out = replayed_headers(letter, "run-1")
    assert out == [
        ("traceparent", b"00-a"),
        ("x", b"1"),
        (REPLAY_ID_HEADER, b"run-1"),
        (REPLAY_ATTEMPT_HEADER, b"1"),
    ]
    assert replay_mark(out) == ReplayMark("run-1", 1)
    assert replay_mark(letter) is None


def test_a_later_replay_replaces_the_mark_and_counts_on() -> None:
    first = replayed_headers([("x", b"1")], "run-1")
    # The pool fails the replayed record again: the runtime keeps its headers in the letter.
    again = dead_letter_headers(SourceRecord(SRC, 1, 9, None, b"v", first), ValueError(), 1, "p")
    assert replay_mark(again) == ReplayMark("run-1", 1)
    second = replayed_headers(again, "run-2")
    assert second == [("x", b"1"), (REPLAY_ID_HEADER, b"run-2"), (REPLAY_ATTEMPT_HEADER, b"2")]


def test_an_unreadable_attempt_counts_as_none() -> None:
    assert replay_mark([(REPLAY_ID_HEADER, b"r"), (REPLAY_ATTEMPT_HEADER, b"x")]) == ReplayMark(
        "r", 0
    )
    assert replayed_headers([(REPLAY_ID_HEADER, b"r")], "s")[-1] == (REPLAY_ATTEMPT_HEADER, b"1")


# -- the run, on an in-memory broker ----------------------------------------------------------


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]


@dataclass
class Broker:
    """Topics of ``partitions`` partitions each; committed offsets per group; when ``pool`` is
    on, a record sent to :data:`SRC` whose value is ``b"poison"`` is dead-lettered at once."""

    partitions: int = 2
    logs: dict[TopicPartition, list[Rec]] = field(default_factory=dict)
    committed: dict[tuple[str, TopicPartition], int] = field(default_factory=dict)
    pool: bool = True

    def append(self, topic: str, partition: int, key: bytes | None, value: bytes | None,
               headers: list[tuple[str, bytes]]) -> Rec:  # fmt: skip
        log = self.logs.setdefault(TopicPartition(topic, partition), [])
        log.append(Rec(topic, partition, len(log), key, value, list(headers)))
        if self.pool and topic == SRC and value == b"poison":
            src = SourceRecord(topic, partition, len(log) - 1, key, value, list(headers))
            self.append(DLQ, partition, key, value, dead_letter_headers(src, ValueError(), 1, "p"))
        return log[-1]

    def letters(self) -> list[Rec]:
        return [
            r for p in range(self.partitions) for r in self.logs.get(TopicPartition(DLQ, p), [])
        ]


class FakeConsumer:
    """The part of ``KafkaConsumer`` a replay uses (every poll counted, at most 1,000)."""

    def __init__(self, broker: Broker, group: str | None = "g") -> None:
        self.broker, self.config = broker, {"group_id": group}
        self.pos: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self.polls = 0

    def partitions_for_topic(self, topic: str) -> set[int] | None:
        return set(range(self.broker.partitions)) if topic in (SRC, DLQ) else None

    def assign(self, tps: list[TopicPartition]) -> None:
        self.pos = dict.fromkeys(tps, 0)

    def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: len(self.broker.logs.get(tp, [])) for tp in tps}

    def beginning_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return dict.fromkeys(tps, 0)

    def committed(self, tp: TopicPartition) -> int | None:
        return self.broker.committed.get((str(self.config["group_id"]), tp))

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.pos[tp] = offset

    def position(self, tp: TopicPartition) -> int:
        return self.pos[tp]

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def resume(self, *tps: TopicPartition) -> None:
        self.paused.difference_update(tps)

    def poll(self, timeout_ms: int, max_records: int = 500) -> dict[TopicPartition, list[Rec]]:
        self.polls += 1
        assert self.polls < 1000, "the replay does not end"
        out: dict[TopicPartition, list[Rec]] = {}
        for tp in self.pos:
            if tp in self.paused:
                continue
            records = self.broker.logs.get(tp, [])[self.pos[tp] : self.pos[tp] + max_records]
            if records:
                out[tp] = records
                self.pos[tp] += len(records)
                max_records -= len(records)
        if not out:
            time.sleep(timeout_ms / 1000)  # a real poll waits that long for records
        return out

    def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        for tp, meta in offsets.items():
            self.broker.committed[(str(self.config["group_id"]), tp)] = meta.offset


class FakeProducer:
    """Records reach the broker on ``flush``, as the ack of an ``EventProducer`` does."""

    def __init__(self, broker: Broker) -> None:
        self.broker, self.pending, self.flushes = broker, [], 0
        self.pending: list[tuple[str, bytes | None, bytes | None, list[tuple[str, bytes]]]]

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None,
                 headers: list[tuple[str, bytes]] | None = None) -> None:  # fmt: skip
        self.pending.append((topic, key, value, list(headers or [])))

    def flush(self) -> int:
        self.flushes += 1
        sent, self.pending = self.pending, []
        for topic, key, value, headers in sent:
            # crc32, not hash(): bytes hash differently in each process (PYTHONHASHSEED), and
            # a run whose keys all hashed to one partition left the other's log missing.
            partition = zlib.crc32(key or b"") % self.broker.partitions
            self.broker.append(topic, partition, key, value, headers)
        return len(sent)


def _poison(broker: Broker, n: int) -> None:
    """``n`` poison events sent to the source topic; the pool dead-letters each."""
    for i in range(n):
        broker.append(SRC, i % broker.partitions, f"k{i}".encode(), b"poison", [])


def _run(broker: Broker, **kwargs: Any) -> Any:
    return replay(FakeConsumer(broker), FakeProducer(broker), DLQ, settle_ms=100, **kwargs)  # type: ignore[arg-type]


def test_a_poison_letter_is_replayed_once_not_up_to_the_limit() -> None:
    broker = Broker()
    _poison(broker, 1)
    report = _run(broker, limit=5, replay_id="r1")
    assert (report.replayed, report.failed_again, report.remaining) == (1, 1, 0)
    assert len(broker.letters()) == 2  # the original and its re-failed replay
    assert replay_mark(broker.letters()[-1].headers) == ReplayMark("r1", 1)
    assert report.end_offsets == {0: 1, 1: 0}


def test_without_a_limit_the_replay_ends_and_a_second_one_counts_attempt_2() -> None:
    broker = Broker()
    _poison(broker, 3)
    first = _run(broker)
    assert (first.replayed, first.failed_again) == (3, 3)
    second = _run(broker)
    assert (second.replayed, second.failed_again) == (3, 3)
    assert second.replay_id != first.replay_id
    marks = [replay_mark(r.headers) for r in broker.letters()]
    assert len(marks) == 9 and marks.count(None) == 3
    assert marks.count(ReplayMark(first.replay_id, 1)) == 3
    assert marks.count(ReplayMark(second.replay_id, 2)) == 3
    sent = [r for p in range(2) for r in broker.logs.get(TopicPartition(SRC, p), [])]
    assert len(sent) == 3 + 3 + 3  # the events, then each letter once per replay
    assert all(not k.startswith("dlq.") for r in sent for k, _ in r.headers)


def test_limit_counts_letters_and_the_rest_waits_for_the_next_replay() -> None:
    broker = Broker(pool=False)
    for i in range(5):  # five letters, no pool to fail them again
        src = SourceRecord(SRC, 0, i, f"k{i}".encode(), b"v", [])
        broker.append(
            DLQ, i % 2, src.key, src.value, dead_letter_headers(src, ValueError(), 1, "p")
        )
    report = _run(broker, limit=2)
    assert (report.replayed, report.failed_again, report.remaining) == (2, 0, 3)
    assert sum(o for (_, _), o in broker.committed.items()) == 2  # progress in the group
    rest = _run(broker)
    assert (rest.replayed, rest.remaining) == (3, 0)
    assert _run(broker).replayed == 0  # never twice
    replayed = [
        r for p in range(2) for r in broker.logs.get(TopicPartition(SRC, p), []) if r.value == b"v"
    ]
    assert sorted(r.key or b"" for r in replayed) == [f"k{i}".encode() for i in range(5)]


def test_failed_again_is_zero_without_settling() -> None:
    broker = Broker()
    _poison(broker, 2)
    report = replay(FakeConsumer(broker), FakeProducer(broker), DLQ)  # type: ignore[arg-type]
    assert (report.replayed, report.failed_again) == (2, 0)
    assert len(broker.letters()) == 4


class BusyProducer(FakeProducer):
    """Each flush is followed by a letter of another replay run and, as a pool that fails
    a record twice (a redelivery) would, a second copy of each of this run's letters."""

    def flush(self) -> int:
        before = len(self.broker.letters())
        n = super().flush()
        for letter in self.broker.letters()[before:]:
            self.broker.append(DLQ, letter.partition, letter.key, letter.value, letter.headers)
        other = SourceRecord(SRC, 0, 99, b"z", b"v", replayed_headers([], "another-run"))
        self.broker.append(DLQ, 1, b"z", b"v", dead_letter_headers(other, ValueError(), 1, "p"))
        return n


def test_failed_again_counts_this_runs_records_once_each() -> None:
    broker = Broker()
    _poison(broker, 2)
    report = replay(FakeConsumer(broker), BusyProducer(broker), DLQ, settle_ms=100)  # type: ignore[arg-type]
    assert (report.replayed, report.failed_again) == (2, 2)
    assert {dead_letter_context(r.headers)["source.topic"] for r in broker.letters()} == {SRC}


def test_a_consumer_without_group_or_a_missing_topic_is_refused() -> None:
    broker = Broker()
    with pytest.raises(ValueError, match="consumer group"):
        replay(FakeConsumer(broker, group=None), FakeProducer(broker), DLQ)  # type: ignore[arg-type]
    with pytest.raises(KeyError):
        replay(FakeConsumer(broker), FakeProducer(broker), "nope.dlq")  # type: ignore[arg-type]


class ShortConsumer(FakeConsumer):
    """Its end offsets are one past the records it ever returns (a broker that stalls)."""

    def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: n + 1 for tp, n in super().end_offsets(tps).items()}


def test_a_stalled_replay_times_out_with_its_progress_committed() -> None:
    broker = Broker(pool=False)
    src = SourceRecord(SRC, 0, 0, b"k", b"v", [])
    broker.append(DLQ, 0, b"k", b"v", dead_letter_headers(src, ValueError(), 1, "p"))
    with pytest.raises(TimeoutError, match="1 re-published and committed"):
        replay(ShortConsumer(broker), FakeProducer(broker), DLQ, idle_timeout_ms=50)  # type: ignore[arg-type]
    assert broker.committed == {("g", TopicPartition(DLQ, 0)): 1}


# -- the API route ----------------------------------------------------------------------------


def test_the_replay_route_answers_the_report_and_maps_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fastapi.testclient import TestClient

    from api.app import create_app
    from api.auth import Principal
    from api.deps import operator
    from api.ops import OpsService
    from tests.unit.apikit import settings_for
    from topics import dlq_replay
    from topics.dlq_replay import ReplayReport

    calls: list[dict[str, Any]] = []
    outcome: list[BaseException | None] = [None]

    def fake(settings: Any, topic: str, **kwargs: Any) -> ReplayReport:
        calls.append({"topic": topic, **kwargs})
        if outcome[0] is not None:
            raise outcome[0]
        return ReplayReport(topic, "r-1", replayed=1, failed_again=1, end_offsets={0: 1, 1: 0},
                            remaining=0)  # fmt: skip

    monkeypatch.setattr(dlq_replay, "replay_dead_letters", fake)
    settings = settings_for(tmp_path)
    app = create_app(settings)
    app.state.services.extras["ops"] = OpsService(settings, None)  # type: ignore[arg-type]
    app.dependency_overrides[operator] = lambda: Principal(1, "acme", role="cluster-operator")
    with TestClient(app) as client:
        ok = client.post("/v1/ops/dlq/rag.ingest.dlq/replay?limit=5")
        outcome[0] = TimeoutError("rag.ingest.dlq: no dead letter arrived")
        slow = client.post("/v1/ops/dlq/rag.ingest.dlq/replay")
        outcome[0] = KeyError("rag.ingest.dlq")
        gone = client.post("/v1/ops/dlq/rag.ingest.dlq/replay")
        unknown = client.post("/v1/ops/dlq/rag.nothing.dlq/replay")
    assert ok.status_code == 200, ok.text
    assert ok.json() == {
        "topic": "rag.ingest.dlq", "replayed": 1, "replay_id": "r-1", "failed_again": 1,
        "end_offsets": {"0": 1, "1": 0}, "remaining": 0,
    }  # fmt: skip
    assert calls[0]["limit"] == 5 and calls[0]["settle_ms"] == 3000
    assert slow.status_code == 503 and gone.status_code == 404
    assert unknown.status_code == 404 and len(calls) == 3  # not in the registry: never tried


def test_inspect_shows_a_letters_replay_over_the_api() -> None:
    from api.routes.ops import _letter
    from topics.dlq import DeadLetterView

    marked = _letter(DeadLetterView(0, 3, "k", 9, {"pool": "p"}, ReplayMark("r-1", 2)))
    plain = _letter(DeadLetterView(0, 2, "k", 9, {"pool": "p"}))
    assert (marked.replay_id, marked.replay_attempt) == ("r-1", 2)
    assert (plain.replay_id, plain.replay_attempt) == (None, None)
