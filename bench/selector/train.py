"""A pairwise linear ranker over the selector's features whose model is a set of unit-score weights.

The evidence selector scores a unit as ``weights · features`` (:data:`workers.evidence.select.
FEATURES`); a linear model over the same features is therefore served by the selector as it
is, through ``evidence.w_*`` or ``evidence.weights_file``. Training is pairwise logistic
regression (RankNet's loss with a linear scorer, Burges et al. 2005; the pairwise transform of
Herbrich et al. 1999): for every question, every pair of a right unit ``p`` and a wrong unit
``n`` of its quotable units (:mod:`bench.selector.data`) is one example ``x = f(p) - f(n)``,
and ``w`` minimises ``sum_pairs c_q * log(1 + exp(-w · x)) + l2 / 2 * |w|^2``, ``c_q`` one over
the question's pairs (each question weighs the same). No intercept: a score difference has
none. Solved by Newton's method (the loss is convex; a few iterations, numpy only).

Only a ranking is learned, so the weights are scaled to the hand weights' L1 norm over the
trained features (:func:`scale_to`): scores keep their range, and thresholds on them
(``keep_ratio``, ``min_confidence``) keep their meaning. The cosine is not learned (its
feature is 0 unless ``dense_top`` > 0, off by default) and keeps its hand weight.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.selector.data import QuestionUnits
from workers.evidence.select import FEATURES, Weights

__all__ = [
    "TRAINED",
    "fit_pairwise",
    "hand_weights",
    "pairs",
    "scale_to",
    "top1_rate",
    "train_weights",
    "write_weights",
]

Matrix = npt.NDArray[np.float64]
#: The features learned: all but the cosine.
TRAINED: tuple[str, ...] = tuple(f for f in FEATURES if f != "cosine")
#: L2 penalty of :func:`fit_pairwise` (the loss sums to one per question).
L2 = 1.0


def hand_weights() -> dict[str, float]:
    """The hand-set weights (the ``evidence.w_*`` defaults) by feature name."""
    w = Weights()
    return {name: float(getattr(w, name)) for name in FEATURES}


def pairs(
    groups: Sequence[QuestionUnits], features: Sequence[str] = TRAINED
) -> tuple[Matrix, Matrix]:
    """The pairwise examples of ``groups``: ``(x, c)``, ``x`` of shape ``(n_pairs,
    len(features))`` (a right unit's features minus a wrong unit's) and ``c`` ``(n_pairs,)``,
    one over its question's pairs. Units that cannot be quoted alone (no text) are left out; a
    question without a right or a wrong unit gives no pair."""
    cols = [FEATURES.index(f) for f in features]
    xs: list[Matrix] = []
    cs: list[Matrix] = []
    for g in groups:
        f = np.asarray(g.features, dtype=np.float64)[:, cols] if g.features else None
        quotable = np.array([bool(t) for t in g.texts], dtype=bool)
        y = np.asarray(g.labels, dtype=bool)
        if f is None:
            continue
        pos, neg = f[quotable & y], f[quotable & ~y]
        if not len(pos) or not len(neg):
            continue
        diff = (pos[:, None, :] - neg[None, :, :]).reshape(-1, len(cols))
        xs.append(diff)
        cs.append(np.full(len(diff), 1.0 / len(diff)))
    if not xs:
        return np.zeros((0, len(cols))), np.zeros(0)
    return np.concatenate(xs), np.concatenate(cs)


def fit_pairwise(x: Matrix, c: Matrix, l2: float = L2, iterations: int = 50) -> Matrix:
    """The ``w`` minimising ``sum_i c_i * log(1 + exp(-w · x_i)) + l2 / 2 * |w|^2`` (Newton's
    method, stopped when a step moves ``w`` by under 1e-10).

    Args:
        x: ``(n, d)`` pair differences.
        c: ``(n,)`` pair weights.
        l2: the L2 penalty (> 0: the problem is then strictly convex).

    Returns:
        ``(d,)`` float64 weights.
    """
    w = np.zeros(x.shape[1])
    for _ in range(iterations):
        margin = x @ w
        p = 0.5 * (1.0 + np.tanh(-0.5 * margin))  # sigmoid(-margin), overflow-free
        grad = -(x.T @ (c * p)) + l2 * w
        hess = (x * (c * p * (1 - p))[:, None]).T @ x + l2 * np.eye(x.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return w


def scale_to(learned: Mapping[str, float], reference: Mapping[str, float]) -> dict[str, float]:
    """``learned`` scaled to the L1 norm of ``reference`` over the same names (rounded to 4
    decimals); all zeros stay zeros."""
    norm = sum(abs(v) for v in learned.values())
    target = sum(abs(reference[k]) for k in learned)
    factor = target / norm if norm else 0.0
    return {k: round(v * factor, 4) for k, v in learned.items()}


def train_weights(groups: Sequence[QuestionUnits], l2: float = L2) -> dict[str, float]:
    """Every feature's weight (:data:`FEATURES` names) learned from ``groups``: the trained
    ones by :func:`fit_pairwise` and :func:`scale_to` the hand weights, the cosine the hand's.

    Raises:
        ValueError: ``groups`` give no pair.
    """
    x, c = pairs(groups)
    if not len(x):
        raise ValueError("no question has both a right and a wrong unit: nothing to learn")
    w = fit_pairwise(x, c, l2)
    hand = hand_weights()
    learned = scale_to(dict(zip(TRAINED, (float(v) for v in w), strict=True)), hand)
    return {name: learned.get(name, hand[name]) for name in FEATURES}


def scores(group: QuestionUnits, weights: Mapping[str, float]) -> Matrix:
    """``(n_units,)`` the scores of ``group``'s units under ``weights`` (feature names)."""
    w = np.array([weights[f] for f in FEATURES], dtype=np.float64)
    out: Matrix = np.asarray(group.features, dtype=np.float64) @ w
    return out


def top1_rate(groups: Sequence[QuestionUnits], weights: Mapping[str, float]) -> tuple[int, int]:
    """``(questions whose best quotable unit is right, questions with a right unit)`` under
    ``weights``: an offline proxy of the answer's first span (ties go to the first unit, as the
    selector's stable sort does)."""
    hit = n = 0
    for g in groups:
        if not g.positives:
            continue
        n += 1
        s = scores(g, weights)
        quotable = [i for i, t in enumerate(g.texts) if t]
        best = max(quotable, key=lambda i: (s[i], -i))
        hit += g.labels[best]
    return hit, n


def write_weights(
    weights: Mapping[str, float], path: Path, *, sets: Sequence[str], meta: Mapping[str, Any]
) -> None:
    """Write ``weights`` as an ``evidence.weights_file`` (``{"weights": {"w_<name>": ...}}``)
    with what they were trained on (``sets``, registry keys) and when."""
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "weights": {f"w_{k}": v for k, v in weights.items()},
        "sets": list(sets),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **meta,
    }
    path.write_text(json.dumps(body, indent=2) + "\n")
