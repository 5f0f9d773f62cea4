"""A ``rag.retrieved`` event that would not fit in one Kafka record is trimmed, never lost.

Candidates carry no document metadata (``retrieval.CANDIDATE_EXCLUDES``), so ten chunks of the
largest text the chunker makes stay far under Kafka's ``max_request_size`` (1 MiB by default).
A deployment with a smaller limit, larger chunks or a long conversation can still cross it, and
a record over the limit fails its batch for good (``RecordTooLargeError``). :func:`fit_record`
makes the event fit instead: it leaves out the lowest-ranked definition entries, then the
lowest-ranked candidates (keeping the best one), then cuts the texts of what is left, longest
first; the event then says so (``degraded`` holds ``trimmed``, carried to the answer, which is
then never cached) and its trace stage gets ``trimmed=<bytes before>``.
"""

from __future__ import annotations

from prometheus_client import Counter

from topics.retrieved import Candidate, RetrievedCandidates
from topics.serde import encode

#: Bytes a record needs beyond its value (key, record batch and headers, trace context).
RECORD_OVERHEAD_BYTES = 2048
#: What a cut text ends with.
CUT_MARK = " …"

TRIMMED = Counter(
    "ragstream_retrieved_trimmed_total",
    "rag.retrieved events trimmed to fit Kafka's max_request_size (candidates left out or cut).",
)


def record_bytes(event: RetrievedCandidates) -> int:
    """The encoded size of ``event`` plus :data:`RECORD_OVERHEAD_BYTES`."""
    return len(encode(event)) + RECORD_OVERHEAD_BYTES


def fit_record(event: RetrievedCandidates, max_bytes: int) -> RetrievedCandidates:
    """``event`` when its record fits in ``max_bytes``; else a copy that does (see the module
    docstring), marked ``trimmed``.

    Raises:
        ValueError: not even the question with one candidate of empty text fits (the query
            itself is too large: the API and the query contract bound it well below this).
    """
    before = record_bytes(event)
    if before <= max_bytes:
        return event
    TRIMMED.inc()
    degraded = tuple(dict.fromkeys((*event.degraded, "trimmed")))
    fitted = event.model_copy(update={"degraded": degraded})
    definitions = list(fitted.definitions)
    while definitions and record_bytes(fitted) > max_bytes:
        definitions.pop()
        fitted = fitted.model_copy(update={"definitions": tuple(definitions)})
    candidates = list(fitted.candidates)
    while len(candidates) > 1 and record_bytes(fitted) > max_bytes:
        candidates.pop()
        fitted = fitted.model_copy(update={"candidates": tuple(candidates)})
    while record_bytes(fitted) > max_bytes:
        cut = _cut_longest(candidates, record_bytes(fitted) - max_bytes)
        if cut is None:
            raise ValueError(f"a rag.retrieved event of {before} bytes cannot fit {max_bytes}")
        candidates = cut
        fitted = fitted.model_copy(update={"candidates": tuple(candidates)})
    return fitted


def _cut_longest(candidates: list[Candidate], excess: int) -> list[Candidate] | None:
    """``candidates`` with the longest text (or preceding text) cut by at least ``excess``
    characters (JSON may spend more bytes per character: the caller checks again); ``None``
    when nothing is left to cut."""
    if not candidates:
        return None
    i = max(range(len(candidates)), key=lambda k: _length(candidates[k]))
    c = candidates[i]
    if _length(c) == 0:
        return None
    if c.preceding is not None and len(c.preceding.text) >= len(c.text):
        cut = c.model_copy(update={"preceding": None})
    else:
        keep = max(0, len(c.text) - max(excess, 64) - len(CUT_MARK))
        cut = c.model_copy(update={"text": c.text[:keep] + CUT_MARK if keep else ""})
    return [*candidates[:i], cut, *candidates[i + 1 :]]


def _length(c: Candidate) -> int:
    return max(len(c.text), len(c.preceding.text) if c.preceding is not None else 0)
