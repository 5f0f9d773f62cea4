"""Event contracts: frozen closed models, typed decode errors, registry, schema files current."""

from __future__ import annotations

import datetime as dt
import json

import pydantic
import pytest

from topics.base import StageTiming
from topics.ingest import IngestRequest
from topics.queries import QueryRequest, TermFilter
from topics.registry import TOPICS, TopicRegistry
from topics.responses import ErrorCode, ErrorInfo, QueryResponse
from topics.schemas import SCHEMA_DIR, render_schemas
from topics.serde import InvalidEventError, UndecodableEventError, decode, encode

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _query(**kw: object) -> QueryRequest:
    return QueryRequest(tenant="acme", query="what is MVCC?", deadline=NOW, **kw)  # type: ignore[arg-type]


def test_round_trip_preserves_the_event() -> None:
    q = _query(filters=(TermFilter(field="source", values=("pg",)),))
    assert decode(QueryRequest, encode(q)) == q


def test_events_are_frozen_and_closed() -> None:
    q = _query()
    with pytest.raises(pydantic.ValidationError):
        q.query = "other"  # type: ignore[misc]
    raw = json.loads(encode(q))
    raw["unexpected"] = 1
    with pytest.raises(InvalidEventError, match="unexpected"):
        decode(QueryRequest, json.dumps(raw).encode())


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"{not json", b"\x00"])
def test_undecodable_bytes_raise_a_typed_error(data: bytes) -> None:
    with pytest.raises(UndecodableEventError):
        decode(QueryRequest, data)


def test_schema_violations_name_the_field() -> None:
    raw = json.loads(encode(_query()))
    raw["top_k"] = 0
    with pytest.raises(InvalidEventError, match="top_k") as info:
        decode(QueryRequest, json.dumps(raw).encode())
    assert info.value.code == "INVALID_EVENT"


def test_naive_timestamps_and_newer_schema_versions_are_rejected() -> None:
    raw = json.loads(encode(_query()))
    raw["deadline"] = "2026-01-01T00:00:00"
    with pytest.raises(InvalidEventError, match="timezone"):
        decode(QueryRequest, json.dumps(raw).encode())
    raw = json.loads(encode(_query()))
    raw["schema_version"] = 99
    with pytest.raises(InvalidEventError, match="newer"):
        decode(QueryRequest, json.dumps(raw).encode())


def test_filters_cannot_name_arbitrary_fields() -> None:
    with pytest.raises(pydantic.ValidationError):
        TermFilter(field="tenant", values=("other-tenant",))
    with pytest.raises(pydantic.ValidationError):
        TermFilter(field="metadata.a b", values=("x",))


def test_trace_appends_stage_timings() -> None:
    q = _query().traced("retrieval", NOW, 12.5, batch=4)
    q = q.traced("rerank", NOW, 3.0)
    assert [t.stage for t in q.trace] == ["retrieval", "rerank"]
    assert q.trace[0] == StageTiming(
        stage="retrieval", started_at=NOW, duration_ms=12.5, detail={"batch": 4}
    )


def test_ingest_request_payload_must_match_op() -> None:
    with pytest.raises(pydantic.ValidationError, match="exactly one"):
        IngestRequest(tenant="t", doc_id="d", op="upsert")
    with pytest.raises(pydantic.ValidationError, match="neither"):
        IngestRequest(tenant="t", doc_id="d", op="delete", text="x")
    assert IngestRequest(tenant="t", doc_id="d", op="upsert", text="x").key() == b"d"


def test_error_response_requires_error_info() -> None:
    with pytest.raises(pydantic.ValidationError):
        QueryResponse(tenant="t", request_id="r", status="failed")
    err = ErrorInfo(code=ErrorCode.DEADLINE_EXCEEDED, message="late")
    assert QueryResponse(tenant="t", request_id="r", status="failed", error=err).key() == b"r"


def test_a_response_that_says_error_is_read_as_failed() -> None:
    """Events and cache entries written before ``failed`` said ``error``: readers map it."""
    err = ErrorInfo(code=ErrorCode.DEADLINE_EXCEEDED, message="late")
    old = QueryResponse(tenant="t", request_id="r", status="error", error=err)  # type: ignore[arg-type]
    assert old.status == "failed"
    raw = old.model_dump_json().replace('"failed"', '"error"')
    assert QueryResponse.model_validate_json(raw).status == "failed"


def test_registry_has_a_dlq_for_every_consumed_topic_and_prefixes_names() -> None:
    reg = TopicRegistry("t1-")
    names = {t.name for t in reg.physical_topics()}
    for spec in TOPICS:
        assert f"t1-{spec.name}" in names
        if spec.consumed:
            assert f"t1-{spec.name}.dlq" in names
    required = {"rag.queries", "rag.retrieved", "rag.reranked.small", "rag.reranked.large"}
    required |= {"rag.responses", "rag.tokens"}
    assert required | {"rag.ingest", "rag.ingest.results"} <= {s.name for s in TOPICS}


def test_json_schema_files_are_current() -> None:
    rendered = render_schemas()
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in SCHEMA_DIR.glob("*.schema.json")}
    assert on_disk == rendered, "run `ragstream topics schemas` and commit the result"


def test_token_order_passes_each_token_of_a_replayed_stream_once() -> None:
    from topics.tokens import AnswerToken, TokenOrder

    def tok(seq: int) -> AnswerToken:
        return AnswerToken(tenant="t", request_id="r", seq=seq, text=f"w{seq}")

    order = TokenOrder()
    arrived = [tok(0), tok(1), tok(0), tok(1), tok(2), tok(2), tok(4)]  # a replay from 0
    assert [t.seq for t in arrived if order.fresh(t)] == [0, 1, 2, 4]
    assert order.next_seq == 5


def test_kafka_record_crcs_are_computed_in_c() -> None:
    """kafka-python stamps every produced record batch and checks every fetched one with
    CRC-32C; without the ``crc32c`` package it does so in pure Python (about 1 ms a kB: a
    sixth of the rerank pool's CPU per evidence answer, issue 26). The dependency is
    ``kafka-python[crc32c]``."""
    from kafka.record import _crc32c, util

    assert util.crc32c_c is not None
    data = memoryview(b"ragstream" * 100)
    assert util.calc_crc32c(data) == _crc32c.crc(data)  # the same checksum, from C
