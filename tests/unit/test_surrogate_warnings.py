"""A lone surrogate replaced in a record is reported (issue 39, "Data"): a record's text,
title or metadata holding half of a UTF-16 pair used to be indexed with U+FFFD in its place
and nothing said so: no log line, no metric, nothing on the document. Now the document's
registry row and ``GET /v1/documents/{id}`` carry a warning, the pipeline logs
``ingest.surrogates_replaced`` and counts ``ragstream_ingest_surrogates_replaced_total``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from prometheus_client import REGISTRY
from sqlalchemy import create_engine
from sqlalchemy.orm import Session, sessionmaker

from api.routes.documents import _document
from ingest.ops import IngestOp
from ingest.parsers import parse
from ingest.pipeline import IngestPipeline
from ingest.registry import DocumentRegistry
from ragstream.db.models import Base
from tests.unit.test_poison_records import Embed, JsonIndex, OneChunk

#: Two records: the first's text holds an emoji cut in half (a lone high surrogate), and its
#: metadata value a lone low one; the second is clean.
RECORDS = (
    b'{"id": "a", "text": "Part 100 \\ud83d is a hex bolt.", "colour": "r\\udc00d"}\n'
    b'{"id": "b", "text": "Part 200 is a washer."}\n'
)
METRIC = "ragstream_ingest_surrogates_replaced_total"


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    engine = create_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    Base.metadata.create_all(engine)
    return sessionmaker(engine, expire_on_commit=False)


@pytest.fixture
def fresh_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """structlog as ``capture_logs`` needs it, whatever an earlier test configured (an
    in-process CLI run caches the loggers it used), as in ``test_model_follow.py``."""
    import ingest.pipeline as pipeline

    saved = structlog.get_config()
    structlog.reset_defaults()
    monkeypatch.setattr(pipeline, "log", structlog.get_logger(pipeline.__name__))
    yield
    structlog.configure(**saved)


def _replaced() -> float:
    return REGISTRY.get_sample_value(METRIC) or 0.0


def test_the_parser_says_what_it_replaced_where() -> None:
    bad, good = parse(RECORDS, filename="recs.jsonl")
    assert "\ufffd" in bad.text and bad.metadata == {"colour": "r\ufffdd"}
    assert bad.surrogates == 2
    assert bad.warnings == (
        "1 lone surrogate(s) in text replaced by U+FFFD (half of a UTF-16 pair, e.g. an emoji "
        "cut in two: the character is lost)",
        "1 lone surrogate(s) in metadata replaced by U+FFFD (half of a UTF-16 pair, e.g. an "
        "emoji cut in two: the character is lost)",
    )
    assert (good.surrogates, good.warnings) == (0, ())


@pytest.mark.usefixtures("fresh_logs")
def test_the_document_shows_a_warning_and_the_replacement_is_logged_and_counted(
    sessions: sessionmaker[Session],
) -> None:
    pipeline = IngestPipeline(OneChunk(), Embed(), JsonIndex(), DocumentRegistry(sessions))  # type: ignore[arg-type]
    before = _replaced()
    with structlog.testing.capture_logs() as logs:
        (outcomes,) = pipeline.apply([IngestOp("t", "recs", data=RECORDS, filename="r.jsonl")])
    assert sorted((o.doc_id, o.status) for o in outcomes) == [
        ("recs#a", "indexed"),
        ("recs#b", "indexed"),
    ]
    assert _replaced() - before == 2
    lines = [e for e in logs if e["event"] == "ingest.surrogates_replaced"]
    assert [(e["log_level"], e["doc_id"], e["surrogates"]) for e in lines] == [
        ("warning", "recs#a", 2)
    ]
    record = _document(sessions, "t", "recs#a", None)
    assert record is not None and record.status == "indexed"
    assert [w.split(" replaced")[0] for w in record.warnings] == [
        "1 lone surrogate(s) in text",
        "1 lone surrogate(s) in metadata",
    ]
    clean = _document(sessions, "t", "recs#b", None)
    assert clean is not None and clean.warnings == []
    whole = _document(sessions, "t", "recs", None)  # the records file's summary
    assert whole is not None
    assert whole.warnings[0].startswith("recs#a: 1 lone surrogate(s) in text")


def test_a_lone_surrogate_in_an_ops_title_is_reported_and_a_clean_update_clears_it(
    sessions: sessionmaker[Session],
) -> None:
    pipeline = IngestPipeline(OneChunk(), Embed(), JsonIndex(), DocumentRegistry(sessions))  # type: ignore[arg-type]
    pipeline.apply([IngestOp("t", "d", data=b"some text", filename="d.txt", title="T\ud83d")])
    first = _document(sessions, "t", "d", None)
    assert first is not None and first.title == "T\ufffd"
    assert [w.split(" replaced")[0] for w in first.warnings] == ["1 lone surrogate(s) in title"]
    pipeline.apply([IngestOp("t", "d", data=b"other text", filename="d.txt", title="T")])
    second = _document(sessions, "t", "d", None)
    assert second is not None and (second.version, second.warnings) == (2, [])
