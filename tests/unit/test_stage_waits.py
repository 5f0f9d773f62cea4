"""The runtime's ``wait_ms`` on the first stage a pool appends (time queued before pickup)."""

from __future__ import annotations

import datetime as dt

from api.models import QueryResult
from topics.answers import Answer
from topics.dlq import SourceRecord
from topics.queries import QueryRequest
from topics.registry import RESPONSES, RETRIEVED
from topics.responses import QueryResponse
from topics.retrieved import RetrievedCandidates
from topics.serde import decode, encode
from workers.runtime.handler import Emit
from workers.runtime.process import Item, stamp_waits

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def _query(created: dt.datetime, **kw: object) -> QueryRequest:
    return QueryRequest(
        tenant="acme", query="q", deadline=T0 + dt.timedelta(minutes=5), created_at=created, **kw
    )  # type: ignore[arg-type]


def _item(event: QueryRequest | RetrievedCandidates) -> Item:
    return Item(SourceRecord("in", 0, 0, None, encode(event), []), event)


def test_the_first_new_stage_gets_the_wait_from_the_inputs_creation_to_pickup() -> None:
    a, b = _query(T0), _query(T0 + dt.timedelta(seconds=2))
    picked = T0 + dt.timedelta(seconds=3, milliseconds=250)
    emits = [
        Emit(
            RETRIEVED,
            RetrievedCandidates(tenant="acme", request=q, candidates=(), index_version=1).traced(
                "retrieval", picked, 12.0
            ),
        )
        for q in (b, a)  # outputs in another order than the inputs
    ]
    out = stamp_waits(emits, [_item(a), _item(b)], picked)
    waits = {e.event.request_id: e.event.trace[-1].wait_ms for e in out}  # type: ignore[attr-defined]
    assert waits == {a.request_id: 3250.0, b.request_id: 1250.0}
    # the field survives the wire and reaches the API's trace
    event = decode(RetrievedCandidates, encode(out[0].event))
    assert event.trace[-1].wait_ms == 1250.0


def test_only_the_pools_first_stage_is_stamped_and_earlier_stages_are_kept() -> None:
    q = _query(T0)
    upstream = RetrievedCandidates(
        tenant="acme", request=q, candidates=(), index_version=1, created_at=T0
    ).traced("retrieval", T0, 5.0)
    upstream = upstream.model_copy(
        update={"trace": (upstream.trace[0].model_copy(update={"wait_ms": 7.0}),)}
    )
    picked = T0 + dt.timedelta(milliseconds=40)
    response = (
        QueryResponse(
            request_id=q.request_id, tenant="acme", status="answered", trace=upstream.trace
        )
        .traced("rerank", picked, 3.0)
        .traced("evidence", picked, 1.0)
    )
    (out,) = stamp_waits([Emit(RESPONSES, response)], [_item(upstream)], picked)
    assert [t.wait_ms for t in out.event.trace] == [7.0, 40.0, None]
    result = QueryResult.render(Answer.of(out.event))  # type: ignore[arg-type]
    assert [s.wait_ms for s in result.trace] == [7.0, 40.0, None]


def test_a_clock_behind_the_producer_counts_as_no_wait_and_unrelated_outputs_pass() -> None:
    q = _query(T0 + dt.timedelta(seconds=1))
    mine = QueryResponse(request_id=q.request_id, tenant="acme", status="answered").traced(
        "generation-small", T0, 1.0
    )
    other = QueryResponse(request_id="someone-else", tenant="acme", status="answered").traced(
        "generation-small", T0, 1.0
    )
    out = stamp_waits([Emit(RESPONSES, mine), Emit(RESPONSES, other)], [_item(q)], T0)
    assert out[0].event.trace[0].wait_ms == 0.0
    assert out[1].event.trace[0].wait_ms is None
