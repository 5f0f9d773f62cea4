"""Batch and retry policies: one object each, shared by every pool."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BatchPolicy:
    """Dynamic batching: close a batch at ``max_batch`` events or ``max_wait_ms`` after its first.

    Attributes:
        max_batch: most events per batch (>= 1; 1 disables batching).
        max_wait_ms: longest wait, in ms, after the first event before the batch closes.
        max_batch_duration_ms: budget for processing one batch, retries included; the runtime
            stops retrying once it is spent.
    """

    max_batch: int = 32
    max_wait_ms: int = 10
    max_batch_duration_ms: int = 120_000

    def __post_init__(self) -> None:
        if self.max_batch < 1:
            raise ValueError("max_batch must be >= 1")
        if self.max_wait_ms < 0:
            raise ValueError("max_wait_ms must be >= 0")


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential back-off with full jitter for transient errors, as in Dramatiq's Retries.

    The delay before attempt ``n+1`` is uniform in ``[0, min(cap_ms, base_ms * 2**(n-1))]``
    ("full jitter", AWS Architecture Blog, *Exponential Backoff and Jitter*, 2015). After
    ``max_attempts`` failed attempts the event is dead-lettered.
    """

    max_attempts: int = 4
    base_ms: float = 100.0
    cap_ms: float = 5_000.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> float:
        """Back-off in ms after failed attempt number ``attempt`` (1-based)."""
        ceiling = float(min(self.cap_ms, self.base_ms * 2.0 ** max(0, attempt - 1)))
        if not self.jitter:
            return ceiling
        if rng is not None:
            return float(rng.uniform(0.0, ceiling))
        return float(random.uniform(0.0, ceiling))

    def exhausted(self, attempts: int) -> bool:
        """True when ``attempts`` failed attempts leave no retry."""
        return attempts >= self.max_attempts
