"""Ingest edge cases found by trying the running system (issue 15): bad text never sinks a batch,
``indexed`` means searchable, Western text in windows-1252 is read as such."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from ingest.index import BulkReport
from ingest.ops import IngestOp
from ingest.parsers import parse
from ingest.parsers.decoding import decode_bytes
from ingest.pipeline import IngestPipeline
from ingest.types import Chunk, ParsedDocument


class Log(list[str]):
    """The order in which the pipeline touched the index and the registry."""


class FakeIndex:
    def __init__(self, log: Log) -> None:
        self.log = log

    def bulk_index(self, docs: Sequence[dict[str, Any]], index: str | None = None) -> BulkReport:
        self.log.append("bulk")
        return BulkReport(succeeded=[d["chunk_id"] for d in docs])

    def refresh(self) -> None:
        self.log.append("refresh")

    def delete_ids(self, ids: Iterable[str]) -> BulkReport:
        return BulkReport(succeeded=list(ids))

    def chunk_ids_of(self, tenant: str, doc_id: str) -> list[str]:
        return []


class FakeRegistry:
    def __init__(self, log: Log) -> None:
        self.log = log
        self.rows: list[tuple[str, str, dict[str, Any]]] = []
        self.failures: list[tuple[str, str, str]] = []

    def get_many(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Any]:
        list(keys)
        return {}

    def children(self, tenant: str, parent: str) -> list[Any]:
        return []

    def applied_events(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], Any]:
        list(keys)
        return {}

    def record_many(
        self, rows: list[tuple[str, str, dict[str, Any]]], changes: Sequence[Any] = ()
    ) -> None:
        if rows or changes:
            self.log.append("record")
        self.rows.extend(rows)

    def record_failures(self, failures: list[tuple[str, str, str]]) -> None:
        self.failures.extend(failures)

    def record_rejections(self, rejections: Sequence[Any]) -> None:
        pass


class OneChunk:
    def chunk(self, parsed: ParsedDocument) -> list[Chunk]:
        return [Chunk(0, parsed.title, parsed.text, parsed.text, 5)]


class Embed:
    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        return np.ones((len(texts), 4), dtype=np.float32)


def _pipeline() -> tuple[IngestPipeline, Log, FakeRegistry]:
    log = Log()
    registry = FakeRegistry(log)
    pipeline = IngestPipeline(OneChunk(), Embed(), FakeIndex(log), registry)  # type: ignore[arg-type]
    return pipeline, log, registry


def test_indexed_is_recorded_only_after_the_refresh() -> None:
    pipeline, log, registry = _pipeline()
    [[outcome]] = pipeline.apply([IngestOp("t", "d1", data=b"hello world", filename="a.txt")])
    assert outcome.status == "indexed"
    assert log == ["bulk", "refresh", "record"]
    assert registry.rows[0][1] == "d1"


def test_a_lone_surrogate_is_replaced_and_the_batch_is_indexed() -> None:
    record = b'{"doc_id": "j-104", "text": "notes \\ud83d\\ude80 shipped. Tail: \\ud83d"}'
    [doc] = parse(record, filename="r.jsonl")
    assert doc.text == "notes \U0001f680 shipped. Tail: \ufffd"
    pipeline, _, _ = _pipeline()
    outcomes = pipeline.apply(
        [
            IngestOp("t", "recs", data=record, filename="r.jsonl"),
            IngestOp("t", "good", data=b"a good file", filename="g.txt"),
        ]
    )
    assert [o.status for outs in outcomes for o in outs] == ["indexed", "indexed"]


def test_a_document_that_breaks_its_parser_fails_alone(monkeypatch: Any) -> None:
    import ingest.ops as ops_module

    real = ops_module.parse

    def parse_or_break(data: bytes, **kw: Any) -> list[ParsedDocument]:
        if data == b"boom":
            raise UnicodeEncodeError("utf-8", "x", 0, 1, "surrogates not allowed")
        return real(data, **kw)

    monkeypatch.setattr(ops_module, "parse", parse_or_break)
    pipeline, _, registry = _pipeline()
    bad, good = pipeline.apply(
        [
            IngestOp("t", "bad", data=b"boom", filename="b.txt"),
            IngestOp("t", "good", data=b"fine text", filename="g.txt"),
        ]
    )
    assert bad[0].status == "failed" and "UnicodeEncodeError" in (bad[0].error or "")
    assert good[0].status == "indexed"
    [(tenant, doc_id, error)] = registry.failures  # the reason is readable through the API
    assert (tenant, doc_id) == ("t", "bad") and "UnicodeEncodeError" in error


def test_a_whitespace_only_document_is_recorded_as_failed_with_its_reason() -> None:
    pipeline, _, registry = _pipeline()
    [[outcome]] = pipeline.apply([IngestOp("t", "blank", data=b"   \n\t ", filename="b.txt")])
    assert outcome.status == "failed"
    assert registry.failures == [("t", "blank", outcome.error)]


def test_windows_1252_western_text_is_not_guessed_as_another_codepage() -> None:
    assert (
        decode_bytes("Price list \u2013 updated\n".encode("cp1252"))
        == "Price list \u2013 updated\n"
    )
    assert (
        decode_bytes("Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e".encode("latin-1"))
        == "Caf\u00e9 cr\u00e8me br\u00fbl\u00e9e"
    )
    russian = "Привет мир, это тест кодировки для проверки."
    assert decode_bytes(russian.encode("cp1251")) == russian


def test_the_registry_keeps_an_indexed_version_and_records_the_failed_update() -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import sessionmaker

    from ingest.registry import DocumentRegistry
    from ragstream.db.models import Base

    engine = create_engine("sqlite://")
    Base.metadata.create_all(engine)
    registry = DocumentRegistry(sessionmaker(engine, expire_on_commit=False))
    registry.record("t", "served", status="indexed", version=3, error=None)
    registry.record_failures([("t", "served", "bad update"), ("t", "new", "empty text")])
    rows = registry.get_many([("t", "served"), ("t", "new")])
    served, new = rows[("t", "served")], rows[("t", "new")]
    assert (served.status, served.version, served.error) == ("indexed", 3, "bad update")
    assert (new.status, new.version, new.error) == ("failed", 0, "empty text")
