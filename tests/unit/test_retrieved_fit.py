"""workers/retrieval/fit.py: what is left out, in which order, and what is cut."""

from __future__ import annotations

import datetime as dt

import pytest

from topics.queries import QueryRequest
from topics.retrieved import Candidate, RetrievedCandidates
from workers.retrieval.fit import CUT_MARK, fit_record, record_bytes


def _event(n: int, size: int, definitions: int = 0) -> RetrievedCandidates:
    request = QueryRequest(
        tenant="t", query="q", deadline=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    )

    def cand(i: int, prefix: str) -> Candidate:
        return Candidate(chunk_id=f"{prefix}{i}", doc_id="d", text="x" * size, score=1 / (i + 1))

    return RetrievedCandidates(
        tenant="t",
        request=request,
        candidates=tuple(cand(i, "c") for i in range(n)),
        definitions=tuple(cand(i, "e") for i in range(definitions)),
        degraded=("propose",),
    )


def test_an_event_that_fits_is_returned_as_it_is() -> None:
    event = _event(3, 100)
    assert fit_record(event, 1_048_576) is event


def test_definitions_go_first_then_the_lowest_ranked_candidates() -> None:
    event = _event(10, 1_000, definitions=4)
    fitted = fit_record(event, record_bytes(_event(6, 1_000)) + 10)
    assert fitted.definitions == ()
    assert [c.chunk_id for c in fitted.candidates] == [f"c{i}" for i in range(6)]
    assert fitted.degraded == ("propose", "trimmed")
    assert all(c.text == "x" * 1_000 for c in fitted.candidates)  # nothing was cut


def test_the_best_candidate_is_cut_rather_than_dropped() -> None:
    event = _event(3, 20_000)
    fitted = fit_record(event, 8_000)
    assert [c.chunk_id for c in fitted.candidates] == ["c0"]
    assert fitted.candidates[0].text.endswith(CUT_MARK) and record_bytes(fitted) <= 8_000


def test_an_event_whose_question_alone_is_too_large_is_refused() -> None:
    with pytest.raises(ValueError, match="cannot fit"):
        fit_record(_event(1, 100), 100)
