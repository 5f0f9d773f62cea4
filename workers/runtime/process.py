"""Process one batch: deadlines, the batched call, error isolation, retries, dead letters.

Pure logic: no Kafka client here, so it is unit-tested with plain functions. The runner
(:mod:`workers.runtime.runner`) publishes what this returns and commits.

Error semantics:
- an undecodable or schema-invalid record is dead-lettered at once;
- an expired event gets ``handler.on_expired`` outcomes and no work;
- if the batched call raises :class:`~ragstream.errors.TransientError` it is retried whole with
  back-off; if it raises anything else (or keeps failing), each event is retried alone so one
  bad event cannot fail its batch-mates;
- alone, a :class:`~ragstream.errors.PermanentError` is dead-lettered at once, any other error
  after ``retry.max_attempts`` attempts;
- if every event of the batch still fails with a transient error, that is an outage of a
  dependency, not poison: nothing is dead-lettered and the batch is retried from its first
  offset (:attr:`BatchResult.outage`), so a down backend never empties a topic into the DLQ.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ragstream.errors import PermanentError, TransientError
from topics.base import Event
from topics.dlq import SourceRecord
from topics.serde import decode
from workers.runtime import metrics
from workers.runtime.handler import Emit, Failed, Handler, Outcome

E = TypeVar("E", bound=Event)


@dataclass(slots=True)
class Item:
    """One record of a batch and its decoded event (or why it could not be decoded)."""

    source: SourceRecord
    event: Event | None = None
    error: BaseException | None = None


@dataclass(slots=True)
class DeadLetter:
    """An item to dead-letter: the error and how many attempts were made."""

    item: Item
    error: BaseException
    attempts: int


@dataclass(slots=True)
class BatchResult:
    """What to publish for a batch, or the outage that prevents committing it."""

    emits: list[Emit] = field(default_factory=list)
    dead_letters: list[DeadLetter] = field(default_factory=list)
    outage: BaseException | None = None
    handler_calls: int = 0


def decode_items(model: type[Event], sources: Sequence[SourceRecord]) -> list[Item]:
    """Decode each source record (fields the producer left out come from the record: see
    :func:`topics.serde.decode`); a failure is kept on its item, never raised."""
    items = []
    for src in sources:
        try:
            event = decode(model, src.value, key=src.key, timestamp_ms=src.timestamp_ms)
            items.append(Item(src, event))
        except PermanentError as exc:
            items.append(Item(src, error=exc))
    return items


class BatchProcessor(Generic[E]):
    """Runs a handler over batches with the module's error semantics.

    Args:
        handler: the registered handler.
        sleep: ``sleep(seconds)``; injectable so tests and the runner can keep polling.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        handler: Handler[E],
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.handler = handler
        self._sleep = sleep
        self._clock = clock

    def run(self, items: list[Item]) -> BatchResult:
        """Process ``items``; never raises for handler errors."""
        h = self.handler
        result = BatchResult()
        budget_end = self._clock() + h.batch.max_batch_duration_ms / 1000.0
        live: list[Item] = []
        for item in items:
            if item.event is None:
                self._dead_letter(result, item, item.error or PermanentError("no event"), 1)
            elif h.on_expired is not None and _expired(item.event):
                metrics.DEADLINE_EXCEEDED.labels(h.name).inc()
                result.emits.extend(h.on_expired(item.event))  # type: ignore[arg-type]
            else:
                live.append(item)
        if live:
            self._run_live(result, live, budget_end)
        return result

    def _run_live(self, result: BatchResult, live: list[Item], budget_end: float) -> None:
        attempts = 0
        failure: BaseException | None = None
        while True:
            attempts += 1
            try:
                outcomes = self._call(result, [i.event for i in live])
            except TransientError as exc:
                failure = exc
                if self._should_retry(attempts, budget_end, exc):
                    continue
            except Exception as exc:  # isolate whatever the handler raised
                failure = exc
            else:
                self._collect(result, live, outcomes, budget_end)
                return
            break
        prior = (attempts, failure) if len(live) == 1 else (0, None)
        self._isolated(result, live, prior, budget_end)

    def _collect(
        self, result: BatchResult, live: list[Item], outcomes: Sequence[Outcome], budget_end: float
    ) -> None:
        by_event = {id(i.event): i for i in live}
        failed: list[tuple[Item, BaseException]] = []
        for outcome in outcomes:
            if isinstance(outcome, Failed):
                item = by_event.get(id(outcome.event))
                if item is None:
                    raise TypeError("handler returned Failed for an event not in its batch")
                self._count_error(outcome.error)
                failed.append((item, outcome.error))
            else:
                result.emits.append(outcome)
        others_succeeded = len(failed) < len(live)
        for item, error in failed:
            if isinstance(error, PermanentError):
                self._dead_letter(result, item, error, 1)
            else:
                self._isolated(result, [item], (1, error), budget_end, others_succeeded)

    def _isolated(
        self,
        result: BatchResult,
        items: list[Item],
        prior: tuple[int, BaseException | None],
        budget_end: float,
        others_succeeded: bool = False,
    ) -> None:
        """Retry each item alone; detect an outage when all of them fail transiently.

        ``prior`` is ``(attempts, error)`` already spent on a lone item (``(0, None)``: none).
        """
        transient: list[tuple[Item, BaseException, int]] = []
        any_success = False
        for item in items:
            error, attempts = self._retry_alone(result, item, prior, budget_end)
            if error is None:
                any_success = True
            elif isinstance(error, TransientError):
                transient.append((item, error, attempts))
            else:
                self._dead_letter(result, item, error, attempts)
        if transient and not (any_success or others_succeeded) and len(transient) == len(items):
            result.outage = transient[0][1]
            return
        for item, error, attempts in transient:
            self._dead_letter(result, item, error, attempts)

    def _retry_alone(
        self,
        result: BatchResult,
        item: Item,
        prior: tuple[int, BaseException | None],
        budget_end: float,
    ) -> tuple[BaseException | None, int]:
        """Call the handler on ``item`` alone until it succeeds or the policy gives up.

        Returns ``(last error or None on success, attempts made in total)``.
        """
        attempts, error = prior
        while error is None or self._should_retry(attempts, budget_end, error):
            attempts += 1
            try:
                outcomes = self._call(result, [item.event])
            except Exception as exc:  # classified by _should_retry
                error = exc
                continue
            failures = [o.error for o in outcomes if isinstance(o, Failed)]
            if failures:
                error = failures[0]
                self._count_error(error)
                continue
            for o in outcomes:
                assert isinstance(o, Emit)
                result.emits.append(o)
            return None, attempts
        return error, attempts

    def _should_retry(self, attempts: int, budget_end: float, error: BaseException) -> bool:
        retry = self.handler.retry
        if isinstance(error, PermanentError) or retry.exhausted(attempts):
            return False
        delay_s = retry.delay_ms(attempts) / 1000.0
        if self._clock() + delay_s > budget_end:
            return False
        self._sleep(delay_s)
        return True

    def _call(self, result: BatchResult, events: list[Any]) -> Sequence[Outcome]:
        result.handler_calls += 1
        metrics.HANDLER_CALLS.labels(self.handler.name).inc()
        try:
            outcomes = self.handler.fn(events)
            for outcome in outcomes:
                if isinstance(outcome, Emit):
                    self.handler.check_emit(outcome)
            return outcomes
        except Exception as exc:
            self._count_error(exc)
            raise

    def _count_error(self, exc: BaseException) -> None:
        metrics.ERRORS.labels(self.handler.name, type(exc).__name__).inc()

    def _dead_letter(
        self, result: BatchResult, item: Item, error: BaseException, attempts: int
    ) -> None:
        result.dead_letters.append(DeadLetter(item, error, attempts))
        result.emits.extend(self.dead_letter_emits(item, error))

    def dead_letter_emits(self, item: Item, error: BaseException) -> list[Emit]:
        """The handler's ``on_dead_letter`` outputs for ``item`` dead-lettered with ``error``
        (e.g. a typed error response); empty without a hook or a decoded event. The runner
        calls it too, for an event dead-lettered because its outputs could not be published.
        """
        hook = self.handler.on_dead_letter
        if hook is None or item.event is None:
            return []
        return list(hook(item.event, error))  # type: ignore[arg-type]


def request_key(event: Event) -> str | None:
    """The ``request_id`` an event belongs to (its own, or its ``request``'s), else ``None``."""
    rid = getattr(event, "request_id", None)
    return rid if isinstance(rid, str) else None


def stamp_waits(emits: Sequence[Emit], items: Sequence[Item], picked_at: dt.datetime) -> list[Emit]:
    """``emits`` with the pickup wait of their input set as ``wait_ms`` on the first trace
    stage this pool appended (see :class:`~topics.base.StageTiming`).

    An output belongs to the input of the same ``request_id`` whose trace its own extends;
    the wait is ``picked_at - input.created_at`` in ms (0 when the producer's clock is ahead).
    Outputs without a request, with no new stage, or whose stage already has a wait are
    returned unchanged.
    """
    inputs: dict[str, Event] = {}
    for item in items:
        key = request_key(item.event) if item.event is not None else None
        if key is not None and item.event is not None:
            inputs[key] = item.event
    out: list[Emit] = []
    for emit in emits:
        key = request_key(emit.event)
        source = inputs.get(key) if key is not None else None
        trace = emit.event.trace
        n = len(source.trace) if source is not None else 0
        if source is None or len(trace) <= n or trace[n].wait_ms is not None:
            out.append(emit)
            continue
        wait_ms = max(0.0, (picked_at - source.created_at).total_seconds() * 1000)
        stage = trace[n].model_copy(update={"wait_ms": round(wait_ms, 3)})
        event = emit.event.model_copy(update={"trace": (*trace[:n], stage, *trace[n + 1 :])})
        out.append(Emit(emit.topic, event))
    return out


def _expired(event: Event) -> bool:
    check = getattr(event, "expired", None)
    if callable(check):
        return bool(check())
    request = getattr(event, "request", None)
    check = getattr(request, "expired", None)
    return bool(check()) if callable(check) else False
