"""Uploads through the HTTP API with the real services: a DOCX as a multipart document (the
ingest pool indexes it), a tar.gz as a bulk job (a Celery worker runs it), refusals that
name their cause and leave nothing behind, and ``ingest.json_text_field`` (``body`` here)
honoured by every path to the index: an upload through the pool, a job from the API, the CLI."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docx
import httpx
import pytest
from elasticsearch import Elasticsearch

from ragstream.celery_app import configure_celery
from ragstream.settings import get_settings
from tests.integration.stack import RAGSTREAM, Stack, get_json, make_stack, wait_for

pytestmark = pytest.mark.integration
TENANT = "uploader"


def _docx() -> bytes:
    d = docx.Document()
    d.add_heading("Tuning the pools", level=1)
    d.add_paragraph("The ingest pool takes at most max_batch events per batch.")
    table = d.add_table(rows=2, cols=2)
    for (r, c), text in {
        (0, 0): "setting",
        (0, 1): "default",
        (1, 0): "max_batch",
        (1, 1): "32",
    }.items():
        table.cell(r, c).text = text
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def _tar_gz(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as t:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            t.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Stack, Path]]:
    tmp = tmp_path_factory.mktemp("uploads")
    root = tmp / "root"
    root.mkdir()
    name_hint = f"upl-{os.getpid()}"
    s = make_stack(
        tmp,
        "upl",
        RAGSTREAM_INGEST__ALLOWED_ROOTS=json.dumps([str(root)]),
        RAGSTREAM_INGEST__UPLOAD_ROOT=str(root),
        RAGSTREAM_INGEST__JOB_BATCH_SIZE="4",
        RAGSTREAM_INGEST__JSON_TEXT_FIELD="body",
        RAGSTREAM_CELERY__QUEUE=f"t-{name_hint}",
        RAGSTREAM_EMBEDDING__CACHE_KEY_PREFIX=f"t-{name_hint}:emb:",
    )
    configure_celery(s.settings)  # the API in this process submits to the stack's queue
    s.start_pools(("ingest",))
    assert s.log_dir is not None
    log = (s.log_dir / "celery.log").open("wb")
    s.logs.append(log)
    worker = subprocess.Popen(
        [RAGSTREAM, "celery-worker"], env=s.env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True,
    )  # fmt: skip
    try:
        s.wait_ready()
        s.api()
        s.keys[TENANT] = s.key(TENANT, rate_per_minute=0)
        yield s, root
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
        s.close()
        configure_celery(get_settings())


def _post(s: Stack, path: str, **kw: Any) -> httpx.Response:
    auth = {"Authorization": f"Bearer {s.keys[TENANT]}"}
    return httpx.post(f"{s.apis[0].url}{path}", headers=auth, timeout=60, **kw)


def _settled(s: Stack, path: str, unsettled: tuple[str, ...], timeout_s: float) -> Any:
    """``GET path`` once its ``status`` is no longer one of ``unsettled`` (404: not yet)."""

    def settled() -> Any:
        status, body = get_json(f"{s.apis[0].url}{path}", s.keys[TENANT])
        return body if status == 200 and body["status"] not in unsettled else None

    return wait_for(settled, timeout_s=timeout_s, what=f"{path} settled")


def _es_texts(s: Stack, doc_id: str) -> list[str]:
    es = Elasticsearch(s.settings.elasticsearch.url)
    try:
        es.indices.refresh(index=s.settings.elasticsearch.index_alias)
        hits = es.search(
            index=s.settings.elasticsearch.index_alias,
            query={
                "bool": {"filter": [{"term": {"tenant": TENANT}}, {"term": {"doc_id": doc_id}}]}
            },
            size=50,
        )["hits"]["hits"]
    finally:
        es.close()
    return [h["_source"]["text"] for h in hits]


def test_a_docx_upload_is_indexed_by_the_ingest_pool(stack: tuple[Stack, Path]) -> None:
    s, root = stack
    r = _post(
        s, "/v1/documents",
        files={"file": ("pools.docx", _docx(), "application/octet-stream")},
        data={"doc_id": "guide/pools"},
    )  # fmt: skip
    assert r.status_code == 202, r.text
    assert r.json()["doc_id"] == "guide/pools"
    row = _settled(s, "/v1/documents/guide/pools", ("pending", "queued"), 180)
    assert row["status"] == "indexed", row
    assert row["title"] == "Tuning the pools" and row["source"] == "pools.docx"
    assert row["chunk_count"] >= 1
    assert any("max_batch | 32" in t for t in _es_texts(s, "guide/pools"))
    assert list((root / TENANT / "_uploads" / "documents").glob("*.docx"))


def test_an_archive_job_runs_over_its_extracted_files(stack: tuple[Stack, Path]) -> None:
    """An archive's documents are filed as ``<archive>/<member>`` (no server folder in any id,
    source or failure), so uploading the same archive again updates them: no duplicates."""
    s, root = stack
    archive = _tar_gz(
        {
            "kb/install.md": b"# Install\n\nRun make demo to start everything.",
            "kb/ops/restart.html": b"<html><body><h1>Restart</h1><p>Use make stop.</p></body>",
            "kb/pools.docx": _docx(),
            "kb/logo.png": b"\x89PNG\r\n\x1a\n",
            "kb/blank.md": b"   \n",
        }
    )
    r = _post(s, "/v1/ingest/jobs", files={"archive": ("kb.tar.gz", archive, "application/gzip")})
    assert r.status_code == 202, r.text
    job = r.json()
    assert job["total_documents"] == 4  # the .png is no document
    folder = root / TENANT / "_uploads" / "jobs" / job["job_id"]
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == [
        "blank.md", "install.md", "logo.png", "pools.docx", "restart.html",
    ]  # fmt: skip
    done = _settled(s, f"/v1/ingest/jobs/{job['job_id']}", ("pending", "running"), 240)
    assert done["status"] == "completed_with_failures", done
    assert (done["done_documents"], done["failed_documents"]) == (3, 1)
    [failure] = done["failures"]
    assert failure["path"] == "kb.tar.gz/kb/blank.md" and str(root) not in failure["error"]
    restart = "kb.tar.gz/kb/ops/restart.html"
    assert any("make stop" in t for t in _es_texts(s, restart))
    row = _settled(s, f"/v1/documents/{restart}", ("pending",), 30)
    assert (row["doc_id"], row["source"], row["version"]) == (restart, restart, 1)

    again = _post(s, "/v1/ingest/jobs", files={"archive": ("kb.tar.gz", archive)}).json()
    redone = _settled(s, f"/v1/ingest/jobs/{again['job_id']}", ("pending", "running"), 240)
    assert (redone["done_documents"], redone["failed_documents"]) == (3, 1), redone
    assert _settled(s, f"/v1/documents/{restart}", ("pending",), 30)["version"] == 1
    status, listing = get_json(f"{s.apis[0].url}/v1/documents?limit=200", s.keys[TENANT])
    assert status == 200
    archived = sorted(d["doc_id"] for d in listing["items"] if d["doc_id"].startswith("kb.tar"))
    assert archived == [
        "kb.tar.gz/kb/blank.md", "kb.tar.gz/kb/install.md", "kb.tar.gz/kb/ops/restart.html",
        "kb.tar.gz/kb/pools.docx",
    ]  # fmt: skip
    shown = json.dumps(listing) + json.dumps(redone)
    assert str(root) not in shown and "_uploads" not in shown


def test_refusals_name_the_cause_and_leave_nothing(stack: tuple[Stack, Path]) -> None:
    s, root = stack
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("evil/../../../escape.md", "# x")
    cases = [
        (
            _post(s, "/v1/ingest/jobs", files={"archive": ("kb.zip", bomb.getvalue())}),
            422, "unsafe member name",
        ),
        (
            _post(s, "/v1/ingest/jobs", files={"archive": ("kb.tgz", b"plain text")}),
            422, "not a zip, tar or tar.gz",
        ),
        (
            _post(s, "/v1/documents", files={"file": ("x.png", b"\x89PNG\r\n\x1a\n\0\0\0")}),
            415, "binary and not PDF or DOCX",
        ),
        (
            _post(s, "/v1/documents", files={"file": ("big.md", b"x" * 1_100_000)}),
            413, "request body over",
        ),
        (
            _post(s, "/v1/ingest/jobs", json={"paths": ["/etc"]}),
            422, "outside the allowed roots",
        ),
    ]  # fmt: skip
    for response, status, message in cases:
        assert response.status_code == status, response.text
        assert message in response.json()["error"]["message"], response.text
    # Only accepted archives keep a folder (the archive test's job); refused ones left none.
    jobs_dir = root / TENANT / "_uploads" / "jobs"
    assert all((p / "kb" / "install.md").is_file() for p in jobs_dir.iterdir())
    assert not list(root.rglob("escape.md"))


RECORDS = b'{"id": "r1", "body": "kept in the body field", "text": "not the text field"}\n'


def test_json_text_field_reaches_the_index_through_every_path(stack: tuple[Stack, Path]) -> None:
    s, root = stack
    folder = root / TENANT / "records"
    folder.mkdir(parents=True, exist_ok=True)
    # The stream path: the API checks (parses) the upload, the ingest pool indexes its parse.
    r = _post(s, "/v1/documents", files={"file": ("r.jsonl", RECORDS)}, data={"doc_id": "rec"})
    assert r.status_code == 202, r.text
    # A Celery job over a server-side path, submitted through the API.
    (folder / "api.jsonl").write_bytes(RECORDS)
    r = _post(s, "/v1/ingest/jobs", json={"paths": [str(folder / "api.jsonl")]})
    assert r.status_code == 202, r.text
    # The CLI (`ragstream ingest PATH`): a Celery job too, built by the command.
    (folder / "cli.jsonl").write_bytes(RECORDS)
    subprocess.run(
        [RAGSTREAM, "ingest", str(folder / "cli.jsonl"), "--tenant", TENANT, "--no-wait"],
        env=s.env, check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    for doc_id in ("rec", *(str((folder / f).resolve()) for f in ("api.jsonl", "cli.jsonl"))):
        texts = wait_for(
            lambda d=f"{doc_id}#r1": _es_texts(s, d), timeout_s=180, what=f"{doc_id} indexed"
        )
        assert texts == ["kept in the body field"], doc_id
    # The API kept its parse beside the upload (what the pool indexed instead of parsing again).
    assert list((root / TENANT / "_uploads" / "documents").glob("*.jsonl.parsed-*.json"))
