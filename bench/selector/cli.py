"""``ragstream selector``: the learned answer-sentence selector's data, training and
leave-one-set-out cross-validation (docs/selector.md).

``data`` and ``cv`` need the running services and an index of the two manuals (``make demo``);
``train`` reads the data file only. All run in the default install (numpy). Imports stay inside
the commands.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console

if TYPE_CHECKING:
    from bench.evaluation.questions import EvalQuestion
    from bench.selector.data import QuestionUnits, SetRunner
    from ragstream.settings import Settings

selector_app = typer.Typer(
    help="The learned answer-sentence selector: features, pairwise training, cross-validation.",
    no_args_is_help=True,
)
console = Console()

#: Where ``train`` writes its weights file and ``cv`` its report.
OUT_ROOT = Path(".local") / "selector"


def _settings() -> Settings:
    from ragstream.settings import get_settings

    return get_settings()


def _collect(
    settings: Settings, tenant: str
) -> tuple[dict[str, list[EvalQuestion]], list[QuestionUnits], SetRunner]:
    from bench.selector.data import SetRunner, collect, load_sets

    sets = load_sets()
    runner = SetRunner(tenant)
    groups = collect(settings, sets, runner, say=console.print)
    return sets, groups, runner


def _print_counts(groups: list[QuestionUnits]) -> None:
    by_set: dict[str, list[QuestionUnits]] = {}
    for g in groups:
        by_set.setdefault(g.set, []).append(g)
    for key, gs in by_set.items():
        units = sum(len(g.labels) for g in gs)
        right = sum(1 for g in gs if g.positives)
        console.print(
            f"{key}: {len(gs)} answerable questions, {right} with a right unit, {units} units"
        )


@selector_app.command("data")
def data_command(
    out: Path | None = typer.Option(
        None, "--out", help="JSONL; default .local/selector/data.jsonl."
    ),
    tenant: str = typer.Option("default", "--tenant", help="Tenant whose chunks are searched."),
) -> None:
    """Every answerable question's scored units of the judged sets, with features and labels."""
    from bench.selector.data import DATA_PATH, write_data

    _, groups, _ = _collect(_settings(), tenant)
    path = out or DATA_PATH
    write_data(groups, path)
    _print_counts(groups)
    console.print(f"wrote {path}")


@selector_app.command("train")
def train_command(
    data: Path | None = typer.Option(None, "--data", help="Rows of `selector data`."),
    out: Path = typer.Option(OUT_ROOT / "weights.json", "--out", help="The weights file."),
    l2: float = typer.Option(1.0, "--l2", min=1e-6, help="L2 penalty."),
) -> None:
    """Learn unit-score weights on every set of the data; write them as an
    ``evidence.weights_file`` and print them as ``RAGSTREAM_EVIDENCE__W_*``."""
    from bench.rerank.judged import check_trainable, load_registry
    from bench.selector.data import DATA_PATH, read_data
    from bench.selector.train import hand_weights, top1_rate, train_weights, write_weights

    groups = read_data(data or DATA_PATH)
    sets = sorted({g.set for g in groups})
    check_trainable(sets, load_registry())
    weights = train_weights(groups, l2)
    hand_hit, n = top1_rate(groups, hand_weights())
    hit, _ = top1_rate(groups, weights)
    write_weights(weights, out, sets=sets, meta={"l2": l2, "questions": len(groups)})
    for name, value in weights.items():
        console.print(f"RAGSTREAM_EVIDENCE__W_{name.upper()}={value}")
    console.print(f"best unit right (on the training data): hand {hand_hit}/{n}, learned {hit}/{n}")
    console.print(f"wrote {out} (RAGSTREAM_EVIDENCE__WEIGHTS_FILE={out})")


@selector_app.command("cv")
def cv_command(
    out: Path = typer.Option(OUT_ROOT / "cv", "--out", help="Directory of the report."),
    tenant: str = typer.Option("default", "--tenant", help="Tenant whose chunks are searched."),
) -> None:
    """Leave one set out: train on the others, answer it through the evidence tier with the
    hand and the learned weights (retrieval once per set). Writes ``data.jsonl``,
    ``cv.json`` and ``cv.md`` under ``--out``."""
    from bench.selector.cv import cross_validate, cv_table
    from bench.selector.data import write_data

    settings = _settings()
    sets, groups, runner = _collect(settings, tenant)
    out.mkdir(parents=True, exist_ok=True)
    write_data(groups, out / "data.jsonl")
    _print_counts(groups)
    folds = cross_validate(settings, sets, groups, runner, say=console.print)
    (out / "cv.json").write_text(json.dumps([f.model_dump() for f in folds], indent=2) + "\n")
    table = cv_table(folds)
    (out / "cv.md").write_text(table)
    console.print(table)
