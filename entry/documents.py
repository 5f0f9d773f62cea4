"""``ragstream documents list|get|delete``: the tenant's documents, through the HTTP API.

Over the API, not the SQL registry: a key reads only its tenant's documents and, within it,
only those its principals may read (docs/permissions.md), and a delete is the same event
``DELETE /v1/documents/{id}`` produces (ordered with every other change of the document on
``rag.ingest``). An operator on the server uses a key like any client. The API is ``--api``
(default: ``api.public_url``, else ``http://<api.host>:<api.port>``), the key ``--api-key``
or ``$RAGSTREAM_API_KEY``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer
from rich.console import Console

from entry.query import API_KEY_ENV, API_KEY_HELP
from ragstream.console import USAGE, fail, print_rows
from ragstream.errors import RagstreamError

if TYPE_CHECKING:
    from api.models import DocumentOut
    from entry.client import HttpClient

console = Console()
documents_app = typer.Typer(
    help="The tenant's documents (through the HTTP API, with an API key): list, get, delete.",
    no_args_is_help=True,
)
API_HELP = "The API's base URL (default: api.public_url, else http://<api.host>:<api.port>)."
NO_KEY = f"needs --api-key or ${API_KEY_ENV} (create one with `ragstream keys create`)"
#: Documents fetched per request while listing (the API's page limit is higher).
PAGE = 100


def _client(api_url: str | None, api_key: str | None) -> HttpClient:
    from entry.client import HttpClient
    from ragstream.settings import get_settings

    if not api_key:
        fail(NO_KEY, USAGE)
    if not api_url:
        api = get_settings().api
        api_url = api.public_url or f"http://{api.host}:{api.port}"
    return HttpClient(api_url, api_key, timeout_s=30.0)


@documents_app.command("list")
def list_command(
    status: str | None = typer.Option(None, help="Only this status: indexed, deleted, failed."),
    source: str | None = typer.Option(None, help="Only documents of this source."),
    limit: int = typer.Option(50, min=1, help="Show at most this many (newest first)."),
    api_url: str | None = typer.Option(None, "--api", help=API_HELP),
    api_key: str | None = typer.Option(None, envvar=API_KEY_ENV, help=API_KEY_HELP),
) -> None:
    """List the documents the key may read, newest first: id, status, version, chunks,
    title and any warning. Ids are never cut, whatever the terminal's width."""
    if status not in (None, "indexed", "deleted", "failed"):
        fail("--status must be indexed, deleted or failed", USAGE)
    found: list[DocumentOut] = []
    cursor: str | None = None
    try:
        with _client(api_url, api_key) as client:
            while len(found) < limit:
                page = client.list_documents(
                    limit=min(PAGE, limit - len(found)), cursor=cursor, status=status,
                    source=source,
                )  # fmt: skip
                found += page.items
                cursor = page.next_cursor
                if cursor is None:
                    break
    except RagstreamError as exc:
        fail(str(exc))
    headers = ["doc_id", "status", "version", "chunks", "title", "note"]
    rows = [
        [d.doc_id, d.status, str(d.version), str(d.chunk_count), d.title or "", _note(d)]
        for d in found
    ]
    print_rows(console, headers, [[_escape(c) for c in row] for row in rows])
    more = " (more: raise --limit)" if cursor is not None else ""
    console.print(f"[dim]{len(found)} document(s){more}[/dim]")


@documents_app.command("get")
def get_command(
    doc_id: str = typer.Argument(..., help="The document's id."),
    api_url: str | None = typer.Option(None, "--api", help=API_HELP),
    api_key: str | None = typer.Option(None, envvar=API_KEY_ENV, help=API_KEY_HELP),
) -> None:
    """Print one document's registry row: status, version, chunks, title, source, readers,
    error and warnings. Exit 1 if there is none the key may read."""
    from entry.client import ApiRequestError

    try:
        with _client(api_url, api_key) as client:
            doc = client.get_document(doc_id)
    except ApiRequestError as exc:
        fail(f"no document {doc_id!r}" if exc.status == 404 else str(exc))
    except RagstreamError as exc:
        fail(str(exc))
    fields = {
        "doc_id": doc.doc_id,
        "status": doc.status,
        "version": str(doc.version),
        "chunks": str(doc.chunk_count),
        "title": doc.title or "",
        "source": doc.source or "",
        "readers": "everyone of the tenant" if doc.readers is None else ", ".join(doc.readers),
        "updated": doc.updated_at.isoformat(timespec="seconds") if doc.updated_at else "",
        "error": doc.error or "",
    }
    for name, value in fields.items():
        if value:
            console.print(f"[bold]{name:8}[/bold] ", end="")
            console.print(value, markup=False, highlight=False)
    for warning in doc.warnings:
        console.print("[yellow]warning[/yellow]  ", end="")
        console.print(warning, markup=False, highlight=False)


@documents_app.command("delete")
def delete_command(
    doc_id: str = typer.Argument(..., help="The document's id."),
    api_url: str | None = typer.Option(None, "--api", help=API_HELP),
    api_key: str | None = typer.Option(None, envvar=API_KEY_ENV, help=API_KEY_HELP),
) -> None:
    """Delete a document and its chunks: the delete is accepted at once and applied by the
    ingest pool (`documents get` then shows it deleted)."""
    try:
        with _client(api_url, api_key) as client:
            accepted = client.delete_document(doc_id)
    except RagstreamError as exc:
        fail(str(exc))
    console.print(f"delete of {accepted.doc_id!r} accepted (event {accepted.event_id})")


def _note(d: DocumentOut) -> str:
    """The error of a failed document, else its first warning (and how many more)."""
    if d.error:
        return d.error
    if not d.warnings:
        return ""
    more = f" (+{len(d.warnings) - 1} more)" if len(d.warnings) > 1 else ""
    return f"warning: {d.warnings[0]}{more}"


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)
