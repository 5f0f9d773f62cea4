"""Typed error responses of dead-lettered queries (issue 15, item 2)."""

from __future__ import annotations

import datetime as dt

from topics.producer import RecordTooLargeError
from topics.queries import QueryRequest
from topics.registry import RESPONSES
from topics.responses import ErrorCode, QueryResponse
from topics.retrieved import Candidate, RetrievedCandidates
from topics.serde import encode
from workers.errors import MAX_ERROR_RESPONSE_BYTES, dead_letter_hook


def _retrieved(title_bytes: int) -> RetrievedCandidates:
    request = QueryRequest(
        tenant="t", query="q", deadline=dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
    )
    candidates = tuple(
        Candidate(chunk_id=f"c{i}", doc_id=f"d{i}", text="t", title="x" * title_bytes, score=1.0)
        for i in range(4)
    )
    return RetrievedCandidates(tenant="t", request=request, candidates=candidates)


def test_dead_lettered_oversized_event_gets_a_small_typed_error_response() -> None:
    event = _retrieved(360_000)  # four candidates of ~360 kB each, as in the issue
    error = RecordTooLargeError("record for rag.retrieved is too large")
    [emit] = dead_letter_hook("retrieval")(event, error)
    response = emit.event
    assert emit.topic == RESPONSES and isinstance(response, QueryResponse)
    assert response.request_id == event.request.request_id and response.status == "failed"
    assert response.error is not None and response.error.code == ErrorCode.INTERNAL
    assert "RecordTooLargeError" in response.error.message
    assert len(encode(response)) <= MAX_ERROR_RESPONSE_BYTES
    assert response.citations == ()


def test_small_error_response_keeps_its_citations() -> None:
    [emit] = dead_letter_hook("retrieval")(_retrieved(20), RecordTooLargeError("too large"))
    assert isinstance(emit.event, QueryResponse) and len(emit.event.citations) == 4
