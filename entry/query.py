"""``ragstream query "..."``: ask from the terminal, over Kafka or the HTTP API, and print the
answer, numbered citations and per-stage timings (the demo prints its answers the same way)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import typer
from rich.console import Console
from rich.table import Table

from api.cli import TENANT
from api.models import QueryResult
from ragstream.settings import get_settings

console = Console()


def query_command(  # noqa: PLR0917 - typer options
    question: str = typer.Argument(..., help="The question."),
    tenant: str = typer.Option("default", help="Tenant (Kafka path; over HTTP the key's)."),
    stream: bool = typer.Option(False, "--stream", help="Print the answer as it is generated."),
    top_k: int | None = typer.Option(None, help="Passages kept after rerank."),
    route: str = typer.Option("auto", help="Answer tier: auto, evidence, small or large."),
    timeout: float = typer.Option(120.0, help="Seconds to wait for the answer."),
    api_url: str | None = typer.Option(None, "--api", help="Ask over HTTP at this base URL."),
    api_key: str | None = typer.Option(None, help="API key for --api."),
) -> None:
    """Ask a question; print the answer, numbered citations and per-stage timings.

    By default the question goes straight to Kafka (like a service would); with ``--api`` it
    goes through the HTTP gateway with an API key.
    """
    if route not in ("auto", "evidence", "small", "large"):
        console.print("[red]error[/red]: --route must be auto, evidence, small or large")
        raise typer.Exit(2)
    if not TENANT.fullmatch(tenant):
        console.print(f"[red]error[/red]: tenant {tenant!r} must match {TENANT.pattern}")
        raise typer.Exit(2)

    def on_token(text: str) -> None:
        sys.stdout.write(text)
        sys.stdout.flush()

    if api_url:
        result = _ask_http(api_url, api_key, question, stream, route, on_token, top_k, timeout)
    else:
        from entry.client import KafkaClient

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
    top_k: int | None = None,
    timeout: float = 120.0,
) -> QueryResult:
    """Over HTTP: ``top_k`` and ``timeout`` (the server's wait, and the HTTP client's read
    timeout a little longer) apply as over Kafka."""
    from entry.client import ApiRequestError, HttpClient

    if not key:
        console.print("[red]error[/red]: --api needs --api-key (ragstream keys create)")
        raise typer.Exit(2)
    with HttpClient(url, key, timeout_s=timeout + 10) as client:
        try:
            if not stream:
                return client.query(question, route=route, top_k=top_k, timeout_s=timeout)  # type: ignore[arg-type]
            final: QueryResult | None = None
            rid = ""
            events = client.stream(question, route=route, top_k=top_k, timeout_s=timeout)  # type: ignore[arg-type]
            for ev in events:
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
