"""Uploads: format sniffing from bytes and name, the DOCX parser, skip causes of a walk, and
the multipart routes of the API (JSON bodies unchanged)."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docx
import pytest
from fastapi.testclient import TestClient

from api.routes import documents
from ingest.parsers import ParseError, detect_upload, parse
from ingest.sources import scan
from ragstream.settings import IngestSettings, Settings
from tests.unit.apikit import answered, make_app


def _docx() -> bytes:
    d = docx.Document()
    d.add_paragraph("Operations handbook", style="Title")
    d.add_heading("Install", level=1)
    d.add_paragraph("Run pip install ragstream on Python 3.11.")
    d.add_heading("Settings", level=2)
    table = d.add_table(rows=2, cols=2)
    for (r, c), text in {
        (0, 0): "name",
        (0, 1): "default",
        (1, 0): "max_batch",
        (1, 1): "32",
    }.items():
        table.cell(r, c).text = text
    d.add_heading("Upgrade", level=1)
    d.add_paragraph("Stop the pools first.")
    d.core_properties.author = "Ada"
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


# --- DOCX and sniffing ---------------------------------------------------------------------


def test_docx_sections_follow_its_headings_and_tables_become_rows() -> None:
    [doc] = parse(_docx(), filename="handbook.docx")
    assert doc.content_type == "docx" and doc.title == "Operations handbook"
    assert [(s.heading_path, s.text) for s in doc.sections] == [
        (("Install",), "Run pip install ragstream on Python 3.11."),
        (("Install", "Settings"), "name | default\nmax_batch | 32"),
        (("Upgrade",), "Stop the pools first."),
    ]
    assert doc.metadata["author"] == "Ada"


def test_an_empty_docx_and_a_docx_bomb_are_parse_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    buf = io.BytesIO()
    docx.Document().save(buf)
    with pytest.raises(ParseError, match="document is empty"):
        parse(buf.getvalue(), content_type="docx")
    monkeypatch.setattr("ingest.parsers.word.MAX_UNPACKED_BYTES", 1000)
    with pytest.raises(ParseError, match="over the 1000-byte limit"):
        parse(_docx(), content_type="docx")


def test_binary_formats_are_known_by_their_bytes_whatever_the_name() -> None:
    assert detect_upload(_docx(), filename="upload.bin") == "docx"
    assert detect_upload(_docx(), filename="notes.txt", content_type="text/plain") == "docx"
    assert detect_upload(b"%PDF-1.7\n...", filename="scan") == "pdf"


def test_text_formats_go_by_extension_then_declared_type_then_bytes() -> None:
    md = b"# Title\n\nSome text."
    assert detect_upload(md, filename="notes.md") == "markdown"
    assert detect_upload(md, filename="blob", content_type="text/markdown") == "markdown"
    assert detect_upload(md, filename="blob", content_type="application/octet-stream") == "text"
    assert detect_upload(b"<!doctype html><p>x</p>", filename=None) == "html"
    assert detect_upload(b'{"text": "a"}\n{"text": "b"}', filename="r") == "jsonl"


def test_a_name_that_lies_about_a_binary_format_and_unknown_bytes_are_refused() -> None:
    with pytest.raises(ParseError, match=r"'report\.pdf' is not a PDF"):
        detect_upload(b"just text", filename="report.pdf")
    with pytest.raises(ParseError, match=r"'a\.docx' is not a DOCX"):
        detect_upload(b"just text", filename="a.docx")
    with pytest.raises(ParseError, match="binary and not PDF or DOCX"):
        detect_upload(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", filename="img.png")
    other_zip = io.BytesIO()
    with zipfile.ZipFile(other_zip, "w") as z:
        z.writestr("xl/workbook.xml", "<workbook/>")
    with pytest.raises(ParseError, match="binary and not PDF or DOCX"):
        detect_upload(other_zip.getvalue(), filename="book.xlsx")


# --- why a walk found nothing --------------------------------------------------------------


def test_nothing_to_ingest_names_each_cause(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "docs").mkdir(parents=True)
    outside.mkdir()
    (outside / "a.md").write_text("# a")
    (root / "docs" / "a.md").symlink_to(outside / "a.md")
    (root / "docs" / "b.xlsx").write_bytes(b"x")
    (root / "docs" / "c.png").write_bytes(b"x")
    found = scan([root / "docs"], [root], [".md"])
    assert found.files == []
    reason = found.nothing_reason()
    assert reason.startswith("1 file(s) outside the allowed roots (e.g. ")
    assert f"{root}/docs/a.md: outside the allowed roots ({root})" in reason
    assert reason.endswith("; 2 file(s) of unknown type (.png x1, .xlsx x1)")


def test_unreadable_files_are_named(tmp_path: Path) -> None:
    (tmp_path / "dangling.md").symlink_to(tmp_path / "gone.md")
    (tmp_path / "dir.md").mkdir()
    found = scan([tmp_path], [tmp_path], [".md"])
    assert found.files == []
    assert found.nothing_reason() == (
        f"1 file(s) unreadable (e.g. {tmp_path}/dangling.md: not a regular file (a dangling link?))"
    )
    (tmp_path / "dangling.md").unlink()
    assert scan([tmp_path], [tmp_path], [".md"]).nothing_reason() == "no file found"


# --- the API -------------------------------------------------------------------------------


@pytest.fixture
def client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    root = tmp_path / "roots"
    ingest = IngestSettings(allowed_roots=[root], upload_root=root)
    yield from uploads_client(tmp_path, monkeypatch, ingest)


def uploads_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ingest: IngestSettings
) -> Iterator[Any]:
    """A test client of the API with ``ingest`` settings; ``c.sent`` collects the ingest events
    it would produce, ``c.root`` is the upload root, ``c.settings`` the settings tree."""
    app, _ = make_app(tmp_path, answered)
    root = ingest.upload_root
    settings: Settings = app.state.services.settings
    app.state.services.settings = settings.model_copy(update={"ingest": ingest})
    sent: list[Any] = []

    async def produce(request: Any, event: Any) -> None:
        sent.append(event)

    monkeypatch.setattr(documents, "produce_ingest", produce)
    with TestClient(app) as c:
        c.sent = sent
        c.root = root
        c.settings = app.state.services.settings
        yield c


def test_a_multipart_docx_is_stored_under_the_upload_root_and_produced(client: Any) -> None:
    r = client.post(
        "/v1/documents",
        files={"file": ("handbook.docx", _docx(), "application/octet-stream")},
        data={"title": "Handbook", "metadata": json.dumps({"lang": "en"})},
    )
    assert r.status_code == 202, r.text
    assert r.json()["doc_id"] == "handbook.docx" and r.json()["op"] == "upsert"
    [event] = client.sent
    assert event.tenant == "acme" and event.content_type == "docx" and event.text is None
    assert event.source == "handbook.docx" and event.metadata == {"lang": "en"}
    stored = Path(event.source_path)
    assert stored.is_relative_to(client.root / "acme" / "_uploads" / "documents")
    assert stored.suffix == ".docx" and parse(stored.read_bytes())[0].title == (
        "Operations handbook"
    )


def test_json_documents_still_work_and_other_media_types_are_415(client: Any) -> None:
    r = client.post("/v1/documents", json={"doc_id": "a", "text": "hello"})
    assert r.status_code == 202 and client.sent[-1].text == "hello"
    r = client.post("/v1/documents", json={"doc_id": "a"})
    assert r.status_code == 422 and r.json()["error"]["message"].startswith("body.text")
    r = client.post("/v1/documents", content=b"doc_id=a", headers={"content-type": "text/csv"})
    assert r.status_code == 415 and "multipart/form-data" in r.json()["error"]["message"]


@pytest.mark.parametrize(
    ("files", "data", "status", "message"),
    [
        ({"file": ("x.png", b"\x89PNG\r\n\x1a\n\0\0", "image/png")}, {}, 415, "not PDF or DOCX"),
        ({"file": ("r.pdf", b"%PDF-1.4 garbage", "application/pdf")}, {}, 422, "corrupt PDF"),
        ({"file": ("e.md", b"   ", "text/markdown")}, {}, 422, "'e.md': document is empty"),
        ({"file": ("e.md", b"", "text/markdown")}, {}, 422, "file: the file is empty"),
        ({"other": ("a.md", b"# a", "text/markdown")}, {}, 422, "file: a file part is required"),
        ({"file": ("a.md", b"# a", "text/markdown")}, {"bogus": "1"}, 422, "body.bogus"),
        ({"file": ("a.md", b"# a", "text/markdown")}, {"metadata": "[1]"}, 422, "JSON object"),
    ],
)
def test_bad_uploads_name_the_cause(
    client: Any, files: Any, data: Any, status: int, message: str
) -> None:
    r = client.post("/v1/documents", files=files, data=data)
    assert r.status_code == status, r.text
    assert message in r.json()["error"]["message"], r.text
    assert client.sent == []


def test_the_spec_shows_the_json_and_multipart_bodies(client: Any) -> None:
    spec = client.get("/openapi.json").json()
    for path, field in (("/v1/documents", "file"), ("/v1/ingest/jobs", "archive")):
        content = spec["paths"][path]["post"]["requestBody"]["content"]
        assert set(content) == {"application/json", "multipart/form-data"}
        form = content["multipart/form-data"]["schema"]
        assert form["properties"][field] == {
            "type": "string", "format": "binary", "description": "The file.",
        }  # fmt: skip
        assert field in form["required"]
        assert "415" in spec["paths"][path]["post"]["responses"]


def test_an_unsafe_archive_is_refused_and_leaves_nothing(client: Any) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("docs/a.md", "# a")
        z.writestr("../../escape.md", "# evil")
    r = client.post("/v1/ingest/jobs", files={"archive": ("kb.zip", buf.getvalue())})
    assert r.status_code == 422 and "unsafe member name" in r.json()["error"]["message"]
    jobs_dir = client.root / "acme" / "_uploads" / "jobs"
    assert not any(jobs_dir.iterdir())
    r = client.post("/v1/ingest/jobs", files={"archive": ("kb.txt", b"not an archive")})
    assert r.status_code == 422 and "not a zip, tar or tar.gz" in r.json()["error"]["message"]


def test_an_archive_of_unknown_files_says_so(client: Any) -> None:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("a.png", "x")
        z.writestr("b.xlsx", "x")
    r = client.post("/v1/ingest/jobs", files={"archive": ("kb.zip", buf.getvalue())})
    assert r.status_code == 422
    assert "nothing to ingest: 2 file(s) of unknown type" in r.json()["error"]["message"]
    assert not any((client.root / "acme" / "_uploads" / "jobs").iterdir())


def test_paths_outside_the_tenant_folder_name_that_cause(client: Any) -> None:
    r = client.post("/v1/ingest/jobs", json={"paths": ["/etc"]})
    assert r.status_code == 422 and "outside the allowed roots" in r.json()["error"]["message"]
