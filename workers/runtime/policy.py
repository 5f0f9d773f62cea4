"""The batch policy every pool shares (the retry policy is :class:`ragstream.retry.RetryPolicy`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """Dynamic batching: close a batch at ``max_batch`` events or ``max_wait_ms`` after its first,
    and sooner when waiting is not expected to pay.

    Attributes:
        max_batch: most events per batch (>= 1; 1 disables batching).
        max_wait_ms: longest wait, in ms, after the first event before the batch closes.
        max_batch_duration_ms: budget for processing one batch, retries included; the runtime
            stops retrying once it is spent.
        wait_min_arrivals: the batch goes on waiting only while at least this many more events
            are expected in the rest of ``max_wait_ms`` at the member's recent arrival rate
            (:class:`ArrivalRate`); ``0`` always waits the whole ``max_wait_ms``. At one
            question at a time a wait only adds latency; under load the events that arrive
            while a batch is processed make the next batch without any wait.
    """

    max_batch: int = 32
    max_wait_ms: int = 10
    max_batch_duration_ms: int = 120_000
    wait_min_arrivals: float = 1.0

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if self.max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")
        if self.wait_min_arrivals < 0:
            raise ValueError("wait_min_arrivals must be >= 0")

    def keeps_waiting(self, rate: ArrivalRate, remaining_ms: float, now: float) -> bool:
        """Whether a batch with ``remaining_ms`` of its wait left should wait on: ``remaining_ms``
        > 0 and, unless :attr:`wait_min_arrivals` is 0, at least that many events expected in
        it (:meth:`ArrivalRate.expected`; ``now``: ``time.monotonic()``)."""
        if remaining_ms <= 0:
            return False
        if self.wait_min_arrivals == 0:
            return True
        return rate.expected(remaining_ms / 1000, now) >= self.wait_min_arrivals


@dataclass(slots=True)
class ArrivalRate:
    """Events a second reaching one pool member, an exponentially weighted moving rate.

    Each observation of ``n`` events at time ``t`` decays the rate by ``exp(-dt / tau_s)`` since
    the last one and adds ``n / tau_s``: the exponentially weighted rate of a meter (as Unix's
    load averages and Dropwizard Metrics' ``EWMA`` weigh the past; here updated per event batch,
    not per tick). One event every ``d`` seconds settles at ``1 / (tau_s * (1 - exp(-d /
    tau_s)))``, about ``1 / d + 1 / (2 tau_s)`` for ``d`` much shorter than ``tau_s``.

    Attributes:
        tau_s: time constant, s (1: the rate follows a change of load within a few seconds).
        per_s: the rate at the last observation, events a second.
    """

    tau_s: float = 1.0
    per_s: float = 0.0
    _at: float | None = field(default=None, repr=False)

    def observe(self, n: int, now: float) -> None:
        """Count ``n`` events that arrived by ``now`` (``time.monotonic()``, s)."""
        if self._at is not None:
            self.per_s *= math.exp(-max(0.0, now - self._at) / self.tau_s)
        self.per_s += n / self.tau_s
        self._at = now

    def expected(self, within_s: float, now: float) -> float:
        """Events expected in the next ``within_s`` seconds at the rate decayed to ``now``."""
        if self._at is None:
            return 0.0
        return self.per_s * math.exp(-max(0.0, now - self._at) / self.tau_s) * within_s
