"""``ragstream infra up|down|status``: the typer app over :mod:`infra.manager`.

Mount it into another typer app with ``root.add_typer(infra.cli.app, name="infra")``, or
run it directly with ``python -m infra.cli`` / ``python -m infra``.
"""

from enum import StrEnum
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.table import Table

from infra.errors import InfraError
from infra.manager import down as stop_all
from infra.manager import status as current_status
from infra.manager import up as start_all
from infra.service import ServiceStatus
from ragstream.settings import get_settings

app = typer.Typer(
    name="infra",
    help=(
        "Local Kafka (KRaft), Elasticsearch, Redis, the LLM server (llama.cpp) and PostgreSQL "
        "on loopback, under .local/."
    ),
    no_args_is_help=True,
)
console = Console()


class ServiceName(StrEnum):
    """Names accepted by ``--only``."""

    redis = "redis"
    llm = "llm"
    kafka = "kafka"
    elasticsearch = "elasticsearch"
    postgres = "postgres"


def _fail(command: str, exc: InfraError) -> NoReturn:
    # Plain text: the message carries log lines that rich would read as markup or re-wrap.
    typer.secho(f"{command} failed: ", fg=typer.colors.RED, err=True, nl=False)
    typer.echo(str(exc), err=True)
    raise typer.Exit(1) from exc


def _table(statuses: list[ServiceStatus]) -> Table:
    table = Table(title="ragstream infra")
    for column in ("service", "port", "PID", "health", "detail"):
        table.add_column(column)
    for state in statuses:
        health = "[green]healthy[/green]" if state.healthy else "[red]unhealthy[/red]"
        pid = str(state.pid) if state.pid is not None else "-"
        table.add_row(state.name, str(state.port), pid, health, state.detail)
    return table


@app.command()
def up(
    postgres: Annotated[
        bool | None,
        typer.Option(
            "--postgres/--no-postgres",
            help="Also start PostgreSQL. Default: settings.infra.postgres.",
            show_default=False,
        ),
    ] = None,
    only: Annotated[
        list[ServiceName] | None,
        typer.Option("--only", help="Start only this service (repeatable)."),
    ] = None,
) -> None:
    """Install (first run) and start the services; wait until they are healthy."""
    try:
        statuses = start_all(
            get_settings(), postgres=postgres, only=[s.value for s in only] if only else None
        )
    except InfraError as exc:
        _fail("infra up", exc)
    console.print(_table(statuses))


@app.command()
def down() -> None:
    """Stop every running service (data under .local/ is kept)."""
    try:
        stop_all(get_settings())
    except InfraError as exc:
        _fail("infra down", exc)
    console.print("all services stopped")


@app.command()
def status() -> None:
    """Show each service's port, PID and health; exit 1 if one is unhealthy."""
    statuses = current_status(get_settings())
    console.print(_table(statuses))
    if not all(state.healthy for state in statuses):
        raise typer.Exit(1)


if __name__ == "__main__":
    app()
