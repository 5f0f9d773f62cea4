"""Poison records fail alone (issue 26, item 5): a JSON-records file whose one record id holds a
lone surrogate (``"j-\\ud83d"``) used to make every batch it was in raise
``UnicodeEncodeError: surrogates not allowed`` when the id reached SQL or Elasticsearch, on
every retry, until the job failed blaming the workers, its good records lost with it."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session, sessionmaker

import ingest.tasks as tasks
from ingest import jobs
from ingest.index import BulkReport
from ingest.parsers import parse
from ingest.pipeline import IngestOp, IngestPipeline
from ingest.registry import DocumentRegistry
from ingest.sources import SourceFile
from ingest.types import Chunk, ParsedDocument
from ragstream.db.models import Base, Document
from ragstream.settings import IngestSettings, Settings

#: Three records; the second one's id is an emoji cut in half (a lone high surrogate).
RECORDS = (
    b'{"id": "j-1", "text": "Part 100 is a hex bolt."}\n'
    b'{"id": "j-\\ud83d", "text": "Part 200 is a washer."}\n'
    b'{"id": "j-3", "text": "Part 300 is a nut.", "k\\udc00": "v\\ud800"}\n'
)
BAD_ID = "recs#j-\\ud83d"  # as recorded: the surrogate written as its escape


class JsonIndex:
    """Encodes every bulk body as UTF-8 JSON, as the Elasticsearch client does."""

    def __init__(self, poison: str | None = None) -> None:
        self.docs: dict[str, dict[str, Any]] = {}
        self.poison = poison

    def bulk_index(self, docs: Sequence[dict[str, Any]], index: str | None = None) -> BulkReport:
        for d in docs:
            if d["doc_id"] == self.poison:
                raise ValueError("the client choked on this document")
            if d["doc_id"] == "outage":
                raise ConnectionError("connection reset by peer")
        json.dumps(list(docs), ensure_ascii=False).encode()  # raises on a lone surrogate
        self.docs.update({d["chunk_id"]: d for d in docs})
        return BulkReport(succeeded=[d["chunk_id"] for d in docs])

    def refresh(self) -> None:
        pass

    def delete_ids(self, ids: Iterable[str], index: str | None = None) -> BulkReport:
        return BulkReport(succeeded=list(ids))

    def chunk_ids_of(self, tenant: str, doc_id: str) -> list[str]:
        return []


class OneChunk:
    def chunk(self, parsed: ParsedDocument) -> list[Chunk]:
        return [Chunk(0, parsed.title, parsed.text, parsed.text, 5)]


class Embed:
    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    engine = create_engine(f"sqlite:///{tmp_path / 'meta.db'}")
    Base.metadata.create_all(engine)
    return sessionmaker(engine, expire_on_commit=False)


def _pipeline(
    sessions: sessionmaker[Session], poison: str | None = None
) -> tuple[IngestPipeline, JsonIndex, DocumentRegistry]:
    index, registry = JsonIndex(poison), DocumentRegistry(sessions)
    return IngestPipeline(OneChunk(), Embed(), index, registry), index, registry  # type: ignore[arg-type]


def _row(registry: DocumentRegistry, doc_id: str, tenant: str = "t") -> Document:
    return registry.get_many([(tenant, doc_id)])[(tenant, doc_id)]


def test_the_parser_rejects_that_record_alone_and_cleans_metadata_keys() -> None:
    first, bad, third = parse(RECORDS, filename="recs.jsonl")
    assert (first.doc_id, first.error) == ("j-1", None)
    assert bad.doc_id == "j-\\ud83d" and not bad.sections
    assert bad.error is not None
    assert "line 2: id 'j-\\ud83d' holds a lone surrogate U+D83D at index 2" in bad.error
    assert third.metadata == {"k\ufffd": "v\ufffd"}  # like text: replaced, not refused


def test_the_bad_record_fails_alone_with_its_reason_and_the_rest_is_indexed(
    sessions: sessionmaker[Session],
) -> None:
    pipeline, index, registry = _pipeline(sessions)
    recs, good = pipeline.apply(
        [
            IngestOp("t", "recs", data=RECORDS, filename="recs.jsonl"),
            IngestOp("t", "good", data=b"a good file", filename="g.txt"),
        ]
    )
    outcomes = {o.doc_id: o for o in recs}
    assert sorted((o.doc_id, o.status) for o in recs) == [
        ("recs#j-1", "indexed"),
        ("recs#j-3", "indexed"),
        (BAD_ID, "failed"),
    ]
    assert "lone surrogate U+D83D" in (outcomes[BAD_ID].error or "")
    assert good[0].status == "indexed"
    assert sorted(d["doc_id"] for d in index.docs.values()) == ["good", "recs#j-1", "recs#j-3"]
    row = _row(registry, BAD_ID)  # GET /v1/documents/{id} answers failed, with the reason
    assert row.status == "failed" and "lone surrogate" in (row.error or "")


def test_resending_the_file_keeps_the_rejected_record_failed_not_deleted(
    sessions: sessionmaker[Session],
) -> None:
    pipeline, _, registry = _pipeline(sessions)
    op = IngestOp("t", "recs", data=RECORDS, filename="recs.jsonl")
    pipeline.apply([op])
    [again] = pipeline.apply([op])
    assert sorted((o.doc_id, o.status) for o in again) == [
        ("recs#j-1", "unchanged"),
        ("recs#j-3", "unchanged"),
        (BAD_ID, "failed"),
    ]
    assert _row(registry, BAD_ID).status == "failed"


def test_an_event_whose_own_id_holds_a_surrogate_fails_alone(
    sessions: sessionmaker[Session],
) -> None:
    pipeline, _, registry = _pipeline(sessions)
    bad, good = pipeline.apply(
        [
            IngestOp("t", "d-\ud83d", data=b"some text", content_type="text"),
            IngestOp("t", "ok", data=b"more text", content_type="text", title="T\udc80"),
        ]
    )
    assert (bad[0].doc_id, bad[0].status) == ("d-\\ud83d", "failed")
    assert "doc_id 'd-\\ud83d' holds a lone surrogate" in (bad[0].error or "")
    assert _row(registry, "d-\\ud83d").status == "failed"
    assert good[0].status == "indexed"
    assert _row(registry, "ok").title == "T\ufffd"  # a title is text: cleaned


def test_an_op_that_breaks_the_wave_fails_alone(sessions: sessionmaker[Session]) -> None:
    pipeline, _, registry = _pipeline(sessions, poison="poison")
    poison, good = pipeline.apply(
        [
            IngestOp("t", "poison", data=b"breaks the client", content_type="text"),
            IngestOp("t", "good", data=b"fine", content_type="text"),
        ]
    )
    assert poison[0].status == "failed"
    assert poison[0].error == "ingest failed: ValueError: the client choked on this document"
    assert good[0].status == "indexed"
    assert _row(registry, "poison").error == poison[0].error


def test_a_store_failing_is_no_poison_and_propagates(sessions: sessionmaker[Session]) -> None:
    """A connection that breaks is retried by the runtime or Celery: no document is failed."""
    pipeline, _, registry = _pipeline(sessions)
    with pytest.raises(ConnectionError):
        pipeline.apply(
            [
                IngestOp("t", "outage", data=b"any text", content_type="text"),
                IngestOp("t", "good", data=b"fine", content_type="text"),
            ]
        )
    assert registry.get_many([("t", "outage"), ("t", "good")]) == {}


@pytest.fixture
def job_context(
    sessions: sessionmaker[Session], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[tasks._Context, list[str]]]:
    """``ingest_batch`` runs in this process on SQLite, files under ``tmp_path/root``."""
    root = tmp_path / "root"
    root.mkdir()
    settings = Settings(ingest=IngestSettings(allowed_roots=[root], upload_root=root))
    ctx = tasks._Context(settings, sessions)
    pipeline, _, _ = _pipeline(sessions)
    announced: list[str] = []
    monkeypatch.setattr(tasks, "_context", lambda: ctx)
    monkeypatch.setattr(tasks, "_pipeline", lambda: pipeline)
    monkeypatch.setattr(tasks, "announce_finished", announced.append)
    yield ctx, announced


def test_a_bulk_job_indexes_the_rest_and_names_the_real_cause(
    job_context: tuple[tasks._Context, list[str]],
) -> None:
    ctx, announced = job_context
    root = ctx.settings.ingest.allowed_roots[0]
    files = []
    for name, data in (("recs.jsonl", RECORDS), ("a.txt", b"alpha"), ("b.txt", b"beta")):
        (root / name).write_bytes(data)
        files.append(SourceFile(str(root / name), str(root / name)))
    job_id = jobs.create_job(ctx.sessions, "t", files)
    jobs.mark_running(ctx.sessions, job_id)  # as run_job does before fanning out
    with ctx.sessions() as session:
        from ragstream.db.models import IngestJobItem

        ids = list(session.scalars(select(IngestJobItem.id).where(IngestJobItem.job_id == job_id)))
    result = tasks.ingest_batch(job_id, ids)  # returned: it no longer raises every time
    assert result["status"] == "completed_with_failures"  # finished in its one batch
    state = jobs.progress(ctx.sessions, job_id)
    assert (state.done, state.failed) == (2, 1)
    [(path, error)] = jobs.failures(ctx.sessions, job_id)
    assert path.endswith("recs.jsonl")
    assert "lone surrogate U+D83D" in error and "Celery workers" not in error
    assert announced == [job_id]
    registry = DocumentRegistry(ctx.sessions)
    recs = f"{root / 'recs.jsonl'}"
    assert _row(registry, f"{recs}#j-1").status == "indexed"  # the file's good records
    assert _row(registry, f"{recs}#j-3").status == "indexed"


# --- the API: an upload of that file, then the stream pool's work, then GET ----------------


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from fastapi.testclient import TestClient

    from api.routes import documents
    from tests.unit.apikit import make_app

    app, _ = make_app(tmp_path, lambda _: [])
    root = tmp_path / "roots"
    services = app.state.services
    Base.metadata.create_all(services.sessions.kw["bind"])
    services.settings = services.settings.model_copy(
        update={"ingest": IngestSettings(allowed_roots=[root], upload_root=root)}
    )
    sent: list[Any] = []

    async def produce(request: Any, event: Any) -> None:
        sent.append(event)

    monkeypatch.setattr(documents, "produce_ingest", produce)
    with TestClient(app) as c:
        c.sent = sent
        yield c


def test_an_uploaded_records_file_is_accepted_and_get_answers_for_the_bad_record(
    client: Any,
) -> None:
    from ingest.ops import op_from_request

    r = client.post("/v1/documents", files={"file": ("recs.jsonl", RECORDS, "application/jsonl")})
    assert r.status_code == 202, r.text
    [event] = client.sent
    services = client.app.state.services
    pipeline, _, _ = _pipeline(services.sessions)
    [outcomes] = pipeline.apply([op_from_request(event, services.settings.ingest)])  # the pool
    assert sorted(o.status for o in outcomes) == ["failed", "indexed", "indexed"]

    bad = client.get("/v1/documents/recs.jsonl%23j-%5Cud83d")  # recs.jsonl#j-\ud83d
    assert bad.status_code == 200, bad.text
    assert bad.json()["status"] == "failed"
    assert "line 2: id 'j-\\ud83d' holds a lone surrogate U+D83D" in bad.json()["error"]
    whole = client.get("/v1/documents/recs.jsonl")  # the id the 202 named: not a 404
    assert whole.status_code == 200, whole.text
    assert whole.json()["status"] == "indexed" and whole.json()["chunk_count"] == 2
    assert whole.json()["error"].startswith("1 of 3 records failed; first: recs.jsonl#j-\\ud83d")
    assert client.get("/v1/documents/nothing.jsonl").status_code == 404


def test_a_json_body_whose_doc_id_holds_a_surrogate_is_refused_up_front(client: Any) -> None:
    """No store can hold that id, and no URL can name it: 422 now, nothing produced."""
    body = b'{"doc_id": "j-\\ud83d", "text": "a washer"}'
    r = client.post("/v1/documents", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert client.sent == []


def test_a_batch_that_keeps_raising_fails_its_job_naming_the_cause(
    job_context: tuple[tasks._Context, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever still makes a batch raise, the watchdog's reason says what it was, instead of
    "are the Celery workers running?" while the workers were running all along."""
    import datetime as dt

    from ragstream.db.models import IngestJob, IngestJobItem, utcnow

    ctx, announced = job_context
    root = ctx.settings.ingest.allowed_roots[0]
    (root / "a.txt").write_bytes(b"alpha")
    job_id = jobs.create_job(ctx.sessions, "t", [SourceFile(str(root / "a.txt"), "a")])
    jobs.mark_running(ctx.sessions, job_id)

    class Broken:
        def apply(self, ops: Any) -> Any:
            raise UnicodeEncodeError("utf-8", "j-\ud83d", 2, 3, "surrogates not allowed")

    monkeypatch.setattr(tasks, "_pipeline", Broken)
    with ctx.sessions() as session:
        ids = list(session.scalars(select(IngestJobItem.id).where(IngestJobItem.job_id == job_id)))
    with pytest.raises(UnicodeEncodeError):
        tasks.ingest_batch(job_id, ids)
    with ctx.sessions.begin() as session:  # stale, every resume spent
        job = session.get(IngestJob, job_id)
        assert job is not None
        job.heartbeat_at = utcnow() - dt.timedelta(hours=1)
        job.resumes = ctx.settings.ingest.job_max_resumes
    assert tasks.reap_stale_jobs(ctx.settings, ctx.sessions) == [job_id]
    state = jobs.progress(ctx.sessions, job_id)
    assert state.status == "failed" and state.error is not None
    assert "never finished; their last batch failed: UnicodeEncodeError: 'utf-8' codec" in (
        state.error
    )
    assert "surrogates not allowed" in state.error and "Celery workers" not in state.error
    assert announced == [job_id]


def test_an_archive_member_fails_alone_by_name_or_by_record(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tar whose one member's name is not UTF-8 and whose records member holds the bad
    id: the job takes every member, the bad name fails from the start, the records file's
    bad record fails in the pipeline, and the rest is indexed."""
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", encoding="utf-8", errors="surrogateescape") as tar:
        for name, data in (
            ("kb/bad\udcff.md", b"# Bad name\n\nText."),
            ("kb/good.md", b"# Good\n\nA good page."),
            ("kb/recs.jsonl", RECORDS),
        ):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    submitted: list[str] = []
    monkeypatch.setattr(tasks.run_job, "delay", submitted.append)
    r = client.post("/v1/ingest/jobs", files={"archive": ("kb.tar", buf.getvalue())})
    assert r.status_code == 202, r.text
    job = r.json()
    assert (job["total_documents"], job["failed_documents"]) == (3, 1)
    [failure] = job["failures"]
    assert failure["path"].endswith("kb/bad\\udcff.md")
    assert failure["error"].endswith("file name is not UTF-8")

    services = client.app.state.services  # the Celery batch, in this process
    pipeline, _, _ = _pipeline(services.sessions)
    monkeypatch.setattr(
        tasks, "_context", lambda: tasks._Context(services.settings, services.sessions)
    )
    monkeypatch.setattr(tasks, "_pipeline", lambda: pipeline)
    monkeypatch.setattr(tasks, "announce_finished", lambda job_id: None)
    jobs.mark_running(services.sessions, submitted[0])
    tasks.ingest_batch(submitted[0], jobs.pending_item_ids(services.sessions, submitted[0]))
    done = client.get(f"/v1/ingest/jobs/{submitted[0]}").json()
    assert done["status"] == "completed_with_failures"
    assert (done["done_documents"], done["failed_documents"]) == (1, 2)
    reasons = sorted(f["error"] for f in done["failures"])
    assert "file name is not UTF-8" in reasons[0]
    assert "lone surrogate U+D83D" in reasons[1]
