"""``ragstream eval [FILE.jsonl]``: retrieval modes and answers measured on a question set."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer
from rich.console import Console

console = Console(stderr=True)


def eval_command(  # noqa: PLR0917 - typer options
    file: Path | None = typer.Argument(
        None, help="Questions (JSONL, the format of shared/eval); default: the sample set."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Output directory; default: .local/eval/<UTC timestamp>/."
    ),
    modes: str | None = typer.Option(
        None,
        "--modes",
        help="Comma-separated modes: bm25, knn, hybrid, hybrid+none, hybrid+llm, "
        "hybrid+cross-encoder; default: all but hybrid+llm (those that cannot run here are "
        "skipped).",
    ),
    generate: bool = typer.Option(
        True, "--generate/--no-generate", help="Generate answers (default configuration)."
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, help="First N questions only."),
    tenant: str = typer.Option("default", "--tenant", help="Tenant whose chunks are searched."),
    index: str | None = typer.Option(
        None, "--index", help="Chunk index alias; default: settings.elasticsearch.index_alias."
    ),
    top_n: int | None = typer.Option(
        None, "--top-n", min=1, max=200, help="Fused candidates N; default: retrieval.top_n."
    ),
    top_k: int | None = typer.Option(
        None, "--top-k", min=1, max=50, help="Passages K for answers; default: rerank.top_k."
    ),
    max_tokens: int | None = typer.Option(
        None, "--max-tokens", min=1, help="Answer budget in tokens; default: the settings'."
    ),
    instruction: str | None = typer.Option(
        None, "--instruction", help="Prompt instruction to try; default: the generation pool's."
    ),
    tiers: str = typer.Option(
        "routed,evidence",
        "--tiers",
        help="Answer configurations, comma-separated: routed (the default router), evidence, "
        "small, large (the LLM tiers: add them to measure them). The first is the one the "
        "per-question records show.",
    ),
    llm: list[str] = typer.Option(
        [],
        "--llm",
        help="MODEL=URL: also answer with the small tier on this llama.cpp server of a catalog "
        "model (repeatable), e.g. qwen2.5-coder-0.5b-instruct=http://127.0.0.1:8082.",
    ),
    root: list[str] = typer.Option(
        [], "--root", help="CORPUS=HTML_ROOT (repeatable); default: the two manuals' roots."
    ),
    off_topic: bool = typer.Option(
        True,
        "--off-topic/--no-off-topic",
        help="Also answer the off-topic probes (--off-topic-file) and report their refusal "
        "rate apart (off_topic_refusal_rate; not in the file's accuracy).",
    ),
    off_topic_file: Path | None = typer.Option(
        None,
        "--off-topic-file",
        help="Off-topic probes (JSONL); default: bench/evaluation/questions.offtopic.jsonl.",
    ),
    aggregate_only: bool = typer.Option(
        False,
        "--aggregate-only",
        help="Keep aggregate numbers only: no question, answer or rank of any one question in "
        "eval.json or eval.md, and no side_by_side.md (a blind set's first run).",
    ),
) -> None:
    """Measure retrieval (hit@1/5/10, MRR@10 per mode) and answers (accuracy, refusals).

    Runs the running system's own components in-process against the live index: the retrieval
    pool's embedder and BM25/kNN/RRF searches, the rerank backends, and the generation pool's
    prompt and LLM server. Writes eval.json, eval.md and side_by_side.md (each question beside
    its answer, for a person to read) and prints a one-line summary.
    """
    from bench.evaluation.modes import DEFAULT_MODES
    from bench.evaluation.questions import (
        OFF_TOPIC_QUESTIONS,
        SAMPLE_QUESTIONS,
        load_questions,
        parse_roots,
    )
    from bench.evaluation.report import summary_line, write_report
    from bench.evaluation.run import EvalOptions, run_evaluation
    from ragstream.logging import configure_logging
    from ragstream.settings import get_settings

    settings = get_settings()
    configure_logging(settings.logging)
    path = file or SAMPLE_QUESTIONS
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = out or settings.infra.local_dir / "eval" / stamp
    asked = tuple(m.strip() for m in modes.split(",") if m.strip()) if modes else DEFAULT_MODES
    with _exits_on_failure():
        options = EvalOptions(
            modes=asked,
            tenant=tenant,
            index_alias=index,
            generate=generate,
            limit=limit,
            top_n=top_n,
            top_k=top_k,
            max_tokens=max_tokens,
            instruction=instruction,
            roots=parse_roots(root),
            tiers=tuple(t.strip() for t in tiers.split(",") if t.strip()),
            llms=tuple(_model_url(x) for x in llm),
            off_topic=(off_topic_file or OFF_TOPIC_QUESTIONS) if off_topic else None,
        )
        report = run_evaluation(
            settings,
            load_questions(path),
            options,
            questions_file=str(path),
            progress=lambda msg: console.print(f"[dim]{msg}[/dim]"),
        )
    for mode, reason in report.skipped_modes.items():
        console.print(f"[yellow]skipped[/yellow] {mode}: {reason}")
    if aggregate_only:
        report = report.aggregate_only()
    write_report(report, out_dir, side_by_side=not aggregate_only)
    typer.echo(summary_line(report, out_dir))


@contextmanager
def _exits_on_failure() -> Iterator[None]:
    """Turn an expected failure into one line on stderr: exit 2 for bad input (a question
    file, an option), 1 for a failing service."""
    from bench.evaluation.questions import EvaluationError
    from ragstream.errors import RagstreamError

    try:
        yield
    except (EvaluationError, ValueError) as exc:
        console.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(2) from exc
    except RagstreamError as exc:
        console.print(f"[red]failed[/red]: {type(exc).__name__}: {exc}")
        raise typer.Exit(1) from exc


def _model_url(value: str) -> tuple[str, str]:
    """``MODEL=URL`` as a pair.

    Raises:
        ValueError: no ``=``.
    """
    model, sep, url = value.partition("=")
    if not sep or not model or not url:
        raise ValueError(f"--llm wants MODEL=URL, not {value!r}")
    return model.strip(), url.strip()


def ablate_command(  # noqa: PLR0917 - typer options
    files: list[Path] = typer.Argument(..., help="Question sets (JSONL), regression sets."),
    blind: list[Path] = typer.Option(
        [],
        "--blind",
        help="A blind set (repeatable): written by someone who has not seen the answers; the "
        "gains that keep a rule are summed over these.",
    ),
    rules: str = typer.Option(
        "all", "--rules", help="Comma-separated rules (switches and w_* weights), or all."
    ),
    out: Path | None = typer.Option(
        None, "--out", help="Output directory; default: .local/ablate/<UTC timestamp>/."
    ),
    tenant: str = typer.Option("default", "--tenant", help="Tenant whose chunks are searched."),
    index: str | None = typer.Option(
        None, "--index", help="Chunk index alias; default: settings.elasticsearch.index_alias."
    ),
) -> None:
    """Switch each evidence-selection rule off alone and count what it changes on every set.

    Answers every set with the evidence tier (retrieval once per set), then once per rule with
    that rule off. Prints a Markdown table (blind gains: right answers and answers first the
    rule wins on the blind sets; the answers it changes; every set's right answers without it)
    and writes ablation.json and ablation.md. Aggregate counts only: no question or answer is
    shown, so a blind set stays blind.
    """
    from bench.evaluation.ablation import ablate, ablation_table, all_rules, answerer
    from bench.evaluation.questions import load_questions
    from ragstream.logging import configure_logging
    from ragstream.settings import get_settings

    settings = get_settings()
    configure_logging(settings.logging)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    out_dir = out or settings.infra.local_dir / "ablate" / stamp
    paths = [*files, *blind]
    names = [p.stem.removeprefix("questions.") or p.stem for p in paths]
    if len(set(names)) != len(names):
        console.print(f"[red]error[/red]: two sets share a name: {names}")
        raise typer.Exit(2)
    asked = all_rules() if rules.strip() == "all" else [r.strip() for r in rules.split(",") if r]
    with _exits_on_failure():
        sets = {name: load_questions(p) for name, p in zip(names, paths, strict=True)}
        report = ablate(
            settings,
            sets,
            asked,
            blind=names[len(files) :],
            answer=answerer(tenant, index),
            progress=lambda msg: console.print(f"[dim]{msg}[/dim]"),
        )
    table = ablation_table(report)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "ablation.json").write_text(report.model_dump_json(indent=2) + "\n")
    (out_dir / "ablation.md").write_text(table)
    typer.echo(table + f"\nwritten to {out_dir}")
