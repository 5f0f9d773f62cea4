"""Error isolation, retries, deadlines and outage detection of one batch (no Kafka)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence

import pytest

from bench.echo import EchoEvent
from ragstream.errors import PermanentError, TransientError
from ragstream.retry import RetryPolicy
from topics.dlq import SourceRecord
from topics.queries import QueryRequest
from topics.registry import TopicSpec
from topics.responses import ErrorCode, ErrorInfo, QueryResponse
from topics.serde import encode
from workers.runtime.handler import Emit, Failed, Handler, Outcome
from workers.runtime.policy import BatchPolicy
from workers.runtime.process import BatchProcessor, decode_items

IN = TopicSpec("in", EchoEvent, "event_id")
OUT = TopicSpec("out", EchoEvent, "event_id", consumed=False)


def _records(payloads: list[str]) -> list[SourceRecord]:
    return [
        SourceRecord(
            "in", 0, i, None, encode(EchoEvent(tenant="t", seq=i, sent_at_ns=0, payload=p)), []
        )
        for i, p in enumerate(payloads)
    ]


def _processor(
    fn: Callable[[list[EchoEvent]], Sequence[Outcome]], attempts: int = 3
) -> tuple[BatchProcessor[EchoEvent], list[float]]:
    sleeps: list[float] = []
    handler = Handler(
        name="unit",
        input=IN,
        group="g",
        outputs=(OUT,),
        fn=fn,
        batch=BatchPolicy(max_batch=8, max_wait_ms=1),
        retry=RetryPolicy(max_attempts=attempts, base_ms=10, cap_ms=20),
    )
    return BatchProcessor(handler, sleep=sleeps.append), sleeps


def _echo(calls: list[int]) -> Callable[[list[EchoEvent]], Sequence[Outcome]]:
    def fn(events: list[EchoEvent]) -> Sequence[Outcome]:
        calls.append(len(events))
        for e in events:
            if e.payload == "poison":
                raise PermanentError("poison")
            if e.payload == "down":
                raise TransientError("backend down")
            if e.payload == "bug":
                raise ZeroDivisionError("bug")
        return [Emit(OUT, e) for e in events]

    return fn


def test_happy_batch_is_one_call() -> None:
    calls: list[int] = []
    proc, _ = _processor(_echo(calls))
    result = proc.run(decode_items(EchoEvent, _records(["a", "b", "c"])))
    assert calls == [3]
    assert [e.event.seq for e in result.emits] == [0, 1, 2]  # type: ignore[attr-defined]
    assert result.dead_letters == [] and result.outage is None


def test_poison_event_is_isolated_and_dead_lettered_once() -> None:
    calls: list[int] = []
    proc, _ = _processor(_echo(calls))
    result = proc.run(decode_items(EchoEvent, _records(["a", "poison", "c"])))
    assert calls[0] == 3 and calls[1:] == [1, 1, 1]  # batch, then each alone
    assert sorted(e.event.seq for e in result.emits) == [0, 2]  # type: ignore[attr-defined]
    assert [(d.item.source.offset, d.attempts) for d in result.dead_letters] == [(1, 1)]


def test_unexpected_error_is_retried_then_dead_lettered() -> None:
    calls: list[int] = []
    proc, sleeps = _processor(_echo(calls), attempts=3)
    result = proc.run(decode_items(EchoEvent, _records(["a", "bug"])))
    assert [d.attempts for d in result.dead_letters] == [3]
    assert isinstance(result.dead_letters[0].error, ZeroDivisionError)
    assert len(sleeps) == 2 and all(0 <= s <= 0.02 for s in sleeps)
    assert [e.event.seq for e in result.emits] == [0]  # type: ignore[attr-defined]


def test_all_transient_failures_are_an_outage_not_dead_letters() -> None:
    calls: list[int] = []
    proc, _ = _processor(_echo(calls))
    result = proc.run(decode_items(EchoEvent, _records(["down", "down"])))
    assert isinstance(result.outage, TransientError)
    assert result.dead_letters == [] and result.emits == []


def test_transient_failure_of_one_event_among_healthy_ones_is_dead_lettered() -> None:
    calls: list[int] = []
    proc, _ = _processor(_echo(calls), attempts=2)
    result = proc.run(decode_items(EchoEvent, _records(["a", "down"])))
    assert result.outage is None
    assert [(d.item.source.offset, d.attempts) for d in result.dead_letters] == [(1, 2)]


def test_handler_may_report_failed_events_without_raising() -> None:
    def fn(events: list[EchoEvent]) -> Sequence[Outcome]:
        return [
            Failed(e, PermanentError("bad")) if e.payload == "x" else Emit(OUT, e) for e in events
        ]

    proc, _ = _processor(fn)
    result = proc.run(decode_items(EchoEvent, _records(["a", "x", "b"])))
    assert len(result.emits) == 2
    assert [d.item.source.offset for d in result.dead_letters] == [1]


def test_undecodable_and_invalid_records_are_dead_lettered_without_a_call() -> None:
    calls: list[int] = []
    proc, _ = _processor(_echo(calls))
    good = _records(["a"])[0]
    records = [
        SourceRecord("in", 0, 7, None, b"\xff\xfe not json", []),
        SourceRecord("in", 0, 8, None, b'{"tenant": "t", "seq": -1}', []),
        good,
    ]
    result = proc.run(decode_items(EchoEvent, records))
    assert calls == [1]
    assert [d.item.source.offset for d in result.dead_letters] == [7, 8]
    assert "UndecodableEventError" in type(result.dead_letters[0].error).__name__
    assert "InvalidEventError" in type(result.dead_letters[1].error).__name__


def test_emitting_to_an_undeclared_topic_is_a_configuration_error() -> None:
    stray = TopicSpec("stray", EchoEvent, "event_id")
    proc, _ = _processor(lambda events: [Emit(stray, e) for e in events])
    result = proc.run(decode_items(EchoEvent, _records(["a"])))
    assert result.emits == [] and len(result.dead_letters) == 1


def test_expired_query_gets_deadline_exceeded_without_work() -> None:
    qin = TopicSpec("q", QueryRequest, "request_id")
    rout = TopicSpec("r", QueryResponse, "request_id", consumed=False)
    calls: list[int] = []

    def fn(events: list[QueryRequest]) -> Sequence[Outcome]:
        calls.append(len(events))
        return []

    def expired(e: QueryRequest) -> list[Emit]:
        err = ErrorInfo(code=ErrorCode.DEADLINE_EXCEEDED, message="late", stage="unit")
        return [
            Emit(
                rout,
                QueryResponse(tenant=e.tenant, request_id=e.request_id, status="failed", error=err),
            )
        ]

    handler = Handler(name="q", input=qin, group="g", outputs=(rout,), fn=fn, on_expired=expired)
    now = dt.datetime.now(dt.UTC)
    past = QueryRequest(tenant="t", query="q?", deadline=now - dt.timedelta(seconds=1))
    future = QueryRequest(tenant="t", query="q?", deadline=now + dt.timedelta(seconds=60))
    records = [SourceRecord("q", 0, i, None, encode(e), []) for i, e in enumerate([past, future])]
    result = BatchProcessor(handler).run(decode_items(QueryRequest, records))
    assert calls == [1]
    (emit,) = result.emits
    assert isinstance(emit.event, QueryResponse)
    assert emit.event.error is not None and emit.event.error.code == ErrorCode.DEADLINE_EXCEEDED
    assert emit.event.request_id == past.request_id


@pytest.mark.parametrize("attempt", [1, 2, 3, 10])
def test_backoff_is_bounded_by_cap(attempt: int) -> None:
    policy = RetryPolicy(max_attempts=5, base_ms=100, cap_ms=1000, jitter=False)
    assert policy.delay_ms(attempt) == min(1000, 100 * 2 ** (attempt - 1))
    jittered = RetryPolicy(max_attempts=5, base_ms=100, cap_ms=1000)
    assert 0 <= jittered.delay_ms(attempt) <= min(1000, 100 * 2 ** (attempt - 1))
