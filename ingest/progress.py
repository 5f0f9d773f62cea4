"""Plain progress lines of a bulk job, for output that is not a terminal (a log file, CI).

rich's progress bar redraws one line in place and prints nothing to a file until it ends; a
log needs a new line every so often instead. :class:`ProgressLines` decides when: at the first
observation, every ``step_fraction`` (5 %) of the documents, at least every ``interval_s``
(30 s) while the job runs, and once at the end. Each line says documents done of total,
failures, chunks, the rate in documents per second and the estimated time left.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass
from typing import Protocol


class JobCounts(Protocol):
    """What a snapshot reads of a job's progress (:class:`ingest.jobs.JobProgress`)."""

    @property
    def done(self) -> int: ...
    @property
    def failed(self) -> int: ...
    @property
    def total(self) -> int: ...
    @property
    def chunks(self) -> int: ...
    @property
    def status(self) -> str: ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a progress line reports: ``finished`` counts done and failed documents."""

    finished: int
    total: int
    failed: int
    chunks: int
    elapsed_s: float
    status: str

    @classmethod
    def of(cls, job: JobCounts, elapsed_s: float) -> Snapshot:
        """The snapshot of ``job`` after ``elapsed_s`` seconds of following it."""
        return cls(job.done + job.failed, job.total, job.failed, job.chunks, elapsed_s, job.status)


def eta(seconds: float | None) -> str:
    """``1h02m03s`` / ``4m05s`` / ``6s``; ``-`` when unknown."""
    if seconds is None or math.isinf(seconds) or seconds < 0:
        return "-"
    left = round(seconds)
    hours, rest = divmod(left, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m{secs:02d}s"
    if minutes:
        return f"{minutes}m{secs:02d}s"
    return f"{secs}s"


def format_line(label: str, s: Snapshot) -> str:
    """One progress line, e.g. ``2026-12-01T13:30:00Z ingest 5a1c..: running 85/1699 docs (5%),
    1 failed, 1302 chunks, 2.1 docs/s, ETA 12m48s``."""
    rate = s.finished / s.elapsed_s if s.elapsed_s > 0 else 0.0
    left = (s.total - s.finished) / rate if rate > 0 else None
    pct = 100.0 * s.finished / s.total if s.total else 100.0
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return (
        f"{now} {label}: {s.status} {s.finished}/{s.total} docs ({pct:.0f}%), "
        f"{s.failed} failed, {s.chunks} chunks, {rate:.1f} docs/s, ETA {eta(left)}"
    )


class ProgressLines:
    """Decides when a job's next plain progress line is due.

    Args:
        step_fraction: a line each time this fraction of the documents more is finished.
        interval_s: a line at least this often (seconds) while nothing else is due.
    """

    def __init__(self, step_fraction: float = 0.05, interval_s: float = 30.0) -> None:
        self.step_fraction = step_fraction
        self.interval_s = interval_s
        self._last_at: float | None = None
        self._last_step = -1

    def due(self, s: Snapshot, *, final: bool = False) -> bool:
        """True when a line should be printed for ``s`` (and records that it was)."""
        step = int(s.finished / s.total / self.step_fraction) if s.total else 0
        stale = self._last_at is None or s.elapsed_s - self._last_at >= self.interval_s
        if final or stale or step > self._last_step:
            self._last_at = s.elapsed_s
            self._last_step = step
            return True
        return False
