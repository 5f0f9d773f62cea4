"""``ragstream keys ...`` (API keys) and ``ragstream query "..."`` (ask from the terminal)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable

import typer
from rich.console import Console
from rich.table import Table
from sqlalchemy.orm import Session, sessionmaker

from api.models import QueryResult
from ragstream.settings import Settings, get_settings

console = Console()
keys_app = typer.Typer(
    help="API keys: each maps to one tenant; stored hashed.", no_args_is_help=True
)
TENANT = re.compile(r"[A-Za-z0-9._-]{1,128}")


def _sessions(settings: Settings) -> sessionmaker[Session]:
    from ragstream.db.engine import make_engine, make_session_factory, upgrade_head

    upgrade_head(settings.database_url)
    return make_session_factory(make_engine(settings.database_url))


@keys_app.command("create")
def keys_create(
    tenant: str = typer.Option("default", help="Tenant the key acts for."),
    name: str = typer.Option("", help="A label shown in listings."),
    rate: int | None = typer.Option(None, help="Requests per minute (default: api setting)."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print only the key."),
) -> None:
    """Create an API key and print it (once: only its SHA-256 is stored)."""
    from api.auth import create_key

    if not TENANT.fullmatch(tenant):
        console.print(f"[red]error[/red]: tenant {tenant!r} must match {TENANT.pattern}")
        raise typer.Exit(2)
    key, key_id = create_key(_sessions(get_settings()), tenant, name=name, rate_per_minute=rate)
    if quiet:
        print(key)
        return
    console.print(f"key [bold]{key_id}[/bold] for tenant [bold]{tenant}[/bold]:")
    print(key)
    console.print("[dim]store it now: it cannot be shown again[/dim]")


@keys_app.command("list")
def keys_list(tenant: str | None = typer.Option(None, help="Only this tenant's keys.")) -> None:
    """List keys (prefixes only)."""
    from api.auth import list_keys

    table = Table("id", "prefix", "tenant", "name", "rate/min", "created", "revoked")
    for k in list_keys(_sessions(get_settings()), tenant):
        table.add_row(
            str(k.id), k.prefix + "…", k.tenant, k.name, str(k.rate_per_minute or "default"),
            k.created_at.isoformat(timespec="seconds"),
            k.revoked_at.isoformat(timespec="seconds") if k.revoked_at else "",
        )  # fmt: skip
    console.print(table)


@keys_app.command("revoke")
def keys_revoke(key_id: int = typer.Argument(..., help="The key's id (see `keys list`).")) -> None:
    """Revoke a key (API processes stop accepting it within 30 s)."""
    from api.auth import revoke_key

    if not revoke_key(_sessions(get_settings()), key_id):
        console.print(f"[red]error[/red]: no live key {key_id}")
        raise typer.Exit(1)
    console.print(f"revoked key {key_id}")


def query_command(  # noqa: PLR0917 - typer options
    question: str = typer.Argument(..., help="The question."),
    tenant: str = typer.Option("default", help="Tenant (Kafka path; over HTTP the key's)."),
    stream: bool = typer.Option(False, "--stream", help="Print the answer as it is generated."),
    top_k: int | None = typer.Option(None, help="Passages kept after rerank."),
    route: str = typer.Option("auto", help="Generation tier: auto, small or large."),
    timeout: float = typer.Option(120.0, help="Seconds to wait for the answer."),
    api_url: str | None = typer.Option(None, "--api", help="Ask over HTTP at this base URL."),
    api_key: str | None = typer.Option(None, help="API key for --api."),
) -> None:
    """Ask a question; print the answer, numbered citations and per-stage timings.

    By default the question goes straight to Kafka (like a service would); with ``--api`` it
    goes through the HTTP gateway with an API key.
    """
    if route not in ("auto", "small", "large"):
        console.print("[red]error[/red]: --route must be auto, small or large")
        raise typer.Exit(2)
    if not TENANT.fullmatch(tenant):
        console.print(f"[red]error[/red]: tenant {tenant!r} must match {TENANT.pattern}")
        raise typer.Exit(2)

    def on_token(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    if api_url:
        result = _ask_http(api_url, api_key, question, stream, route, on_token)
    else:
        from ragstream.client import KafkaClient

        with KafkaClient(get_settings()) as client:
            result = client.query(
                question, tenant=tenant, top_k=top_k, route=route, timeout_s=timeout,  # type: ignore[arg-type]
                on_token=on_token if stream else None,
            )  # fmt: skip
    if stream:
        print()
    print_result(result, show_answer=not stream or result.status != "answered")
    if result.status != "answered":
        raise typer.Exit(1)


def _ask_http(  # noqa: PLR0917 - one call site
    url: str,
    key: str | None,
    question: str,
    stream: bool,
    route: str,
    on_token: Callable[[str], None],
) -> QueryResult:
    from ragstream.client import ApiRequestError, HttpClient

    if not key:
        console.print("[red]error[/red]: --api needs --api-key (ragstream keys create)")
        raise typer.Exit(2)
    with HttpClient(url, key) as client:
        try:
            if not stream:
                return client.query(question, route=route)  # type: ignore[arg-type]
            final: QueryResult | None = None
            rid = ""
            for ev in client.stream(question, route=route):  # type: ignore[arg-type]
                if ev.kind == "accepted":
                    rid = str(ev.data.get("request_id", ""))
                elif ev.kind == "token":
                    on_token(str(ev.data.get("text", "")))
                elif ev.result is not None:
                    final = ev.result
            return final or QueryResult(request_id=rid, status="pending")
        except ApiRequestError as exc:
            console.print(f"[red]error[/red]: {exc}")
            raise typer.Exit(1) from exc


def print_result(result: QueryResult, *, show_answer: bool = True) -> None:
    """Answer, numbered citations and the per-stage timing table."""
    if result.status == "pending":
        console.print(
            f"[yellow]no answer yet[/yellow] for {result.request_id}; "
            f"poll GET /v1/queries/{result.request_id}"
        )
        return
    if result.status == "failed" and result.error is not None:
        console.print(
            f"[red]{result.error.code}[/red] at {result.error.stage or '?'}: {result.error.message}"
        )
    elif show_answer:
        console.print(result.answer or "", markup=False, highlight=False)
    if result.citations:
        console.print()
        for c in result.citations:
            where = c.source or c.doc_id
            console.print(f"  [{c.n}] {c.title or c.doc_id} — {where}", markup=False)
    if result.trace:
        table = Table("stage", "ms", "detail", title=None, box=None, show_header=True)
        for t in result.trace:
            detail = ", ".join(f"{k}={v}" for k, v in t.detail.items())
            table.add_row(t.stage, f"{t.duration_ms:.1f}", detail[:80])
        console.print(table)
    total = f"{result.latency_ms:.0f} ms" if result.latency_ms is not None else "?"
    extra = " (cached)" if result.cached else ""
    console.print(f"[dim]{result.request_id} · tier {result.tier or '-'} · {total}{extra}[/dim]")
