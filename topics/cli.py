"""``ragstream topics ...`` and ``ragstream dlq ...`` commands."""

from __future__ import annotations

import json
import textwrap

import typer
from rich.console import Console
from rich.table import Table

from ragstream.console import USAGE, fail, print_rows

topics_app = typer.Typer(
    help="Topic registry: create topics, write JSON schemas and the AsyncAPI document.",
    no_args_is_help=True,
)
dlq_app = typer.Typer(help="Dead-letter queues: inspect and replay.", no_args_is_help=True)
console = Console()


@topics_app.command("create")
def create() -> None:
    """Create every registry topic and DLQ idempotently; exit 1 if an existing one drifted."""
    from ragstream.settings import get_settings
    from topics.admin import create_registry_topics

    report = create_registry_topics(get_settings().kafka)
    table = Table("topic", "state")
    for name in report.created:
        table.add_row(name, "[green]created[/green]")
    for name in report.existing:
        if name not in report.created:
            table.add_row(name, "exists")
    console.print(table)
    for message in report.drift:
        console.print(f"[red]drift[/red]: {message}")
    if report.drift:
        raise typer.Exit(1)


@topics_app.command("list")
def list_topics() -> None:
    """Print the registry: name, partitions, retention, key, event model, DLQ."""
    from ragstream.settings import get_settings
    from topics.registry import TopicRegistry

    settings = get_settings()
    reg = TopicRegistry(settings.kafka.topic_prefix)
    from topics.registry import TOPICS

    rows = [
        [
            reg.name(spec),
            str(spec.partitions),
            f"{spec.retention_ms / 3_600_000:g}",
            spec.key,
            spec.model.__name__,
            reg.dlq(spec) if spec.consumed else "-",
        ]
        for spec in TOPICS
    ]
    # Topic names are identifiers people copy: never cut (narrower than the table, each
    # topic is a block of its own).
    print_rows(console, ["topic", "partitions", "retention h", "key", "model", "dlq"], rows)


@topics_app.command("schemas")
def schemas() -> None:
    """Rewrite ``topics/schemas/*.schema.json`` and the AsyncAPI document
    ``topics/schemas/asyncapi.json`` from the registry and its event models."""
    from topics.asyncapi import write_asyncapi
    from topics.schemas import write_schemas

    for path in [*write_schemas(), write_asyncapi()]:
        console.print(f"wrote {path}")


def _dlq_name(topic: str) -> str:
    """The physical DLQ topic of ``topic`` (a source topic or its ``.dlq``, with or without
    the deployment's prefix); exit 2 when the broker has no such topic."""
    from ragstream.settings import get_settings
    from topics.admin import make_admin

    settings = get_settings()
    prefix = settings.kafka.topic_prefix
    name = topic if topic.startswith(prefix) else prefix + topic
    dlq = name if name.endswith(".dlq") else name + ".dlq"
    admin = make_admin(settings.kafka)
    try:
        exists = dlq in set(admin.list_topics())
    finally:
        admin.close()
    if not exists:
        fail(f"no dead-letter topic {dlq!r}", USAGE)
    return dlq


@dlq_app.command("inspect")
def inspect_command(
    topic: str = typer.Argument(..., help="Source topic (e.g. rag.queries) or its .dlq topic."),
    limit: int = typer.Option(20, min=1, help="Show the newest N dead letters."),
    as_json: bool = typer.Option(False, "--json", help="One JSON object per dead letter."),
) -> None:
    """List dead letters with their reason, without consuming them (no consumer group, no
    commit: a later replay still sees all of them)."""
    from ragstream.settings import get_settings
    from topics.consumer import make_consumer
    from topics.dlq import inspect

    dlq = _dlq_name(topic)
    consumer = make_consumer(get_settings().kafka, group=None)
    try:
        listing = inspect(consumer, dlq, limit=limit)
    finally:
        consumer.close(autocommit=False)
    if as_json:
        for v in listing.letters:
            mark = v.replay
            marks = {"replay.id": mark.replay_id, "replay.attempt": mark.attempt} if mark else {}
            print(json.dumps({"partition": v.partition, "offset": v.offset, "key": v.key,
                              "bytes": v.size, **v.context, **marks}))  # fmt: skip
        return
    width = console.width
    print(f"{listing.total} dead letter(s) in {dlq}; the newest {len(listing.letters)}:")
    # One block per letter, not a table: messages and topic names are long, and never cut,
    # only wrapped at spaces to the terminal's width (a topic name or an id stays whole).
    for v in listing.letters:
        c = v.context
        error = c.get("error.class", "?").rsplit(".", 1)[-1]
        print()
        print(
            _wrapped(
                f"{v.partition}:{v.offset}  {c.get('failed_at', '?')}  pool "
                f"{c.get('pool', '?')}  {error} after {c.get('attempts', '?')} attempt(s)",
                width, "",
            )
        )  # fmt: skip
        for line in (
            f"{c.get('error.message', '')}",
            f"from {c.get('source.topic', '?')}:{c.get('source.partition', '?')}"
            f"@{c.get('source.offset', '?')}  key {v.key or '-'}  {v.size} bytes",
            *([f"replay {v.replay.replay_id}, attempt {v.replay.attempt}"] if v.replay else []),
        ):
            print(_wrapped(line, width, "  "))
    if listing.letters:
        print(f"\nreplay them with `ragstream dlq replay {topic}`")


def _wrapped(text: str, width: int, indent: str) -> str:
    """``text`` wrapped at spaces to ``width`` columns, its first line after ``indent`` and the
    others after ``indent`` and two spaces; a word longer than a line is kept whole."""
    return textwrap.fill(
        text, width=max(width, 20), initial_indent=indent, subsequent_indent=indent + "  ",
        break_long_words=False, break_on_hyphens=False,
    ) or indent.rstrip()  # fmt: skip


@dlq_app.command("replay")
def replay(
    topic: str = typer.Argument(..., help="Source topic (e.g. rag.queries) or its .dlq topic."),
    limit: int | None = typer.Option(None, min=0, help="Replay at most this many dead letters."),
    group: str = typer.Option("ragstream-dlq-replay", help="Consumer group tracking progress."),
    settle_ms: int = typer.Option(
        3000, min=0, help="Then wait up to this long (ms) to count letters that fail again."
    ),
) -> None:
    """Re-publish dead letters to the topic they came from (original bytes and headers, plus
    replay.id and replay.attempt headers), each once, only those the DLQ held at the start."""
    from ragstream.settings import get_settings
    from topics.dlq_replay import replay_dead_letters

    dlq = _dlq_name(topic)
    r = replay_dead_letters(
        get_settings().kafka, dlq, group=group, limit=limit, settle_ms=settle_ms
    )
    ends = " ".join(f"p{p}:{o}" for p, o in sorted(r.end_offsets.items()))
    # print, not the rich console: topic names and the replay id are never wrapped.
    print(f"replayed {r.replayed} dead letter(s) from {dlq}, replay {r.replay_id}")
    print(f"stopped at the end offsets it started with: {ends}")
    if settle_ms:
        print(f"{r.failed_again} failed again within {settle_ms} ms")
    if r.remaining:
        print(f"{r.remaining} more before those offsets: run it again to replay them")
