"""The CLI's rough edges of issue 39: no ``documents`` command, ``keys list`` cut every column
at 80 columns, ``dlq inspect`` printed 228-column lines, and help texts broke mid-sentence
(typer kept the docstrings' line breaks after the first paragraph)."""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any, ClassVar

import pytest
from rich.console import Console
from typer.testing import CliRunner

from api.models import DocumentAccepted, DocumentOut
from api.pages import DocumentPage
from entry.cli import app
from topics.dlq import DeadLetterListing, DeadLetterView

NOW = dt.datetime(2026, 12, 3, 9, 0, tzinfo=dt.UTC)
LONG_ID = "manuals/postgresql-16/reference/sql-commands/create-index-concurrently.html"


def _run(args: list[str], monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    monkeypatch.setenv("COLUMNS", "80")
    return CliRunner().invoke(app, args, env={"COLUMNS": "80", **env})


def _narrow(monkeypatch: pytest.MonkeyPatch, *modules: Any) -> None:
    """The modules' consoles at 80 columns (as a terminal of 80, or ``COLUMNS=80``)."""
    for module in modules:
        monkeypatch.setattr(module, "console", Console(width=80, force_terminal=False))


class FakeDocuments:
    """:class:`entry.client.HttpClient` for documents: two pages, a get and a delete."""

    calls: ClassVar[list[tuple[str, Any]]] = []

    def __init__(self, base_url: str, api_key: str, **_: Any) -> None:
        self.calls.append(("open", (base_url, api_key)))

    def __enter__(self) -> FakeDocuments:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def list_documents(self, **kw: Any) -> DocumentPage:
        self.calls.append(("list", kw))
        doc = DocumentOut(
            doc_id=LONG_ID if kw["cursor"] is None else "b",
            status="indexed", version=2, chunk_count=7, title="CREATE INDEX",
            warnings=["1 lone surrogate(s) in text replaced by U+FFFD"],
        )  # fmt: skip
        return DocumentPage(items=[doc], next_cursor="c1" if kw["cursor"] is None else None)

    def get_document(self, doc_id: str) -> DocumentOut:
        from entry.client import ApiRequestError

        if doc_id == "missing":
            raise ApiRequestError(404, "NOT_FOUND", "no document")
        return DocumentOut(
            doc_id=doc_id, status="indexed", version=3, chunk_count=4, title="T",
            source="s.md", readers=["group:eng"], updated_at=NOW,
            warnings=["1 lone surrogate(s) in text replaced by U+FFFD"],
        )  # fmt: skip

    def delete_document(self, doc_id: str) -> DocumentAccepted:
        self.calls.append(("delete", doc_id))
        return DocumentAccepted(doc_id=doc_id, op="delete", event_id="e-1")


@pytest.fixture
def documents(monkeypatch: pytest.MonkeyPatch) -> type[FakeDocuments]:
    import entry.client
    import entry.documents

    FakeDocuments.calls = []
    monkeypatch.setattr(entry.client, "HttpClient", FakeDocuments)
    _narrow(monkeypatch, entry.documents)
    return FakeDocuments


def test_documents_list_follows_the_cursor_and_prints_whole_ids(
    documents: type[FakeDocuments], monkeypatch: pytest.MonkeyPatch
) -> None:
    result = _run(["documents", "list", "--api", "http://api:8000"], monkeypatch,
                  RAGSTREAM_API_KEY="rs_key")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert LONG_ID in result.output  # never cut to "manuals/post…"
    assert "warning: 1 lone surrogate(s)" in " ".join(result.output.split())
    assert "2 document(s)" in result.output
    assert documents.calls[0] == ("open", ("http://api:8000", "rs_key"))
    assert [kw["cursor"] for name, kw in documents.calls if name == "list"] == [None, "c1"]


def test_documents_get_and_delete_go_through_the_api(
    documents: type[FakeDocuments], monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _run(["documents", "get", LONG_ID, "--api-key", "k"], monkeypatch)
    assert got.exit_code == 0, got.output
    assert LONG_ID in got.output and "group:eng" in got.output and "warning" in got.output
    missing = _run(["documents", "get", "missing", "--api-key", "k"], monkeypatch)
    assert missing.exit_code == 1 and "no document 'missing'" in missing.output
    deleted = _run(["documents", "delete", "a/b", "--api-key", "k"], monkeypatch)
    assert deleted.exit_code == 0 and "accepted" in deleted.output
    assert ("delete", "a/b") in documents.calls


def test_documents_needs_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAGSTREAM_API_KEY", raising=False)
    result = _run(["documents", "list"], monkeypatch)
    assert result.exit_code == 2 and "RAGSTREAM_API_KEY" in result.output


def test_keys_list_prints_whole_ids_names_and_principals_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import api.auth
    import api.cli

    key = SimpleNamespace(
        id=123456, prefix="rs_7f3a9c", tenant="acme-manufacturing-eu-west",
        role="cluster-operator", principals=",group:engineering-platform,user:ada.lovelace,",
        name="nightly-evaluation-runner-key", rate_per_minute=None, created_at=NOW,
        revoked_at=None,
    )  # fmt: skip
    monkeypatch.setattr(api.auth, "list_keys", lambda *_: [key])
    monkeypatch.setattr(api.cli, "_sessions", lambda _: None)
    _narrow(monkeypatch, api.cli)
    result = _run(["keys", "list"], monkeypatch)
    assert result.exit_code == 0, result.output
    for whole in ("123456", "acme-manufacturing-eu-west", "cluster-operator",
                  "group:engineering-platform,user:ada.lovelace",
                  "nightly-evaluation-runner-key", "2026-12-03T09:00:00+00:00"):  # fmt: skip
        assert whole in result.output, result.output
    assert "…" not in result.output.replace("rs_7f3a9c…", "")


def test_dlq_inspect_wraps_to_the_terminal_and_keeps_every_word(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import topics.cli
    import topics.consumer
    import topics.dlq

    message = (
        "ValidationError: 1 validation error for QueryRequest query String should have at "
        "most 4000 characters [type=string_too_long, input_value='aaaa...', input_type=str] "
        "For further information visit https://errors.pydantic.dev/2.9/v/string_too_long"
    )
    letter = DeadLetterView(
        partition=2, offset=41, key="req-0b3c8f52-6a4e-4d1e-9c37-2f0d9a1b7e55", size=5123,
        context={"error.class": "pydantic_core.ValidationError", "error.message": message,
                 "failed_at": NOW.isoformat(), "pool": "retrieval", "attempts": "3",
                 "source.topic": "ragstream.rag.queries", "source.partition": "2",
                 "source.offset": "9001"},
    )  # fmt: skip
    listing = DeadLetterListing(topic="ragstream.rag.queries.dlq", total=1, letters=[letter])
    consumer = SimpleNamespace(close=lambda **_: None)
    monkeypatch.setattr(topics.cli, "_dlq_name", lambda _: "ragstream.rag.queries.dlq")
    monkeypatch.setattr(topics.consumer, "make_consumer", lambda *_, **__: consumer)
    monkeypatch.setattr(topics.dlq, "inspect", lambda *_, **__: listing)
    _narrow(monkeypatch, topics.cli)
    result = _run(["dlq", "inspect", "rag.queries"], monkeypatch)
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    long = [line for line in lines if len(line) > 80]
    assert not long, long
    assert " ".join(message.split()) in " ".join(result.output.split())  # nothing cut
    assert "https://errors.pydantic.dev/2.9/v/string_too_long" in lines[-3] or any(
        "https://errors.pydantic.dev/2.9/v/string_too_long" in line for line in lines
    )
    assert any(letter.key in line for line in lines)  # an id stays on one line


COMMANDS = [
    [], ["query", "ask"], ["query", "get"], ["documents"], ["documents", "list"], ["keys"],
    ["keys", "create"], ["dlq", "inspect"], ["dlq", "replay"], ["health"], ["ingest"],
    ["topics", "schemas"], ["celery-worker"],
]  # fmt: skip


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "ragstream")
def test_help_paragraphs_wrap_at_the_terminal_not_at_the_docstrings_breaks(
    command: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """At 80 columns every line of a help paragraph but its last is full (wrapped by Rich at
    the width, not cut where the docstring's source line ended)."""
    result = _run([*command, "--help"], monkeypatch)
    assert result.exit_code == 0, result.output
    head = result.output.split("╭")[0]  # the description, above the boxes
    paragraphs = [p.splitlines() for p in head.split("\n \n") if p.strip()]
    for lines in paragraphs:
        text = [line.rstrip() for line in lines if line.strip()]
        if text and text[0].lstrip().startswith("Usage:"):
            continue
        short = [line for line in text[:-1] if len(line) < 60]
        assert not short, f"a help line broken mid-sentence: {short!r} in\n{head}"
    assert "``" not in head
