"""Fine-tune MiniLM as a cross-encoder on the mined groups, on the CPU, in a bounded time.

Pointwise training with binary cross-entropy on the one output logit (``BCEWithLogitsLoss``):
the monoBERT recipe of Nogueira & Cho 2019 ("Passage Re-ranking with BERT") and the loss of
sentence-transformers' MS MARCO cross-encoders (``BinaryCrossEntropyLoss``); AdamW (Loshchilov &
Hutter 2019) with linear warm-up over the first 10% of steps then linear decay, learning rate
``3e-5`` (the BERT fine-tuning range of Devlin et al. 2019, 2e-5 to 5e-5, upper half for a fresh
head). Needs the torch extra (``make train-venv``); torch is imported inside the functions only.

Held-out metrics (:func:`ranking_metrics`): on the fold-0 groups whose positive is in the fused
list, the rank of the first positive in the fused order against the model's order of the same
list: hit@1 (the first passage is a positive) and MRR (mean of 1/rank; Voorhees 1999).
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from bench.rerank.data import Group

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

__all__ = [
    "TrainOptions",
    "TrainResult",
    "first_positive_rank",
    "ranking_metrics",
    "train_cross_encoder",
]


@dataclass(frozen=True, slots=True)
class TrainOptions:
    """How to train: ``epochs`` over the training pairs, stopped early at ``budget_s`` seconds;
    ``batch_size`` pairs a step; ``threads`` torch threads (at most the machine's cores);
    ``freeze_layers``: the word embeddings and this many lower encoder layers are not updated
    (no gradient, no optimizer state): about a third less work a step on a 6-layer MiniLM, at a
    small cost in quality (Lee et al. 2019, "What Would Elsa Do? Freezing Layers During
    Transformer Fine-Tuning": a quarter to half of BERT's layers frozen keeps most of it)."""

    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 3e-5
    warmup: float = 0.1
    max_length: int = 256
    threads: int = 2
    budget_s: float = 1200.0
    max_pairs: int = 0
    freeze_layers: int = 2
    seed: int = 13


@dataclass(slots=True)
class TrainResult:
    """What training did: pairs seen, steps, seconds, the mean loss of the last 50 steps."""

    pairs: int
    steps: int
    seconds: float
    final_loss: float
    stopped_early: bool


def training_pairs(
    groups: Sequence[Group], *, max_pairs: int = 0, seed: int = 13
) -> list[tuple[str, str, float]]:
    """``(query, passage, label)`` of every group not in the held-out fold (fold 0), shuffled;
    at most ``max_pairs`` (0: all), keeping whole groups."""
    rng = random.Random(seed)
    train = [g for g in groups if g.fold != 0]
    rng.shuffle(train)
    pairs: list[tuple[str, str, float]] = []
    for g in train:
        if max_pairs and len(pairs) + len(g.labels) > max_pairs:
            break
        pairs += [(g.query, p, float(label)) for p, label in zip(g.passages, g.labels, strict=True)]
    rng.shuffle(pairs)
    return pairs


def train_cross_encoder(
    model: CrossEncoder,
    pairs: Sequence[tuple[str, str, float]],
    options: TrainOptions,
    say: Callable[[str], None] = print,
) -> TrainResult:
    """Fine-tune ``model`` (a one-logit ``CrossEncoder``) in place on ``pairs``.

    Raises:
        ValueError: no pairs, or no positive or no negative among them.
    """
    import torch

    labels = [y for _, _, y in pairs]
    if not pairs or min(labels) == max(labels):
        raise ValueError("training needs pairs of both labels")
    torch.manual_seed(options.seed)
    torch.set_num_threads(max(1, min(options.threads, 2)))
    net = model.model
    net.train()
    tok = model.tokenizer
    steps_per_epoch = math.ceil(len(pairs) / options.batch_size)
    total = steps_per_epoch * options.epochs
    if options.freeze_layers:
        base = net.base_model
        frozen = [base.embeddings, *base.encoder.layer[: options.freeze_layers]]
        for module in frozen:
            for p in module.parameters():
                p.requires_grad_(False)
    params = [p for p in net.parameters() if p.requires_grad]
    optim = torch.optim.AdamW(params, lr=options.learning_rate, weight_decay=0.01)
    warm = max(1, int(total * options.warmup))
    sched = torch.optim.lr_scheduler.LambdaLR(
        optim, lambda s: min((s + 1) / warm, max(0.0, (total - s) / max(1, total - warm)))
    )
    loss_fn = torch.nn.BCEWithLogitsLoss()
    t0 = time.perf_counter()
    losses: list[float] = []
    step = 0
    seen = 0
    stopped = False
    for _epoch in range(options.epochs):
        for start in range(0, len(pairs), options.batch_size):
            batch = pairs[start : start + options.batch_size]
            feats = tok(
                [q for q, _, _ in batch],
                [p for _, p, _ in batch],
                padding=True,
                truncation="longest_first",
                max_length=options.max_length,
                return_tensors="pt",
            )
            target = torch.tensor([y for _, _, y in batch], dtype=torch.float32)
            logits = net(**feats).logits[:, 0]
            loss = loss_fn(logits, target)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, 1.0)
            optim.step()
            sched.step()
            optim.zero_grad()
            losses.append(float(loss.detach()))
            step += 1
            seen += len(batch)
            elapsed = time.perf_counter() - t0
            if step % 10 == 0:
                mean = sum(losses[-10:]) / 10
                say(
                    f"step {step}/{total} pairs {seen} loss {mean:.4f} {seen / elapsed:.1f} pairs/s"
                )
            if elapsed > options.budget_s:
                stopped = True
                break
        if stopped:
            break
    net.eval()
    tail = losses[-50:]
    return TrainResult(seen, step, time.perf_counter() - t0, sum(tail) / len(tail), stopped)


def first_positive_rank(labels: Sequence[int], scores: Sequence[float] | None = None) -> int | None:
    """1-based rank of the first positive when ordered by ``scores`` (descending; ties keep the
    input order), or in the input order when ``scores`` is ``None``; ``None``: no positive."""
    order = list(range(len(labels)))
    if scores is not None:
        order.sort(key=lambda i: -scores[i])
    for rank, i in enumerate(order, start=1):
        if labels[i]:
            return rank
    return None


def ranking_metrics(
    groups: Sequence[Group],
    score: Callable[[list[tuple[str, str]]], list[float]],
    *,
    per_source: int = 0,
) -> dict[str, Any]:
    """hit@1 and MRR of the fused order and of ``score``'s order, per source and in all, on the
    held-out groups (fold 0) that have a fused list holding a positive.

    Args:
        score: one score per ``(query, passage)`` pair, input order.
        per_source: at most this many groups of each source are ranked (0: all), the first in
            the data's order (a bound on the time a slow CPU spends scoring).

    Returns:
        ``{source: {"n", "fused": {"hit@1", "mrr"}, "model": {...}}, ...}`` for each source,
        each kind of source (``structure``, ``questions``) and ``all``.
    """
    by_source: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for g in groups:
        if g.fold != 0 or not g.fused:
            continue
        labels = g.labels[: g.fused]
        fused_rank = first_positive_rank(labels)
        if fused_rank is None or (per_source and len(by_source[g.source]) >= per_source):
            continue
        scores = score([(g.query, p) for p in g.passages[: g.fused]])
        model_rank = first_positive_rank(labels, scores)
        assert model_rank is not None
        for bucket in (g.source, g.source.split(".", 1)[0], "all"):
            by_source[bucket].append((fused_rank, model_rank))
    out: dict[str, Any] = {}
    for source, ranks in sorted(by_source.items()):
        n = len(ranks)
        out[source] = {
            "n": n,
            "fused": {
                "hit@1": sum(f == 1 for f, _ in ranks) / n,
                "mrr": sum(1 / f for f, _ in ranks) / n,
            },
            "model": {
                "hit@1": sum(m == 1 for _, m in ranks) / n,
                "mrr": sum(1 / m for _, m in ranks) / n,
            },
        }
    return out
