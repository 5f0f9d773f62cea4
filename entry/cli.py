"""The ``ragstream`` command line (typer), the console script of the package.

Commands: ``infra up|down|status``, ``db upgrade``, ``health``, ``api``, ``celery-worker``,
``flower`` and ``worker POOL`` here; the groups that live beside their code are mounted below
(``topics``, ``dlq``, ``ingest``, ``jobs``, ``index``, ``keys`` from their layers; ``query`` and
``demo`` from this package; ``replay`` from ``replay/``; ``bench`` and ``eval`` from ``bench/``).
"""

from __future__ import annotations

import inspect
import sys
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from ragstream.settings import Settings

app = typer.Typer(
    name="ragstream",
    help="Event-driven RAG serving: Kafka events, Elasticsearch hybrid retrieval, Celery jobs.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="The SQL metadata store.", no_args_is_help=True)
app.add_typer(db_app, name="db")

console = Console()


def _settings() -> Settings:
    from ragstream.logging import configure_logging
    from ragstream.settings import get_settings

    settings = get_settings()
    configure_logging(settings.logging)
    return settings


def _mount_subcommands() -> None:
    """Attach the command groups that live beside their code (imports stay light)."""
    from api.cli import keys_app
    from bench.cli import bench_app
    from bench.evaluation.cli import ablate_command, eval_command
    from bench.rerank.cli import rerank_app
    from bench.selector.cli import selector_app
    from entry.demo import demo_app
    from entry.documents import documents_app
    from entry.mcp import mcp_command
    from entry.query import query_app
    from infra.cli import app as infra_app
    from ingest.cli import index_app, ingest_command, jobs_app
    from replay.cli import replay_command
    from topics.cli import dlq_app, topics_app

    app.add_typer(infra_app, name="infra", help="Local services: Kafka, Elasticsearch, Redis.")
    app.add_typer(topics_app, name="topics")
    app.add_typer(dlq_app, name="dlq")
    app.add_typer(bench_app, name="bench")
    app.add_typer(jobs_app, name="jobs")
    app.add_typer(index_app, name="index")
    app.command("ingest")(ingest_command)
    app.command("eval")(eval_command)
    app.command("ablate")(ablate_command)
    app.command("replay")(replay_command)
    app.command("mcp")(mcp_command)
    app.add_typer(keys_app, name="keys")
    app.add_typer(query_app, name="query")
    app.add_typer(documents_app, name="documents")
    app.add_typer(demo_app, name="demo")
    app.add_typer(rerank_app, name="rerank")
    app.add_typer(selector_app, name="selector")


_mount_subcommands()


def unwrap_help(text: str | None) -> str | None:
    """``text`` (a docstring or ``help=``) with each paragraph on one line, so that Rich
    wraps it at the terminal's width: typer joins the lines of a help's first paragraph only,
    and printed the others with the docstring's own line breaks, which then wrapped again
    mid-sentence. A paragraph of list items (``- ``) or an indented block keeps its lines;
    ``\b`` and ``\f`` keep their click meaning."""
    if not text:
        return text
    paragraphs = inspect.cleandoc(text).split("\n\n")
    out = []
    for p in paragraphs:
        lines = p.split("\n")
        literal = p.startswith(("\b", "\f")) or any(
            line.startswith((" ", "- ", "* ")) for line in lines
        )
        # ``x`` (reStructuredText) shows as `x` (the Markdown most readers know).
        out.append(p if literal else " ".join(line.strip() for line in lines).replace("``", "`"))
    return "\n\n".join(out)


def _unwrap_all(typer_app: typer.Typer) -> None:
    """:func:`unwrap_help` on the help of every command and group under ``typer_app``."""
    for command in typer_app.registered_commands:
        command.help = unwrap_help(command.help or inspect.getdoc(command.callback))
    for group in typer_app.registered_groups:
        sub = group.typer_instance
        if sub is None:
            continue
        info = sub.info
        help_text = group.help if isinstance(group.help, str) else info.help
        if isinstance(help_text, str):
            group.help = unwrap_help(help_text)
        if isinstance(info.help, str):
            info.help = unwrap_help(info.help)
        _unwrap_all(sub)


@app.callback()
def _quiet_logs(
    verbose: bool = typer.Option(
        False,
        "--verbose",
        "-v",
        help="Log at INFO on stderr (default: settings.logging.cli_level).",
    ),
) -> None:
    """Logs go to stderr, at ``settings.logging.cli_level`` (WARNING) unless ``-v``; the
    long-running commands switch to ``settings.logging.level`` when they start."""
    import logging

    from ragstream.logging import configure_logging
    from ragstream.settings import get_settings

    settings = get_settings().logging
    level = "INFO" if verbose and settings.cli_level.upper() != "DEBUG" else settings.cli_level
    configure_logging(settings.model_copy(update={"level": level}))
    if not verbose:  # kafka-python logs each refused connection; the command says it once
        logging.getLogger("kafka").setLevel(logging.CRITICAL)


@db_app.command("upgrade")
def db_upgrade(
    url: str | None = typer.Option(None, help="SQLAlchemy URL; default: the settings' store."),
) -> None:
    """Run the Alembic migrations up to head."""
    from ragstream.db.engine import upgrade_head

    target = url or _settings().database_url
    upgrade_head(target)
    console.print(f"[green]database at head[/green]: {target}")


@app.command("health")
def health() -> None:
    """Probe Kafka, Elasticsearch, Redis and SQL as the API's /readyz does, and the LLM
    server of each generation tier (GET /health); exit 1 if any fails."""
    from rich.table import Table

    from ragstream.health import probe_all, probe_llm_servers

    settings = _settings()
    probes = [*probe_all(settings), *probe_llm_servers(settings)]
    table = Table("service", "healthy", "latency ms", "detail")
    for p in probes:
        mark = "[green]yes[/green]" if p.healthy else "[red]no[/red]"
        table.add_row(p.name, mark, f"{p.latency_ms:.1f}", p.detail)
    console.print(table)
    if not all(p.healthy for p in probes):
        raise typer.Exit(1)


@app.command("api")
def api(
    host: str | None = typer.Option(None, help="Bind address; default: settings.api.host."),
    port: int | None = typer.Option(None, help="Port; default: settings.api.port."),
    workers: int | None = typer.Option(
        None, help="Processes (each with its own reply consumer); default: settings.api.workers."
    ),
) -> None:
    """Run the HTTP gateway with uvicorn."""
    import uvicorn

    settings = _settings()
    uvicorn.run(
        "api.app:app_from_environment",
        factory=True,
        host=host or settings.api.host,
        port=port or settings.api.port,
        workers=workers or settings.api.workers,
        log_level=settings.logging.level.lower(),
    )


@app.command("celery-worker")
def celery_worker(
    concurrency: int | None = typer.Option(None, help="Worker processes; default: settings."),
    queues: str = typer.Option(
        "all",
        help="Comma-separated queues: 'jobs' (bulk ingest), 'webhooks', 'all', or queue names.",
    ),
    name: str | None = typer.Option(
        None, "--name", "-n", help="Node name; default '<queues>@%h' (e.g. jobs@%h)."
    ),
) -> None:
    """Run a Celery worker for bulk ingestion jobs and webhook deliveries."""
    from ragstream.celery_app import configure_celery

    settings = _settings()
    celery = configure_celery(settings)
    celery.worker_main(worker_argv(settings, queues, concurrency, name))


def worker_argv(
    settings: Settings, queues: str, concurrency: int | None, name: str | None
) -> list[str]:
    """``celery worker`` arguments: the queues behind ``queues`` (aliases ``jobs``,
    ``webhooks``, ``all``), and a node name that says what the worker serves (``jobs@%h``,
    ``webhooks@%h``), so Flower tells the workers apart. A worker of the webhook queue alone
    runs a thread pool of ``webhooks.concurrency`` (16) threads: a delivery waits on its
    receiver, and one slow receiver must not hold the only slot."""
    aliases = {
        "jobs": [settings.celery.queue],
        "webhooks": [settings.celery.webhook_queue],
        "all": [settings.celery.queue, settings.celery.webhook_queue],
    }
    parts = [p.strip() for p in queues.split(",") if p.strip()]
    names = [q for part in parts for q in aliases.get(part, [part])]
    label = "+".join(parts) or "all"
    queue_names = list(dict.fromkeys(n for n in names if n))
    pool: list[str] = []
    default = settings.celery.concurrency
    if queue_names == [settings.celery.webhook_queue]:
        # Deliveries wait on the network: threads, many of them (a slow receiver holds one).
        pool, default = ["--pool=threads"], settings.webhooks.concurrency
    return [
        "worker",
        *pool,
        f"--concurrency={concurrency or default}",
        f"--queues={','.join(queue_names)}",
        "--loglevel=INFO",
        "--events",
        f"--hostname={name or label + '@%h'}",
    ]


@app.command("flower")
def flower(
    port: int | None = typer.Option(None, help="Port; default: settings.celery.flower_port."),
    address: str = typer.Option("127.0.0.1", help="Bind address."),
) -> None:
    """Run Flower, the Celery monitor, for the ragstream Celery app."""
    import os

    from ragstream.celery_app import configure_celery

    settings = _settings()
    celery = configure_celery(settings)
    if address in ("127.0.0.1", "localhost", "::1"):
        # Flower 2 serves its HTTP API only with auth or this flag; loopback is trusted here.
        os.environ.setdefault("FLOWER_UNAUTHENTICATED_API", "true")
    celery.start(
        ["flower", f"--port={port or settings.celery.flower_port}", f"--address={address}"]
    )


@app.command("worker")
def worker(pool: str = typer.Argument(..., help="Pool name, e.g. retrieval.")) -> None:
    """Run one process of worker pool POOL until SIGTERM/SIGINT."""
    from ragstream.errors import ConfigurationError
    from workers.registry import get_pool

    settings = _settings()
    try:
        run = get_pool(pool)(settings)
    except ConfigurationError as exc:
        console.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(2) from exc
    run()


_unwrap_all(app)


def main() -> None:
    """Console entry point: an expected failure that reaches here (a ragstream error, e.g.
    Kafka or the API unreachable, or an invalid value) is one line on stderr and exit 1.

    pydantic is imported only when something failed: ``--help`` and most commands' start-up
    never load it here (issue 26: start-up was nearly all import time).
    """
    from ragstream.console import one_line
    from ragstream.errors import RagstreamError

    try:
        app()
    except RagstreamError as exc:
        sys.stderr.write(f"error: {one_line(str(exc))}\n")
        sys.exit(1)
    except Exception as exc:
        from pydantic import ValidationError

        if not isinstance(exc, ValidationError):
            raise
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or exc.title
        message = f"{where}: {first['msg']}"
        sys.stderr.write(f"error: {one_line(message)}\n")
        sys.exit(1)


if __name__ == "__main__":
    main()
