"""The batch policy every pool shares (the retry policy is :class:`ragstream.retry.RetryPolicy`)."""

from __future__ import annotations

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
