"""``ragstream rerank``: training data, the cross-encoder fine-tune and its ONNX export.

``data`` needs the default install and the running services; ``export`` and ``train`` need the
torch extra, which the default install leaves out: ``make train-venv`` makes
``.local/train-venv`` with it, whose ``ragstream`` runs them. Imports stay inside the commands
(``ragstream --help`` loads no model library).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from bench.rerank.data import Group
    from ragstream.settings import Settings

rerank_app = typer.Typer(
    help="The learned reranker: training pairs, fine-tune (torch extra), int8 ONNX export.",
    no_args_is_help=True,
)
console = Console()

#: What the torch-extra commands say when torch is missing.
TRAIN_VENV_HINT = (
    "run `make train-venv` (a virtualenv of its own, .local/train-venv, with the torch extra), "
    "then `.local/train-venv/bin/ragstream rerank ...`"
)


def require_training_stack(command: str) -> None:
    """Raise unless torch and sentence-transformers are importable.

    Raises:
        ConfigurationError: either is missing; the message names ``make train-venv``.
    """
    from ragstream.errors import ConfigurationError
    from ragstream.extras import TORCH_MODULES, missing_modules

    missing = missing_modules(TORCH_MODULES)
    if missing:
        raise ConfigurationError(
            f"ragstream rerank {command} needs the torch extra ({', '.join(missing)} not "
            f"installed; the default install leaves it out): {TRAIN_VENV_HINT}"
        )


def _settings() -> Settings:
    from ragstream.settings import get_settings

    return get_settings()


def _data_path(tenant: str, data: Path | None) -> Path:
    from bench.rerank.data import DATA_ROOT

    return data or DATA_ROOT / f"{tenant}.jsonl"


def _build_data(tenant: str, path: Path, per_source: int) -> dict[str, Any]:
    from elasticsearch import Elasticsearch

    from bench.rerank.data import build_groups, write_groups

    settings = _settings()
    es = Elasticsearch(settings.elasticsearch.hosts, request_timeout=120)
    try:
        groups, stats = build_groups(settings, es, tenant, per_source=per_source, say=console.print)
    finally:
        es.close()
    write_groups(groups, path)
    path.with_suffix(".stats.json").write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
    return stats


@rerank_app.command("data")
def data_command(
    tenant: str = typer.Option("default", help="Whose indexed documents and questions."),
    per_source: int = typer.Option(600, min=1, help="Structure queries kept per source."),
    out: Path | None = typer.Option(
        None, help="Output JSONL (default .local/rerank-data/TENANT.jsonl)."
    ),
) -> None:
    """Mine training groups from the tenant's index and the judged question sets."""
    path = _data_path(tenant, out)
    stats = _build_data(tenant, path, per_source)
    _print_counts(stats)
    console.print(f"wrote {path}")


def _print_counts(stats: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table("source", "groups", "pairs", "positive retrieved", "held out, ranked")
    for source in sorted(stats["groups"]):
        table.add_row(
            source,
            str(stats["groups"][source]),
            str(stats["pairs"][source]),
            str(stats["retrieved"].get(source, 0)),
            str(stats["held_out_with_fused_list"].get(source, 0)),
        )
    for source, n in sorted(stats["dropped"].items()):
        table.add_row(source, "dropped", str(n), "0", "-")
    console.print(table)


@rerank_app.command("export")
def export_command(
    name: str = typer.Option("untrained", help="Directory name under .local/models/rerank/."),
    source: Path | None = typer.Option(
        None, "--from", help="A saved cross-encoder (default: the base MiniLM, fresh head)."
    ),
    seed: int = typer.Option(0, help="Seed of the fresh head's initialisation."),
) -> None:
    """Export a cross-encoder to int8 ONNX (the serving format; bench/rerank/export.py)."""
    require_training_stack("export")
    import torch

    from bench.rerank.export import MODEL_ROOT, Manifest, export_cross_encoder, load_cross_encoder

    torch.manual_seed(seed)
    torch.set_num_threads(2)
    model = load_cross_encoder(source)
    note = (
        f"from {source}" if source else f"untrained: base MiniLM, fresh 1-logit head (seed {seed})"
    )
    manifest = export_cross_encoder(model, MODEL_ROOT / name, Manifest(name=name, notes=note))
    console.print(f"wrote {MODEL_ROOT / name} (ONNX int8 vs torch: {manifest.onnx_check})")


def _feedback_groups(tenant: str) -> list[Group]:
    """The tenant's reader feedback (``workers.feedback.feedback_pairs``) as one-pair training
    groups (fold -1: trained on, never held out); none when the table is absent."""
    from bench.rerank.data import Group

    try:
        from workers.feedback import feedback_pairs
    except ImportError:
        console.print("feedback: workers.feedback.feedback_pairs is not there; trained without it")
        return []
    from sqlalchemy.exc import SQLAlchemyError

    from ragstream.db.engine import make_engine, make_session_factory

    settings = _settings()
    try:
        pairs = feedback_pairs(make_session_factory(make_engine(settings.database_url)), tenant)
    except SQLAlchemyError as exc:
        why = str(exc).splitlines()[0][:160]
        console.print(f"feedback: not read ({why}); trained without it (`ragstream db upgrade`?)")
        return []
    console.print(f"feedback: {len(pairs)} labelled pairs of tenant {tenant}")
    return [Group(q, "feedback", f"feedback:{q}", [p], [int(y >= 0.5)], 0, -1) for q, p, y in pairs]


@rerank_app.command("train")
def train_command(  # noqa: PLR0917 - typer options
    tenant: str = typer.Option("default", help="Whose data; its feedback is added."),
    name: str = typer.Option("", help="Model directory name (default minilm-TENANT)."),
    data: Path | None = typer.Option(
        None, help="Groups JSONL (default .local/rerank-data/TENANT.jsonl)."
    ),
    rebuild_data: bool = typer.Option(False, help="Mine the data again even if the file exists."),
    per_source: int = typer.Option(600, min=1, help="Structure queries per source when mining."),
    budget_s: float = typer.Option(1200.0, min=1, help="Training stops after this many seconds."),
    max_pairs: int = typer.Option(0, min=0, help="Training pairs at most (0: all)."),
    epochs: int = typer.Option(1, min=1),
    batch_size: int = typer.Option(16, min=1),
    max_length: int = typer.Option(256, min=16, help="Word pieces per pair."),
    threads: int = typer.Option(2, min=1, max=2, help="Torch threads (2 cores here)."),
    learning_rate: float = typer.Option(3e-5, min=0),
    freeze_layers: int = typer.Option(2, min=0, max=6, help="Lower encoder layers not trained."),
    eval_per_source: int = typer.Option(
        60, min=0, help="Held-out groups ranked per source (0: all), 30 passages each."
    ),
) -> None:
    """Fine-tune MiniLM as a cross-encoder, export it to int8 ONNX, print held-out hit@1/MRR."""
    require_training_stack("train")
    import time

    import torch

    from bench.rerank.data import FOLDS, TRAINING_SETS, read_groups
    from bench.rerank.export import (
        MODEL_ROOT,
        Manifest,
        OnnxScorer,
        export_cross_encoder,
        load_cross_encoder,
    )
    from bench.rerank.train import (
        TrainOptions,
        ranking_metrics,
        train_cross_encoder,
        training_pairs,
    )

    t0 = time.perf_counter()
    name = name or f"minilm-{tenant}"
    path = _data_path(tenant, data)
    if rebuild_data or not path.is_file():
        _print_counts(_build_data(tenant, path, per_source))
    stats = (
        json.loads(path.with_suffix(".stats.json").read_text())
        if path.with_suffix(".stats.json").is_file()
        else {}
    )
    groups = list(read_groups(path)) + _feedback_groups(tenant)
    options = TrainOptions(
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_length=max_length,
        threads=threads,
        budget_s=budget_s,
        max_pairs=max_pairs,
        freeze_layers=freeze_layers,
    )
    pairs = training_pairs(groups, max_pairs=max_pairs, seed=options.seed)
    torch.manual_seed(options.seed)
    model = load_cross_encoder(max_length=max_length)
    console.print(f"training on {len(pairs)} pairs ({sum(p[2] for p in pairs):.0f} positive)")
    result = train_cross_encoder(model, pairs, options, say=console.print)
    train_fold = [g for g in groups if g.fold != 0]
    sources: dict[str, int] = {}
    for g in train_fold:
        sources[g.source] = sources.get(g.source, 0) + len(g.labels)
    manifest = Manifest(
        name=name,
        trained=True,
        sources=sources,
        sets=[k for k in TRAINING_SETS if stats.get("sets", {}).get(k)],
        folds={
            "k": FOLDS,
            "held_out": 0,
            "by": "page: sha1(corpus:path or doc id) mod k",
            "tenant": tenant,
        },
        training_s=round(result.seconds, 1),
        notes=(
            f"BCE on logits, AdamW lr {learning_rate}, batch {batch_size}, embeddings and "
            f"{freeze_layers} lower layers frozen, max_length {max_length}, {result.steps} steps, "
            f"{result.pairs} pairs seen, final loss {result.final_loss:.4f}"
            + (", stopped at the time budget" if result.stopped_early else "")
        ),
    )
    out_dir = MODEL_ROOT / name
    export_cross_encoder(model, out_dir, manifest)
    scorer = OnnxScorer(out_dir, threads=threads)
    metrics = ranking_metrics(groups, scorer, per_source=eval_per_source)
    overall: dict[str, Any] = metrics.get("all") or {}
    beats = bool(overall) and all(
        overall["model"][k] > overall["fused"][k] for k in ("hit@1", "mrr")
    )
    manifest.metrics = {
        "beats_fused": beats,
        "held_out": metrics,
        "scored_with": "model.onnx (int8)",
        "total_s": round(time.perf_counter() - t0, 1),
    }
    (out_dir / "manifest.json").write_text(manifest.to_json())
    _print_metrics(metrics)
    console.print(f"wrote {out_dir} in {time.perf_counter() - t0:.0f} s")


def _print_metrics(metrics: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table("held-out fold", "n", "hit@1 fused", "hit@1 model", "MRR fused", "MRR model")
    for source, m in metrics.items():
        table.add_row(
            source,
            str(m["n"]),
            f"{m['fused']['hit@1']:.3f}",
            f"{m['model']['hit@1']:.3f}",
            f"{m['fused']['mrr']:.3f}",
            f"{m['model']['mrr']:.3f}",
        )
    console.print(table)
