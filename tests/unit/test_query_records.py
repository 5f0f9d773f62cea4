"""``rag.queries`` records from producers other than the API (issue 25 item 4): a missing
``request_id`` is the record key, a missing ``created_at`` the record's timestamp; the schema
and the AsyncAPI document say so, and the latter states the bus's trust model."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from kafka.consumer.fetcher import ConsumerRecord

from topics.dlq import SourceRecord, source_record
from topics.queries import QueryRequest
from topics.serde import decode
from workers.runtime.process import decode_items

STAMP_MS = 1_764_633_600_123  # 2025-12-02T00:00:00.123Z
SCHEMAS = Path(__file__).resolve().parents[2] / "topics" / "schemas"


def _value(**fields: object) -> bytes:
    body = {"tenant": "acme", "query": "What does VACUUM do?", "deadline": "2099-01-01T00:00:00Z"}
    return json.dumps(body | fields).encode()


def _record(key: bytes | None, value: bytes, timestamp: int = STAMP_MS) -> ConsumerRecord:
    return ConsumerRecord(
        "rag.queries", 0, None, 7, timestamp, 0, key, value, [], None, 0, len(value), 0
    )


def _consumed(key: bytes | None, value: bytes, timestamp: int = STAMP_MS) -> QueryRequest:
    [item] = decode_items(QueryRequest, [source_record(_record(key, value, timestamp))])
    assert item.error is None, item.error
    assert isinstance(item.event, QueryRequest)
    return item.event


def test_a_query_without_request_id_is_answered_under_its_record_key() -> None:
    event = _consumed(b"order-42", _value())
    assert event.request_id == "order-42"
    again = _consumed(b"order-42", _value())  # a redelivery: the same id, not a new one
    assert again.request_id == "order-42" and again.key() == b"order-42"


def test_a_request_id_in_the_event_wins_over_the_key() -> None:
    assert _consumed(b"order-42", _value(request_id="r-1")).request_id == "r-1"


def test_without_key_or_request_id_an_id_is_generated() -> None:
    for key in (None, b"", b"\xff\xfe", b"k" * 129):
        event = _consumed(key, _value())
        assert 1 <= len(event.request_id) <= 128 and event.request_id != "k" * 129


def test_created_at_defaults_to_the_records_timestamp() -> None:
    event = _consumed(b"k", _value())
    assert event.created_at == dt.datetime(2025, 12, 2, 0, 0, 0, 123_000, tzinfo=dt.UTC)
    stated = _consumed(b"k", _value(created_at="2025-12-01T23:59:00Z"))
    assert stated.created_at == dt.datetime(2025, 12, 1, 23, 59, tzinfo=dt.UTC)


def test_a_record_without_timestamp_is_stamped_when_consumed() -> None:
    before = dt.datetime.now(dt.UTC)
    event = _consumed(b"k", _value(), timestamp=-1)
    assert event.created_at >= before


def test_decode_without_a_record_is_unchanged() -> None:
    event = decode(QueryRequest, _value())
    assert len(event.request_id) == 32  # generated, as for any value without a record
    record = SourceRecord("rag.queries", 0, 1, b"x", _value(), [])
    assert record.timestamp_ms is None


def test_the_schema_and_the_asyncapi_document_say_so() -> None:
    schema = json.loads((SCHEMAS / "rag.queries.schema.json").read_text())
    assert "record key" in schema["properties"]["request_id"]["description"]
    assert "timestamp" in schema["properties"]["created_at"]["description"]
    info = json.loads((SCHEMAS / "asyncapi.json").read_text())["info"]["description"]
    assert "the bus is trusted" in info and "any tenant" in info
    assert "authenticate clients at the HTTP API" in info
