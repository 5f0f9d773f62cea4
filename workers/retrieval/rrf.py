"""Reciprocal rank fusion (Cormack, Clarke & Büttcher, SIGIR 2009).

``RRF(d) = Σ_r 1 / (k + rank_r(d))`` over the rankings ``r`` that contain ``d``, ranks 1-based.
The paper's ``k = 60`` damps the weight of the very top ranks so that one list cannot dominate.
"""

from __future__ import annotations

from collections.abc import Sequence

#: The constant of Cormack et al. 2009.
DEFAULT_K = 60


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[str]],
    k: int = DEFAULT_K,
    weights: Sequence[float] | None = None,
) -> list[tuple[str, float]]:
    """Fuse ranked lists of ids into one, best first.

    Args:
        rankings: ranked id lists, best first. An id repeated within one list counts at its
            first (best) rank only.
        k: the RRF constant (>= 0); 60 in Cormack et al. 2009.
        weights: one weight per list (weighted RRF: ``Σ_r w_r / (k + rank_r(d))``, as in
            Elasticsearch's weighted ``rrf`` retriever); ``None``: all 1 (plain RRF).

    Returns:
        ``(id, score)`` pairs sorted by descending score; equal scores keep the order in which
        ids first appear (list by list, rank by rank), so the result is deterministic.

    Raises:
        ValueError: ``k`` is negative, or ``weights`` has another length than ``rankings`` or a
            negative weight.
    """
    if k < 0:
        raise ValueError(f"rrf k must be >= 0, got {k}")
    if weights is None:
        weights = [1.0] * len(rankings)
    if len(weights) != len(rankings) or any(w < 0 for w in weights):
        raise ValueError(f"need one weight >= 0 per ranking, got {list(weights)}")
    scores: dict[str, float] = {}  # insertion order = first appearance
    for ranking, weight in zip(rankings, weights, strict=True):
        seen: set[str] = set()
        for rank, item in enumerate(ranking, start=1):
            if item in seen:
                continue
            seen.add(item)
            scores[item] = scores.get(item, 0.0) + weight / (k + rank)
    order = {item: i for i, item in enumerate(scores)}
    return sorted(scores.items(), key=lambda kv: (-kv[1], order[kv[0]]))
