"""What the shadow replay's report and the benchmarks measure alike: nearest-rank percentiles,
the end of a traced answer, and what reads as a refusal.

The refusal patterns are the evaluation's (``bench/evaluation/metrics.py``) and the replay
report's one definition: the generation prompt (``workers/generation/prompt.py``) tells the
model to say :data:`topics.answers.NOT_IN_DOCUMENTS`, and the patterns also accept its usual
paraphrases. (:func:`topics.answers.is_refusal` is the narrower test the serving path uses: the
answer opens with that sentence.)
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from topics.answers import NOT_IN_DOCUMENTS

if TYPE_CHECKING:
    from topics.base import StageTiming

#: The percentiles every latency distribution reports.
QUANTILES = (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))


def percentiles(values: Sequence[float]) -> dict[str, float]:
    """p50/p95/p99/max of ``values`` by the nearest-rank method, rounded to 0.01.

    The q-quantile is the smallest value with at least ``ceil(q * n)`` values at or below it
    (nearest rank; Hyndman & Fan 1996, definition 1), so p99 of fewer than 100 values is the
    maximum. Returns ``{}`` for no values.
    """
    if not values:
        return {}
    s = sorted(values)
    n = len(s)
    out = {name: round(s[max(0, math.ceil(q * n - 1e-9) - 1)], 2) for name, q in QUANTILES}
    out["max"] = round(s[-1], 2)
    return out


def trace_end(trace: Sequence[StageTiming], sent_at: dt.datetime) -> dt.datetime:
    """When the last stage of ``trace`` finished (``sent_at`` for an empty trace)."""
    if not trace:
        return sent_at
    last = trace[-1]
    return last.started_at + dt.timedelta(milliseconds=last.duration_ms)


#: An answer matching any of these (case-insensitive) declines to answer. The first is the
#: prompt's own phrase; the others are its usual paraphrases: "the passages do not mention X",
#: "X is not described in the context", "I cannot answer", "I don't know", "no information".
REFUSAL_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(re.escape(NOT_IN_DOCUMENTS.rstrip(".")), re.IGNORECASE),
    re.compile(
        r"\b(documents?|passages?|context|docs|documentation|manual)\b[^.]{0,40}"
        r"\b(do(es)? not|do(es)?n't)\b[^.]{0,20}\b(contain|include|mention|say|cover|answer)",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(not|no)\b[^.]{0,60}\b(in|from) the (documents?|passages?|context|docs"
        r"|documentation|manual)\b",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(cannot|can't|unable to) (answer|find|determine)\b|\b(don't|do not) know\b"
        r"|\bno (relevant )?information\b",
        re.IGNORECASE,
    ),
)


def is_refusal(answer: str) -> bool:
    """Whether ``answer`` declines to answer (any of :data:`REFUSAL_PATTERNS`)."""
    return any(p.search(answer) for p in REFUSAL_PATTERNS)
