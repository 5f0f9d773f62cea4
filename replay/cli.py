"""``ragstream replay``: logged queries answered again by a candidate on shadow topics."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import typer
from rich.console import Console

console = Console(stderr=True)


def replay_command(  # noqa: PLR0917 - typer options
    tenant: str = typer.Option("default", "--tenant", help="Whose logged queries."),
    since: str = typer.Option(
        "24h", "--since", help="Logged at or after: ISO 8601 (UTC) or a duration ago (2h, 1d)."
    ),
    until: str | None = typer.Option(
        None, "--until", help="Logged before: ISO 8601 (UTC) or a duration ago; default: now."
    ),
    sample: int | None = typer.Option(
        None,
        "--sample",
        min=1,
        help="At most N queries, drawn at random; default: settings.replay.sample.",
    ),
    seed: int = typer.Option(0, "--seed", help="Seeds the sample draw."),
    alias: str | None = typer.Option(
        None, "--alias", help="Candidate chunk index alias; default: the live one."
    ),
    tier: str = typer.Option(
        "auto", "--tier", help="Answer tier forced on every query: auto, evidence, small, large."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="Catalog model for the LLM tiers, NAME or NAME=URL (its OpenAI-compatible server).",
    ),
    set_: list[str] = typer.Option(
        [],
        "--set",
        help="SECTION.FIELD=VALUE of the candidate (repeatable), e.g. retrieval.bm25_weight=1.0.",
    ),
    rate: float | None = typer.Option(
        None, "--rate", help="Most queries submitted a second; default: settings.replay.rate_per_s."
    ),
    max_in_flight: int | None = typer.Option(
        None, "--max-in-flight", min=1, help="Most unanswered queries; default: the settings'."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Report directory; default: .local/replay/<run id>/."
    ),
    metrics_port: int = typer.Option(
        0,
        "--metrics-port",
        min=0,
        help="Serve the replay's Prometheus metrics on this port while it runs (0: not).",
    ),
) -> None:
    """Replay logged queries against a candidate (another index alias, embedder, fusion
    weights, tier or model) on shadow topics that never reach users, callbacks, caches or the
    query log, at a bounded rate; write report.json and report.md (answers changed, citations
    gained and lost, refusals, latency p50/p95 before and after, changed answers side by side).
    """
    from ragstream.errors import RagstreamError
    from ragstream.metrics import serve_metrics
    from ragstream.settings import get_settings
    from replay import ReplayError
    from replay.candidate import Candidate, parse_sets
    from replay.report import summary_line, write_report
    from replay.run import ReplayOptions, new_run_id, run_replay
    from replay.selection import Selection, parse_when

    settings = get_settings()
    now = dt.datetime.now(dt.UTC)
    run_id = new_run_id(now)
    out_dir = out or settings.infra.local_dir / "replay" / run_id
    try:
        if metrics_port:
            serve_metrics(metrics_port)
        name, _, url = (model or "").partition("=")
        options = ReplayOptions(
            selection=Selection(
                tenant=tenant,
                since=parse_when(since, now),
                until=parse_when(until, now) if until else None,
                sample=sample or settings.replay.sample,
                seed=seed,
            ),
            candidate=Candidate(
                alias=alias,
                tier=tier,
                model=name.strip() or None,
                model_url=url.strip() or None,
                sets=parse_sets(set_),
            ),
            out_dir=out_dir,
            rate_per_s=rate,
            max_in_flight=max_in_flight,
            run_id=run_id,
        )
        report = run_replay(
            settings, options, progress=lambda msg: console.print(f"[dim]{msg}[/dim]")
        )
    except ReplayError as exc:
        console.print(f"error: {exc}")
        raise typer.Exit(2) from exc
    except (RagstreamError, OSError) as exc:  # OSError: the metrics port is taken
        console.print(f"error: {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from exc
    as_json, as_md = write_report(report, out_dir)
    typer.echo(summary_line(report))
    typer.echo(f"report: {as_md} ({as_json.name} beside it)")
