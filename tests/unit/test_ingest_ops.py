"""One way to prepare an ingest op (``ingest/ops.py``) for the API check, the ingest pool and
the Celery task; ``ingest.json_text_field`` honoured by each; an upload parsed once."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ingest.index import BulkReport
from ingest.ops import (
    InlineText,
    SourcePath,
    UploadedFile,
    op_from_item,
    op_from_request,
    prepare_op,
)
from ingest.pipeline import IngestPipeline
from ingest.sources import SourceRejectedError
from ingest.types import ParsedDocument, ParseError, ParseOptions, Section
from ingest.uploads import store_document, stored_parse
from ragstream.db.models import IngestJobItem
from ragstream.settings import IngestSettings, Settings
from tests.unit.test_ingest_outcomes import Embed, FakeRegistry, Log, OneChunk
from tests.unit.test_model_follow import RecordingIndex
from tests.unit.test_uploads import uploads_client
from topics.ingest import IngestRequest
from workers.pools.ingest import ingest_handler
from workers.runtime.handler import Emit

RECORDS = b'{"id": "r1", "body": "the body field", "text": "the text field"}\n'


class Bodies(RecordingIndex):
    """A chunk index that keeps the bodies it was asked to index."""

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []

    def bulk_index(self, docs: Sequence[dict[str, Any]], index: str | None = None) -> BulkReport:
        self.bodies.extend(docs)
        return super().bulk_index(docs, index)


def _settings(root: Path, json_text_field: str = "body") -> IngestSettings:
    root.mkdir(parents=True, exist_ok=True)
    return IngestSettings(allowed_roots=[root], upload_root=root, json_text_field=json_text_field)


def _pipeline(settings: IngestSettings) -> tuple[IngestPipeline, Bodies]:
    index = Bodies()
    pipeline = IngestPipeline(
        OneChunk(),
        Embed(),
        index,  # type: ignore[arg-type]
        FakeRegistry(Log()),  # type: ignore[arg-type]
        parse_options=ParseOptions.from_settings(settings),
    )
    return pipeline, index


def _indexed_texts(pipeline: IngestPipeline, index: Bodies, ops: list[Any]) -> list[str]:
    outcomes = pipeline.apply(ops)
    assert [o.status for outs in outcomes for o in outs] == ["indexed"] * len(index.bodies)
    return [b["text"] for b in index.bodies]


# --- one preparation for every source ------------------------------------------------------


def test_each_source_becomes_the_op_the_paths_built_by_hand_before(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "root")
    f = tmp_path / "root" / "t" / "a.md"
    f.parent.mkdir()
    f.write_bytes(b"# A\n\nbody")
    text = prepare_op("t", "d", InlineText("hello"), settings, label="s", metadata={"k": 1})
    assert (text.data, text.content_type, text.filename, text.source) == (
        b"hello", "text", None, "s",
    )  # fmt: skip
    assert text.metadata == {"k": 1} and text.parsed is None
    path = prepare_op("t", "d", SourcePath(str(f)), settings, title="T")
    assert (path.data, path.filename, path.source, path.title) == (
        f.read_bytes(), str(f), str(f), "T",
    )  # fmt: skip
    upload = prepare_op("t", "d", UploadedFile(b"x y", "x.txt", "text"), settings, parse_now=True)
    assert upload.parsed is not None and upload.parsed[0].text == "x y"
    with pytest.raises(SourceRejectedError, match="outside the allowed roots"):
        prepare_op("t", "d", SourcePath("/etc/hostname"), settings)
    with pytest.raises(ParseError):
        prepare_op("t", "d", UploadedFile(b"  ", "e.txt", "text"), settings, parse_now=True)


def test_the_pool_and_the_celery_task_prepare_the_same_op_of_a_path(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "root")
    f = tmp_path / "root" / "t" / "a.txt"
    f.parent.mkdir()
    f.write_bytes(b"some text")
    event = IngestRequest(tenant="t", doc_id=str(f), op="upsert", source_path=str(f), title="T")
    item = IngestJobItem(path=str(f), doc_id=str(f), title="T", metadata_={})
    streamed = op_from_request(event, settings)
    assert (streamed.sent_at, streamed.event_id) == (event.created_at, event.event_id)
    assert replace(streamed, sent_at=None, event_id=None) == op_from_item("t", item, settings)
    delete = IngestRequest(tenant="t", doc_id="d", op="delete")
    assert op_from_request(delete, settings).op == "delete"


# --- ingest.json_text_field through every path ---------------------------------------------


def test_json_text_field_reaches_the_index_from_inline_text_a_path_and_a_job_item(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path / "root")
    f = tmp_path / "root" / "t" / "records.jsonl"
    f.parent.mkdir()
    f.write_bytes(RECORDS)
    inline = IngestRequest(
        tenant="t", doc_id="inline", op="upsert", text=RECORDS.decode(), content_type="jsonl"
    )
    by_path = IngestRequest(tenant="t", doc_id="path", op="upsert", source_path=str(f))
    item = IngestJobItem(path=str(f), doc_id="job", title=None, metadata_={})
    ops = [op_from_request(inline, settings), op_from_request(by_path, settings)]
    ops.append(op_from_item("t", item, settings))
    pipeline, index = _pipeline(settings)
    assert _indexed_texts(pipeline, index, ops) == ["the body field"] * 3
    assert [b["doc_id"] for b in index.bodies] == ["inline#r1", "path#r1", "job#r1"]


def test_the_default_text_field_is_text(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "root", json_text_field="text")
    op = prepare_op("t", "d", InlineText(RECORDS.decode(), "jsonl"), settings)
    pipeline, index = _pipeline(settings)
    assert _indexed_texts(pipeline, index, [op]) == ["the text field"]


# --- parse once: the API's parse is the pool's -----------------------------------------------


def _forbid_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    def parse(*args: Any, **kwargs: Any) -> list[ParsedDocument]:
        raise AssertionError("parsed a second time")

    monkeypatch.setattr("ingest.ops.parse", parse)


def test_a_stored_upload_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = _settings(tmp_path / "root")
    checked = prepare_op(
        "t", "d", UploadedFile(RECORDS, "r.jsonl", "jsonl"), settings, parse_now=True
    )
    path = store_document(settings, "t", RECORDS, "jsonl", checked.parsed)
    _forbid_parsing(monkeypatch)
    event = IngestRequest(
        tenant="t", doc_id="d", op="upsert", source_path=str(path), content_type="jsonl"
    )
    op = op_from_request(event, settings)
    assert op.parsed == checked.parsed
    pipeline, index = _pipeline(settings)
    assert _indexed_texts(pipeline, index, [op]) == ["the body field"]


def test_a_stored_parse_is_used_only_for_its_bytes_options_and_tenant(tmp_path: Path) -> None:
    settings = _settings(tmp_path / "root")
    checked = prepare_op(
        "t", "d", UploadedFile(RECORDS, "r.jsonl", "jsonl"), settings, parse_now=True
    )
    path = store_document(settings, "t", RECORDS, "jsonl", checked.parsed)
    assert stored_parse(settings, "t", path, RECORDS) == checked.parsed
    assert stored_parse(settings, "t", path, RECORDS + b"\n") is None  # other bytes
    assert stored_parse(settings, "other", path, RECORDS) is None  # not that tenant's upload
    other_field = settings.model_copy(update={"json_text_field": "text"})
    assert stored_parse(other_field, "t", path, RECORDS) is None  # parsed with other options
    op = prepare_op("t", "d", SourcePath(str(path), "jsonl"), other_field)
    pipeline, index = _pipeline(other_field)
    assert _indexed_texts(pipeline, index, [op]) == ["the text field"]
    # A file beside the uploads that imitates a stored parse is not one.
    f = tmp_path / "root" / "t" / "r.jsonl"
    f.write_bytes(RECORDS)
    [kept] = path.parent.glob(f"{path.name}.parsed-*.json")
    f.with_name(kept.name.replace(path.name, f.name)).write_bytes(kept.read_bytes())
    assert stored_parse(settings, "t", f, RECORDS) is None
    # An unreadable stored parse is parsed again, not trusted.
    for stored in path.parent.glob("*.parsed-*.json"):
        stored.write_text("not json")
    assert stored_parse(settings, "t", path, RECORDS) is None


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    yield from uploads_client(tmp_path, monkeypatch, _settings(tmp_path / "roots"))


def test_an_uploaded_records_file_reaches_the_index_through_the_pool_parsed_once(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    r = client.post("/v1/documents", files={"file": ("r.jsonl", RECORDS)}, data={"doc_id": "up"})
    assert r.status_code == 202, r.text
    [event] = client.sent
    _forbid_parsing(monkeypatch)  # the pool must use the API's parse
    settings: Settings = client.settings
    pipeline, index = _pipeline(settings.ingest)
    handler = ingest_handler(pipeline, settings.ingest, settings.pools.ingest)
    [result] = handler.fn([event])
    assert isinstance(result, Emit) and result.event.status == "indexed"  # type: ignore[attr-defined]
    assert [(b["doc_id"], b["text"]) for b in index.bodies] == [("up#r1", "the body field")]


def test_the_api_refuses_a_records_file_without_the_configured_field(client: Any) -> None:
    r = client.post(
        "/v1/documents",
        files={"file": ("r.jsonl", json.dumps({"id": "r1", "text": "no body"}).encode())},
    )
    assert r.status_code == 422, r.text
    assert "body" in r.json()["error"]["message"]
    assert client.sent == []


def test_a_stored_parse_keeps_every_field_of_each_document(tmp_path: Path) -> None:
    import dataclasses

    settings = _settings(tmp_path / "root")
    docs = (
        ParsedDocument(
            title="T", sections=(Section(("A", "B"), "x"), Section((), "y")),
            content_type="jsonl", metadata={"lang": "en", "n": 2, "ok": True, "none": None},
            doc_id="r1",
        ),
    )  # fmt: skip
    path = store_document(settings, "t", RECORDS, "jsonl", docs)
    [back] = stored_parse(settings, "t", path, RECORDS) or ()
    assert back == docs[0]
    stored = json.loads(next(path.parent.glob("*.parsed-*.json")).read_text("utf-8"))
    assert set(stored["documents"][0]) == {f.name for f in dataclasses.fields(ParsedDocument)}


def test_a_parse_with_a_lone_surrogate_or_an_odd_value_is_stored_or_skipped(
    tmp_path: Path,
) -> None:
    settings = _settings(tmp_path / "root")
    odd = ParsedDocument(title="t\ud83d", sections=(Section((), "x\udc00"),), content_type="text")
    path = store_document(settings, "t", b"raw", "text", [odd])
    assert stored_parse(settings, "t", path, b"raw") == (odd,)  # escaped in JSON, read back
    unstorable = ParsedDocument(
        title="t",
        sections=(),
        content_type="text",
        metadata={"when": object()},  # type: ignore[dict-item]
    )
    path = store_document(settings, "t", b"raw2", "text", [unstorable])
    assert path.read_bytes() == b"raw2"
    assert stored_parse(settings, "t", path, b"raw2") is None  # the pool parses it itself
