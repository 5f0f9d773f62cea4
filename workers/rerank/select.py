"""Top-K selection of reranked candidates with a per-document cap (pure)."""

from __future__ import annotations

from collections.abc import Sequence

from topics.retrieved import Candidate


def select_top_k(
    candidates: Sequence[Candidate], scores: Sequence[float], k: int, max_per_doc: int
) -> list[Candidate]:
    """Keep the ``k`` best-scored candidates, at most ``max_per_doc`` per ``doc_id``.

    Args:
        candidates: fused candidates, best first (their position is the tie-breaker).
        scores: one rerank score per candidate (higher is more relevant; any scale).
        k: passages to keep (>= 0).
        max_per_doc: chunks kept per document (>= 1); a capped document's lower-scored chunks
            are skipped and the next document's best chunk takes their place.

    Returns:
        Copies of the kept candidates with ``rerank_score`` set, by descending score; equal
        scores keep the input order (stable sort).

    Raises:
        ValueError: ``scores`` and ``candidates`` differ in length, or ``max_per_doc < 1``.
    """
    if len(scores) != len(candidates):
        raise ValueError(f"{len(scores)} scores for {len(candidates)} candidates")
    if max_per_doc < 1:
        raise ValueError(f"max_per_doc must be >= 1, got {max_per_doc}")
    order = sorted(range(len(candidates)), key=lambda i: -scores[i])  # stable: ties by rank
    kept: list[Candidate] = []
    per_doc: dict[str, int] = {}
    for i in order:
        if len(kept) >= k:
            break
        doc = candidates[i].doc_id
        if per_doc.get(doc, 0) >= max_per_doc:
            continue
        per_doc[doc] = per_doc.get(doc, 0) + 1
        kept.append(candidates[i].model_copy(update={"rerank_score": float(scores[i])}))
    return kept
