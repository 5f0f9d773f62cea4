"""Top-K selection of reranked candidates with a per-document cap, and the scores of the top-N
fused candidates of a batch in one reranker call."""

from __future__ import annotations

from collections.abc import Callable, Sequence

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


def score_top_n(
    score: Callable[[Sequence[tuple[str, str]]], list[float]],
    batch: Sequence[tuple[str, Sequence[str]]],
    top_n: int,
) -> list[list[float]]:
    """Scores of every request's candidates, the first ``top_n`` of each by the reranker.

    Args:
        score: the reranker's :meth:`~workers.rerank.backends.Reranker.score`; called once,
            with the pairs of every request of the batch (none when there are none).
        batch: ``(question, passages in fused order)`` per request.
        top_n: candidates of each request that the reranker scores (>= 1).

    Returns:
        One list per request, one score per passage: the reranker's for the first ``top_n``,
        then, below the lowest of those, ``lowest - 1``, ``lowest - 2``, ... so the rest keep
        their fused order after every scored candidate.

    Raises:
        ValueError: ``top_n < 1``, or the reranker returned a wrong number of scores.
    """
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    pairs = [(q, p) for q, passages in batch for p in passages[:top_n]]
    scores = score(pairs) if pairs else []
    if len(scores) != len(pairs):
        raise ValueError(f"{len(scores)} scores for {len(pairs)} pairs")
    out: list[list[float]] = []
    offset = 0
    for _, passages in batch:
        n = min(top_n, len(passages))
        scored = [float(s) for s in scores[offset : offset + n]]
        offset += n
        floor = min(scored, default=0.0)
        out.append(scored + [floor - 1 - j for j in range(len(passages) - n)])
    return out
