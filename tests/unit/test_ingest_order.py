"""Order by the write path (ingest/order.py): copies of an applied event are no-ops, a clock
ahead is refused, a producer's clock orders nothing, every applied change counts in the
document's sequence. Pipeline over a SQLite registry and an in-memory index."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.orm import sessionmaker

from api.routes.documents import _document_out
from ingest.ops import IngestOp
from ingest.order import duplicate, too_far_ahead
from ingest.pipeline import IngestPipeline
from ingest.registry import DocumentRegistry, Rejection
from ragstream.db.models import Base, Document, as_utc
from tests.unit.test_ingest_outcomes import Embed, FakeIndex, Log, OneChunk
from topics.ingest import IngestRequest
from topics.serde import decode

NOW = dt.datetime(2026, 12, 7, 12, 0, tzinfo=dt.UTC)


def _pipeline(max_clock_skew_s: float = 300.0) -> tuple[IngestPipeline, DocumentRegistry]:
    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    registry = DocumentRegistry(sessionmaker(engine, expire_on_commit=False))
    pipeline = IngestPipeline(
        OneChunk(),
        Embed(),
        FakeIndex(Log()),  # type: ignore[arg-type]
        registry,
        max_clock_skew_s=max_clock_skew_s,
    )
    return pipeline, registry


def _upsert(text: str, event_id: str, sent_at: dt.datetime | None = None) -> IngestOp:
    return IngestOp(
        "t", "a", data=text.encode(), content_type="text", event_id=event_id, sent_at=sent_at
    )


def _statuses(pipeline: IngestPipeline, *ops: IngestOp) -> list[str]:
    return [o.status for outs in pipeline.apply(list(ops)) for o in outs]


def test_a_copy_of_an_applied_event_is_a_duplicate_and_leaves_the_document_deleted() -> None:
    pipeline, registry = _pipeline()
    v1, v2 = _upsert("first version", "e1"), _upsert("second version", "e2")
    gone = IngestOp("t", "a", "delete", event_id="e3")
    assert _statuses(pipeline, v1) == ["indexed"]
    assert _statuses(pipeline, v2) == ["indexed"]
    assert _statuses(pipeline, gone) == ["deleted"]
    out = pipeline.apply([v2])[0]
    assert [o.status for o in out] == ["duplicate"]
    assert "applied already as change 2" in (out[0].error or "")
    assert "now at change 3 (deleted)" in (out[0].error or "")
    row = registry.get_many([("t", "a")])[("t", "a")]
    assert (row.status, row.sequence, row.last_event_id) == ("deleted", 3, "e3")


def test_the_same_event_twice_in_one_batch_applies_once() -> None:
    pipeline, registry = _pipeline()
    v1 = _upsert("one text", "e1")
    assert _statuses(pipeline, v1, v1) == ["indexed", "duplicate"]
    assert registry.get_many([("t", "a")])[("t", "a")].sequence == 1


def test_a_producer_clock_behind_orders_nothing() -> None:
    """v2 sent 'before' v1 by its producer's clock still wins: it applied later."""
    pipeline, registry = _pipeline()
    now = dt.datetime.now(dt.UTC)
    v1 = _upsert("first version", "e1", sent_at=now)
    v2 = _upsert("second version", "e2", sent_at=now - dt.timedelta(hours=1))
    assert _statuses(pipeline, v1) == ["indexed"]
    assert _statuses(pipeline, v2) == ["indexed"]
    row = registry.get_many([("t", "a")])[("t", "a")]
    assert (row.version, row.sequence) == (2, 2)


def test_a_clock_ahead_beyond_the_skew_is_refused_and_a_later_delete_applies() -> None:
    pipeline, registry = _pipeline(max_clock_skew_s=300)
    now = dt.datetime.now(dt.UTC)
    assert _statuses(pipeline, _upsert("served text", "e1")) == ["indexed"]
    ahead = _upsert("from the future", "e2", sent_at=now + dt.timedelta(hours=1))
    out = pipeline.apply([ahead])[0]
    assert [o.status for o in out] == ["refused"]
    assert out[0].version == 1 and out[0].chunk_count == 1  # what is still served
    assert "ahead of the write path's clock" in (out[0].error or "")
    within = _upsert("within the skew", "e3", sent_at=now + dt.timedelta(seconds=60))
    assert _statuses(pipeline, within) == ["indexed"]
    gone = IngestOp("t", "a", "delete", event_id="e4", sent_at=now)
    assert _statuses(pipeline, gone) == ["deleted"]
    assert registry.get_many([("t", "a")])[("t", "a")].sequence == 3


def test_the_batch_path_counts_in_the_sequence_without_an_event() -> None:
    pipeline, registry = _pipeline()
    assert _statuses(pipeline, IngestOp("t", "a", data=b"text", content_type="text")) == ["indexed"]
    assert _statuses(pipeline, IngestOp("t", "a", data=b"text", content_type="text")) == [
        "unchanged"
    ]
    row = registry.get_many([("t", "a")])[("t", "a")]
    assert (row.sequence, row.last_event_id) == (2, None)
    assert registry.applied_events([("t", "e1")]) == {}


def test_duplicate_and_refused_report_what_is_served() -> None:
    row = Document(tenant="t", doc_id="a", status="deleted", version=2, chunk_count=4, sequence=3)
    op = IngestOp("t", "a", "delete", event_id="e")
    out = duplicate(op, (2, "indexed"), row)
    assert out is not None and (out.status, out.version, out.chunk_count) == ("duplicate", 2, 0)
    assert duplicate(op, None, row) is None
    assert too_far_ahead(op, row, NOW) is None  # no producer time: the batch path
    late = IngestOp("t", "a", "delete", sent_at=NOW + dt.timedelta(seconds=301))
    assert too_far_ahead(late, row, NOW, 300) is not None
    assert too_far_ahead(late, row, NOW, 302) is None


def test_a_record_without_event_id_is_identified_by_its_content() -> None:
    value = b'{"tenant": "t", "doc_id": "a", "op": "delete"}'
    first = decode(IngestRequest, value, timestamp_ms=1_000)
    again = decode(IngestRequest, value, timestamp_ms=9_000)  # a re-send: a new timestamp
    assert first.event_id == again.event_id and first.event_id.startswith("sha256-")
    assert first.created_at != again.created_at
    other = decode(IngestRequest, b'{"tenant": "t", "doc_id": "b", "op": "delete"}')
    assert other.event_id != first.event_id
    given = decode(
        IngestRequest, b'{"tenant": "t", "doc_id": "a", "op": "delete", "event_id": "x"}'
    )
    assert given.event_id == "x"


def test_the_registry_keeps_the_last_rejected_event_of_each_existing_document() -> None:
    """One UPDATE per document: the last rejection of it wins; a document without a row gets
    none; ``updated_at`` and the applied state stay as they were."""
    _, registry = _pipeline()
    registry.record("t", "a", status="indexed", version=1, sequence=1, last_event_id="e1")
    before = registry.get_many([("t", "a")])[("t", "a")]
    registry.record_rejections([])  # nothing to do, no transaction
    registry.record_rejections(
        [
            Rejection("t", "a", "e1", "duplicate", "duplicate: applied already"),
            Rejection("t", "a", "e9", "refused", "refused: 3600 s ahead"),
            Rejection("t", "new", "e5", "refused", "refused: 3600 s ahead"),
        ]
    )
    row = registry.get_many([("t", "a")])[("t", "a")]
    assert (row.last_rejected_event_id, row.last_rejected_status) == ("e9", "refused")
    assert row.last_rejected_reason == "refused: 3600 s ahead"
    assert row.last_rejected_at is not None
    assert as_utc(row.last_rejected_at) >= as_utc(before.updated_at)
    assert (row.status, row.version, row.sequence, row.last_event_id) == ("indexed", 1, 1, "e1")
    assert row.updated_at == before.updated_at
    assert registry.get_many([("t", "new")]) == {}


def test_a_rejected_event_is_the_documents_last_rejected_and_outlives_a_later_change() -> None:
    pipeline, registry = _pipeline()
    now = dt.datetime.now(dt.UTC)
    v1 = _upsert("served text", "e1")
    assert _statuses(pipeline, v1) == ["indexed"]
    row = registry.get_many([("t", "a")])[("t", "a")]
    assert _document_out(row).last_rejected is None  # nothing on the applied path
    ahead = _upsert("from the future", "e2", sent_at=now + dt.timedelta(hours=1))
    assert _statuses(pipeline, ahead) == ["refused"]
    out = _document_out(registry.get_many([("t", "a")])[("t", "a")])
    assert out.last_rejected is not None
    assert (out.last_rejected.event_id, out.last_rejected.status) == ("e2", "refused")
    assert "ahead of the write path's clock" in out.last_rejected.reason
    assert out.sequence == 1 and out.last_event_id == "e1"
    assert _statuses(pipeline, v1) == ["duplicate"]
    out = _document_out(registry.get_many([("t", "a")])[("t", "a")])
    assert out.last_rejected is not None
    assert (out.last_rejected.event_id, out.last_rejected.status) == ("e1", "duplicate")
    assert "applied already as change 1" in out.last_rejected.reason
    gone = IngestOp("t", "a", "delete", event_id="e3")
    assert _statuses(pipeline, gone) == ["deleted"]
    out = _document_out(registry.get_many([("t", "a")])[("t", "a")])
    assert out.last_event_id == "e3" and out.last_rejected is not None
    assert out.last_rejected.event_id == "e1"  # kept: the history of the last rejection
    assert out.last_event_at is not None and out.last_rejected.at <= out.last_event_at


def test_a_refused_first_event_makes_no_row() -> None:
    pipeline, registry = _pipeline()
    ahead = _upsert("from the future", "e1", sent_at=dt.datetime.now(dt.UTC) + dt.timedelta(1))
    assert _statuses(pipeline, ahead) == ["refused"]
    assert registry.get_many([("t", "a")]) == {}


def test_a_delete_is_committed_with_its_change_never_before_it() -> None:
    """A reader between two commits must not see a tombstone under the previous sequence and
    event id (the API's ``GET /v1/documents/{id}`` answered 404 with sequence 2 after a third
    change, once in CI): the deleted row and its change are one transaction."""
    pipeline, registry = _pipeline()
    assert _statuses(pipeline, _upsert("first version", "e1")) == ["indexed"]
    seen: list[tuple[str | None, int | None, str | None]] = []
    commits: list[Callable[..., Any]] = [registry.record, registry.record_many]

    def watch(fn: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = fn(*args, **kwargs)
            row = registry.get_many([("t", "a")]).get(("t", "a"))
            seen.append(
                (row.status, row.sequence, row.last_event_id) if row else (None, None, None)
            )
            return out

        return call

    registry.record, registry.record_many = (watch(f) for f in commits)  # type: ignore[method-assign]
    assert _statuses(pipeline, IngestOp("t", "a", "delete", event_id="e2")) == ["deleted"]
    assert seen and all(s == ("deleted", 2, "e2") or s[0] != "deleted" for s in seen), seen
    assert seen[-1] == ("deleted", 2, "e2")
