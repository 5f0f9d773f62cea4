"""The version guard's rule (ingest/order.py): only a strictly older event loses."""

from __future__ import annotations

import datetime as dt

from ingest.ops import IngestOp
from ingest.order import event_time, is_superseded, superseded
from ragstream.db.models import Document

T0 = dt.datetime(2026, 12, 5, 12, 0, tzinfo=dt.UTC)


def test_only_an_event_sent_strictly_before_the_newest_applied_one_is_superseded() -> None:
    later = T0 + dt.timedelta(microseconds=1)
    assert is_superseded(T0, later)
    assert not is_superseded(later, T0)
    assert not is_superseded(T0, T0)  # a re-send of the same event applies (idempotent)
    assert not is_superseded(None, T0)  # the batch path carries no producer time
    assert not is_superseded(T0, None)  # a row from before the guard
    assert is_superseded(T0.replace(tzinfo=None), later)  # naive is read as UTC


def test_a_superseded_op_reports_what_is_still_served() -> None:
    row = Document(
        tenant="acme", doc_id="a", status="deleted", version=2, chunk_count=3,
        last_event_at=T0 + dt.timedelta(seconds=1),
    )  # fmt: skip
    late = IngestOp("acme", "a", "upsert", sent_at=T0)
    out = superseded(late, row)
    assert out is not None and out.status == "superseded" and out.chunk_count == 0
    assert out.version == 2 and "superseded" in (out.error or "")
    assert (
        superseded(IngestOp("acme", "a", "delete", sent_at=T0 + dt.timedelta(seconds=2)), row)
        is None
    )
    assert superseded(late, None) is None
    assert event_time(late) == T0
    assert event_time(IngestOp("acme", "a", "delete")).tzinfo is not None
