"""Retrieval and answer metrics of the evaluation (pure functions).

Retrieval is judged at the chunk level: a question's ``rank`` is the 1-based position, among
the ranked chunks of a mode, of the first chunk from one of its ``expected_pages`` (in its own
corpus); several chunks of one page are not collapsed, so a page that fills ranks 1-3 pushes
other pages down exactly as it does in the prompt. From the ranks:

- hit@k: the share of answerable questions with ``rank <= k``;
- MRR@10: mean reciprocal rank, ``1/rank`` when ``rank <= 10`` else 0 (Voorhees 1999, TREC-8
  question answering track).

Questions without expected pages (kind ``absent``) have no rank and are left out of these.

Answers: *correct* means one of the question's ``answer_patterns`` matches anywhere in the
answer (``re.search``, case-insensitive). *Refusal* means the answer says the passages hold no
answer: the generation prompt (``workers/generation/prompt.py``) tells the model to say
``NOT_IN_DOCUMENTS`` ("The documents do not contain the answer."), and the pool answers that
when no passage was retrieved; :data:`REFUSAL_PATTERNS` also accept the usual paraphrases.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from bench.evaluation.questions import PageRef
from topics.answers import NOT_IN_DOCUMENTS

#: Cut-offs reported for hit@k.
HIT_KS = (1, 3, 5, 10, 20, 30)
#: Cut-off of the mean reciprocal rank.
MRR_K = 10

#: An answer matching any of these (case-insensitive) declines to answer. The first is the
#: prompt's own phrase; the others are its usual paraphrases: "the passages do not mention X",
#: "X is not described in the context", "I cannot answer", "I don't know", "no information".
REFUSAL_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(re.escape(NOT_IN_DOCUMENTS.rstrip(".")), re.IGNORECASE),
    re.compile(
        r"\b(documents?|passages?|context|docs|documentation|manual)\b[^.]{0,40}"
        r"\b(do(es)? not|do(es)?n't)\b[^.]{0,20}\b(contain|include|mention|say|cover|answer)",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(not|no)\b[^.]{0,60}\b(in|from) the (documents?|passages?|context|docs"
        r"|documentation|manual)\b",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(cannot|can't|unable to) (answer|find|determine)\b|\b(don't|do not) know\b"
        r"|\bno (relevant )?information\b",
        re.IGNORECASE,
    ),
)

T = TypeVar("T")


def first_relevant_rank(
    pages: Sequence[PageRef | None], corpus: str, expected: Collection[str]
) -> int | None:
    """1-based rank of the first chunk whose page is one of ``expected`` in ``corpus``.

    Args:
        pages: the page of each ranked chunk, best first (``None``: no manual page).
        corpus: the question's corpus; a page of the same name in another corpus is no hit.
        expected: pages relative to the corpus's html root.

    Returns:
        The rank, or ``None`` when no chunk of the list is from an expected page.
    """
    wanted = set(expected)
    for rank, page in enumerate(pages, start=1):
        if page is not None and page.corpus == corpus and page.page in wanted:
            return rank
    return None


def hit_at(rank: int | None, k: int) -> bool:
    """Whether a relevant chunk is within the top ``k`` (``rank`` from
    :func:`first_relevant_rank`)."""
    return rank is not None and rank <= k


def reciprocal_rank(rank: int | None, k: int = MRR_K) -> float:
    """``1 / rank`` if ``rank <= k``, else 0.0."""
    return 1.0 / rank if rank is not None and rank <= k else 0.0


def matches_any(answer: str, patterns: Iterable[str]) -> bool:
    """Whether any regex of ``patterns`` is found in ``answer`` (``re.search``, IGNORECASE)."""
    return any(re.search(p, answer, re.IGNORECASE) for p in patterns)


#: Answers longer than this many words count as wrong (the shared question set's rule: a long
#: answer cannot win by containing every candidate).
MAX_ANSWER_WORDS = 120


def is_correct(answer: str, patterns: Iterable[str]) -> bool:
    """:func:`matches_any`, and the answer has at most :data:`MAX_ANSWER_WORDS` words."""
    return len(answer.split()) <= MAX_ANSWER_WORDS and matches_any(answer, patterns)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0-100) of ``values``, nearest rank; ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, min(len(ordered), round(q / 100 * len(ordered) + 0.5)))
    return round(ordered[rank - 1], 1)


def is_refusal(answer: str) -> bool:
    """Whether ``answer`` declines to answer (any of :data:`REFUSAL_PATTERNS`)."""
    return any(p.search(answer) for p in REFUSAL_PATTERNS)


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


class RetrievalMetrics(BaseModel):
    """Retrieval quality over ``n`` answerable questions; rates in ``[0, 1]``, ``None`` if n=0.

    Attributes:
        hit_at: ``{k: hit@k}`` for :data:`HIT_KS` (keys are strings in JSON).
    """

    model_config = ConfigDict(frozen=True)

    n: int
    hit_at_1: float | None
    hit_at_5: float | None
    hit_at_10: float | None
    mrr_at_10: float | None
    hit_at: dict[int, float | None]


def retrieval_metrics(ranks: Sequence[int | None]) -> RetrievalMetrics:
    """hit@k and MRR@10 of the ranks of answerable questions (one rank per question)."""
    hits = {k: _mean([float(hit_at(r, k)) for r in ranks]) for k in HIT_KS}
    return RetrievalMetrics(
        n=len(ranks),
        hit_at_1=hits[1],
        hit_at_5=hits[5],
        hit_at_10=hits[10],
        mrr_at_10=_mean([reciprocal_rank(r) for r in ranks]),
        hit_at=hits,
    )


class AnswerMetrics(BaseModel):
    """Answer quality; rates in ``[0, 1]``, ``None`` when their group is empty.

    Attributes:
        n: questions answered.
        correct: answers matching one of their question's patterns.
        answer_accuracy: ``correct / n`` (all kinds; an ``absent`` question's patterns
            describe a refusal).
        answerable_accuracy: the accuracy over questions with expected pages.
        absent_n: questions of kind ``absent``.
        absent_refusal_rate: share of ``absent`` questions whose answer is a refusal.
        false_refusal_rate: share of answerable questions whose answer is a refusal.
    """

    model_config = ConfigDict(frozen=True)

    n: int
    correct: int
    answer_accuracy: float | None
    answerable_accuracy: float | None
    absent_n: int
    absent_refusal_rate: float | None
    false_refusal_rate: float | None


def answer_metrics(judged: Sequence[tuple[bool, bool, bool]]) -> AnswerMetrics:
    """Aggregate ``(answerable, correct, refused)`` per question."""
    answerable = [j for j in judged if j[0]]
    absent = [j for j in judged if not j[0]]
    return AnswerMetrics(
        n=len(judged),
        correct=sum(1 for j in judged if j[1]),
        answer_accuracy=_mean([float(j[1]) for j in judged]),
        answerable_accuracy=_mean([float(j[1]) for j in answerable]),
        absent_n=len(absent),
        absent_refusal_rate=_mean([float(j[2]) for j in absent]),
        false_refusal_rate=_mean([float(j[2]) for j in answerable]),
    )


def group_by(items: Iterable[T], key: Callable[[T], str]) -> dict[str, list[T]]:
    """Items by ``key(item)``, groups sorted by key, items in input order within a group."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return dict(sorted(groups.items()))
