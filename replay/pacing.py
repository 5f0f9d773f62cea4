"""The replay's bound on its own load: a submit rate and the queries in flight.

:class:`Pacer` spaces submissions at least ``1 / rate_per_s`` apart (each at least that long
after the one before it: a token bucket of depth one, so no burst ever follows an idle
spell) and holds a submission while ``max_in_flight`` replayed queries are unanswered, so a
slow candidate backs off instead of queueing work in front of the shared services. Any
half-open window of one second then holds at most ``ceil(rate_per_s)`` submissions
(:func:`max_in_window` measures it).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence


class Pacer:
    """Paces submissions (see the module docstring).

    Args:
        rate_per_s: the most submissions a second (> 0).
        max_in_flight: the most unanswered submissions (>= 1).
        clock: monotonic seconds (``time.monotonic``).
        sleep: sleeps seconds (``time.sleep``).

    Raises:
        ValueError: a rate or bound out of range.
    """

    def __init__(
        self,
        rate_per_s: float,
        max_in_flight: int,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate_per_s <= 0 or max_in_flight < 1:
            raise ValueError("rate_per_s must be > 0 and max_in_flight >= 1")
        self.interval_s = 1.0 / rate_per_s
        self.max_in_flight = max_in_flight
        self._clock = clock
        self._sleep = sleep
        self._next: float | None = None

    def wait_turn(
        self, in_flight: Callable[[], int], check: Callable[[], None] = lambda: None
    ) -> float:
        """Block until a submission is allowed; return its time (monotonic s).

        Args:
            in_flight: how many submissions are unanswered now.
            check: called while waiting (e.g. raises when a pool process died).
        """
        while True:
            now = self._clock()
            if self._next is not None and now < self._next:
                self._sleep(min(self._next - now, 0.05))
            elif in_flight() >= self.max_in_flight:
                check()
                self._sleep(0.02)
            else:
                self._next = now + self.interval_s
                return now
            check()


def max_in_window(times: Sequence[float], window_s: float = 1.0) -> int:
    """The most of ``times`` (seconds, any order) in any half-open window ``[t, t + window_s)``."""
    ordered = sorted(times)
    best = 0
    for i, t in enumerate(ordered):
        best = max(best, bisect.bisect_left(ordered, t + window_s) - i)
    return best


def achieved_rate(times: Sequence[float]) -> float | None:
    """Submissions a second from the first to the last (``None`` for fewer than two)."""
    if len(times) < 2:
        return None
    span = max(times) - min(times)
    return round((len(times) - 1) / span, 3) if span > 0 else None
