"""The one retry policy: exponential back-off with a cap, optional full jitter, a bound on the
attempts and, as an option, a deadline.

Every retry in ragstream is this object: the consumer runtime's handler retries and its
back-off on an uncommitted batch, the generation pools' retries of an unreachable model server
(until each request's deadline), the Elasticsearch bulk writer's retries of transient item
failures, the webhook deliveries' back-off and the Celery tasks' retries
(:data:`CELERY_TASK_RETRY`). It lives in the kernel so that ``ingest`` (below ``workers``) can
use it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Exponential back-off with full jitter for transient errors, as in Dramatiq's Retries.

    The delay before attempt ``n+1`` is uniform in ``[0, min(cap_ms, base_ms * 2**(n-1))]``
    ("full jitter", AWS Architecture Blog, *Exponential Backoff and Jitter*, 2015), or that
    upper bound itself with ``jitter=False``. After ``max_attempts`` failed attempts there is no
    retry (the runtime dead-letters the event); ``max_attempts=None`` bounds the retries only by
    a deadline (see :meth:`allows`).
    """

    max_attempts: int | None = 4
    base_ms: float = 100.0
    cap_ms: float = 5_000.0
    jitter: bool = True

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be >= 1")

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> float:
        """Back-off in ms after failed attempt number ``attempt`` (1-based)."""
        ceiling = float(min(self.cap_ms, self.base_ms * 2.0 ** max(0, attempt - 1)))
        if not self.jitter:
            return ceiling
        if rng is not None:
            return float(rng.uniform(0.0, ceiling))
        return float(random.uniform(0.0, ceiling))

    @property
    def retries(self) -> int | None:
        """Retries after the first attempt (``max_attempts - 1``); ``None``: unbounded."""
        return None if self.max_attempts is None else self.max_attempts - 1

    def exhausted(self, attempts: int) -> bool:
        """True when ``attempts`` failed attempts leave no retry."""
        return self.max_attempts is not None and attempts >= self.max_attempts

    def allows(
        self,
        attempts: int,
        delay_s: float = 0.0,
        *,
        deadline: float | None = None,
        now: float | None = None,
    ) -> bool:
        """True when another attempt may follow ``attempts`` failed ones.

        Args:
            attempts: failed attempts so far.
            delay_s: the back-off before the next attempt, seconds.
            deadline: the deadline option: the next attempt must start before it (epoch
                seconds, as ``time.time()``); ``None``: no deadline.
            now: the current epoch time in seconds (default ``time.time()``).
        """
        if self.exhausted(attempts):
            return False
        if deadline is None:
            return True
        return (time.time() if now is None else now) + delay_s < deadline


#: The Celery tasks' policy (:class:`ragstream.celery_app.RetryingTask`): 9 attempts, back-off
#: from 2 s doubling to at most 120 s, full jitter. Celery applies it (``retry_backoff``:
#: ``min(cap, base * 2**retries)`` with full jitter, the curve of :meth:`RetryPolicy.delay_ms`).
CELERY_TASK_RETRY = RetryPolicy(max_attempts=9, base_ms=2_000.0, cap_ms=120_000.0, jitter=True)
