"""What a pool registers: a plain function from a batch of typed events to output events.

A handler takes ``list[E]`` and returns a list of :class:`Emit` (publish this event to this
topic) and, optionally, :class:`Failed` (this input event failed; the others did not). If the
function raises, the runtime isolates the bad events by calling it again one event at a time,
so a handler never needs its own try/except loop. Handlers are given their clients (ES, model,
producer-free); they never construct them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from ragstream.errors import ConfigurationError
from ragstream.retry import RetryPolicy
from topics.base import Event
from topics.registry import TopicSpec
from workers.runtime.policy import BatchPolicy

E = TypeVar("E", bound=Event)


@dataclass(frozen=True, slots=True)
class Emit:
    """Publish ``event`` to ``topic`` (a registry spec; the runtime applies the prefix)."""

    topic: TopicSpec
    event: Event


@dataclass(frozen=True, slots=True)
class Failed:
    """Input ``event`` failed with ``error``; its batch-mates' outputs still go out."""

    event: Event
    error: BaseException


Outcome = Emit | Failed


@dataclass(frozen=True, slots=True)
class Handler(Generic[E]):
    """A registered handler and everything the runtime needs to run it.

    Attributes:
        name: pool name (metrics label, consumer client id).
        input: the topic consumed; its records are decoded as ``input.model``.
        group: the consumer group id.
        outputs: topics the handler may emit to (checked at registration and on emit).
        fn: ``(events) -> outcomes``; may raise.
        batch: the batch policy.
        retry: the retry policy for transient errors.
        on_expired: outcomes for an event whose deadline passed (work is skipped), e.g. a
            ``DEADLINE_EXCEEDED`` response. ``None``: events carry no deadline.
        on_dead_letter: extra outcomes published when an event is dead-lettered (e.g. a typed
            error response so the caller is never left waiting).
    """

    name: str
    input: TopicSpec
    group: str
    outputs: tuple[TopicSpec, ...]
    fn: Callable[[list[E]], Sequence[Outcome]]
    batch: BatchPolicy = field(default_factory=BatchPolicy)
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    on_expired: Callable[[E], Sequence[Emit]] | None = None
    on_dead_letter: Callable[[E, BaseException], Sequence[Emit]] | None = None

    def __post_init__(self) -> None:
        if not self.name or not self.group:
            raise ConfigurationError("a handler needs a pool name and a consumer group")
        if self.input.dlq is None:
            raise ConfigurationError(f"input topic {self.input.name} has no dead-letter topic")
        names = [t.name for t in self.outputs]
        if len(set(names)) != len(names):
            raise ConfigurationError(f"handler {self.name}: duplicate output topics {names}")

    def check_emit(self, emit: Emit) -> None:
        """Raise :class:`ConfigurationError` if ``emit`` targets an undeclared topic."""
        if emit.topic not in self.outputs:
            raise ConfigurationError(
                f"handler {self.name} emitted to {emit.topic.name}, not among its outputs"
            )


def derive_event_id(source_event_id: str, stage: str) -> str:
    """Deterministic output ``event_id`` for ``stage`` applied to an input event.

    A replayed input yields the same output id, so consumers can de-duplicate on it.
    Returns 32 hex digits (the first 128 bits of SHA-256).
    """
    return hashlib.sha256(f"{stage}:{source_event_id}".encode()).hexdigest()[:32]
