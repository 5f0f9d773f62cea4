"""``ragstream query "..."``: ask from the terminal, over Kafka or the HTTP API, and print the
answer, numbered citations and per-stage timings (the demo prints its answers the same way);
``ragstream query get ID``: the logged state of a query, from the SQL query log or the API;
``ragstream query feedback ID --helpful|--not-helpful``: feedback on its answer, over the API.

``query`` is a command group whose default command is ``ask``: a first argument that names no
subcommand is the question (``ragstream query "What does VACUUM do?"`` is
``ragstream query ask "What does VACUUM do?"``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.table import Table
from typer.core import TyperGroup

from api.cli import TENANT
from ragstream.console import USAGE, fail
from ragstream.errors import RagstreamError

if TYPE_CHECKING:
    from api.models import QueryResult

console = Console()
#: The environment variable that gives ``--api-key`` (a key on the command line is visible
#: to every user of the machine through ``ps``).
API_KEY_ENV = "RAGSTREAM_API_KEY"
API_KEY_HELP = f"API key for --api (default: ${API_KEY_ENV})."
#: Printed between a streamed generation and the final answer that differs from it.
FINAL_ANSWER = "final answer (the answer check replaced or cut the generated text):"
NO_KEY = f"--api needs --api-key or ${API_KEY_ENV} (create one with `ragstream keys create`)"


class AskByDefault(TyperGroup):
    """A group whose first argument, unless it names a subcommand or asks for help, is the
    question of its ``ask`` command."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own click Context
        """Insert ``ask`` before a first argument that is not a subcommand or ``--help``."""
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["ask", *args]
        return super().parse_args(ctx, args)


query_app = typer.Typer(
    cls=AskByDefault,
    help='Ask a question (`query "..."`, same as `query ask "..."`), fetch one (`query get ID`) '
    "or say whether its answer helped (`query feedback ID --helpful`).",
    no_args_is_help=True,
)


@query_app.command("ask")
def query_command(  # noqa: PLR0917 - typer options
    question: str = typer.Argument(..., help="The question."),
    tenant: str = typer.Option("default", help="Tenant (Kafka path; over HTTP the key's)."),
    stream: bool = typer.Option(False, "--stream", help="Print the answer as it is generated."),
    top_k: int | None = typer.Option(None, help="Passages kept after rerank."),
    route: str = typer.Option("auto", help="Answer tier: auto, evidence, small or large."),
    timeout: float = typer.Option(120.0, help="Seconds to wait for the answer."),
    api_url: str | None = typer.Option(None, "--api", help="Ask over HTTP at this base URL."),
    api_key: str | None = typer.Option(None, envvar=API_KEY_ENV, help=API_KEY_HELP),
) -> None:
    """Ask a question; print the answer, numbered citations and per-stage timings.

    By default the question goes straight to Kafka (like a service would); with ``--api`` it
    goes through the HTTP gateway with an API key. With ``--stream`` the generated text is
    printed as it comes, and then the final answer whenever it differs (the answer check may
    replace or cut what was generated). Failures are one line on stderr, exit status 1 (2 for
    a bad argument).
    """
    if route not in ("auto", "evidence", "small", "large"):
        fail("--route must be auto, evidence, small or large", USAGE)
    if not TENANT.fullmatch(tenant):
        fail(f"tenant {tenant!r} must match {TENANT.pattern}", USAGE)
    if not question.strip():
        fail("the question is empty", USAGE)
    streamed: list[str] = []

    def on_token(text: str) -> None:
        streamed.append(text)
        sys.stdout.write(text)
        sys.stdout.flush()

    try:
        if api_url:
            result = _ask_http(api_url, api_key, question, stream, route, on_token, top_k, timeout)
        else:
            result = _ask_kafka(
                question, tenant, top_k, route, timeout, on_token if stream else None
            )
    except RagstreamError as exc:
        if streamed:
            print()
        fail(str(exc))
    _print_after_stream(result, "".join(streamed) if stream else None)
    if result.status != "answered":
        raise typer.Exit(1)


def _print_after_stream(result: QueryResult, streamed: str | None) -> None:
    """:func:`print_result`, after the text streamed so far (``None``: no stream): the final
    answer is printed unless the stream already was exactly that answer."""
    if not streamed:
        print_result(result)
        return
    print()
    if streamed.strip() == (result.answer or "").strip():
        print_result(result, show_answer=False)
        return
    if result.status == "answered":
        console.print(FINAL_ANSWER, style="dim")
    print_result(result)


def _ask_kafka(  # noqa: PLR0917 - one call site
    question: str,
    tenant: str,
    top_k: int | None,
    route: str,
    timeout: float,
    on_token: Callable[[str], None] | None,
) -> QueryResult:
    """Over Kafka, as a service inside the trust boundary would ask.

    Raises:
        RagstreamError: the question does not fit the query event (too long), or Kafka fails.
    """
    from pydantic import ValidationError

    from entry.kafka_client import KafkaClient  # not entry.client: no httpx, FastAPI, SQL
    from ragstream.settings import get_settings

    with KafkaClient(get_settings(), reply_poll_ms=20) as client:  # closes up to 80 ms sooner
        try:
            return client.query(
                question, tenant=tenant, top_k=top_k, route=route, timeout_s=timeout,  # type: ignore[arg-type]
                on_token=on_token,
            )  # fmt: skip
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(p) for p in first["loc"]) or "query"
            raise RagstreamError(f"{where}: {first['msg']}") from exc


@query_app.command("get")
def get_command(
    request_id: str = typer.Argument(..., help="The query's request id."),
    tenant: str | None = typer.Option(
        None, help="Only a query of this tenant (SQL path; default: any). Over HTTP: the key's."
    ),
    api_url: str | None = typer.Option(None, "--api", help="Fetch over HTTP at this base URL."),
    api_key: str | None = typer.Option(None, envvar=API_KEY_ENV, help=API_KEY_HELP),
) -> None:
    """Print a query's status, answer, citations and trace from the query log.

    The query log is the store ``GET /v1/queries/{id}`` reads. Exit 1 if the query is unknown
    or failed, 3 if it is still pending.
    """
    try:
        result = (
            _get_http(api_url, api_key, request_id) if api_url else _get_sql(tenant, request_id)
        )
    except RagstreamError as exc:
        fail(str(exc))
    if result is None:
        fail(f"no query {request_id!r}")
    print_result(result)
    if result.status == "failed":
        raise typer.Exit(1)
    if result.status == "pending":
        raise typer.Exit(3)


@query_app.command("feedback")
def feedback_command(  # noqa: PLR0917 - typer options
    request_id: str = typer.Argument(..., help="The query's request id."),
    helpful: bool = typer.Option(..., "--helpful/--not-helpful", help="Whether the answer helped."),
    passage: int | None = typer.Option(
        None, min=1, help="The citation number [n] of the passage that answered."
    ),
    sentence: int | None = typer.Option(
        None, min=0, help="The index of the evidence span that answered (0: the first)."
    ),
    comment: str | None = typer.Option(None, help="Free text (at most 1000 characters)."),
    api_url: str = typer.Option("http://127.0.0.1:8000", "--api", help="The API's base URL."),
    api_key: str | None = typer.Option(None, envvar=API_KEY_ENV, help=API_KEY_HELP),
) -> None:
    """Say whether a query's answer helped (``POST /v1/queries/{id}/feedback``), optionally
    naming the passage or evidence span that answered; replaces this key's earlier feedback.

    Over the API only: feedback belongs to an API key, and only a key that may read the query
    may give it. Exit 1 with the API's reason when it is refused (unknown query, an index the
    answer lacks, still pending).
    """
    from entry.client import HttpClient

    if not api_key:
        fail(NO_KEY, USAGE)
    try:
        with HttpClient(api_url, api_key) as client:
            given = client.feedback(
                request_id, helpful, passage=passage, sentence=sentence, comment=comment
            )
    except RagstreamError as exc:
        fail(str(exc))
    said = "helpful" if given.helpful else "not helpful"
    named = f" (passage [{given.passage}])" if given.passage else ""
    span = f" (evidence span {given.sentence})" if given.sentence is not None else ""
    console.print(f"stored: {said}{named}{span} for {request_id}")


def _get_sql(tenant: str | None, request_id: str) -> QueryResult | None:
    from api.models import QueryResult
    from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
    from ragstream.settings import get_settings
    from workers import query_log

    url = get_settings().database_url
    upgrade_head(url)  # as every CLI command that opens the store does
    engine = make_engine(url)
    try:
        logged = query_log.read(make_session_factory(engine), tenant, request_id)
    finally:
        engine.dispose()
    return None if logged is None else QueryResult.render(logged)


def _get_http(url: str, key: str | None, request_id: str) -> QueryResult | None:
    from entry.client import ApiRequestError, HttpClient

    if not key:
        fail(NO_KEY, USAGE)
    with HttpClient(url, key) as client:
        try:
            return client.get(request_id)
        except ApiRequestError as exc:
            if exc.status == 404:
                return None
            raise


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
    timeout a little longer) apply as over Kafka.

    Raises:
        ApiRequestError: the API answered with an error.
        ApiUnavailableError: the API cannot be reached.
    """
    from api.models import QueryResult
    from entry.client import HttpClient
    from topics.answers import Answer

    if not key:
        fail(NO_KEY, USAGE)
    with HttpClient(url, key, timeout_s=timeout + 10) as client:
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
        return final or QueryResult.render(Answer.pending(rid))


def print_result(result: QueryResult, *, show_answer: bool = True) -> None:
    """Answer, numbered citations and the per-stage timing table."""
    if result.status == "pending":
        console.print(
            f"[yellow]no answer yet[/yellow] for {result.request_id}; "
            f"poll `ragstream query get {result.request_id}` or GET /v1/queries/{result.request_id}"
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
