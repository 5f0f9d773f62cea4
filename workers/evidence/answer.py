"""The evidence tier's answer: the best evidence spans, quoted with their citations, or a refusal.

No model is called: the answer is the text of the best span, followed by further spans that score
within ``keep_ratio`` of it while the word budget lasts, each followed by its citation ``[n]``.
Weak evidence (a best score under ``min_confidence``, or an identifier of the question that no
passage contains) gives :data:`NOT_IN_DOCUMENTS` instead: a calibrated refusal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from topics.answers import NOT_IN_DOCUMENTS
from workers.evidence.select import Evidence, Span


@dataclass(frozen=True, slots=True)
class AnswerPolicy:
    """How an evidence answer is composed and when it refuses.

    Attributes:
        max_words: word budget of the answer (the evaluation counts answers over 120 words as
            wrong; a quote should be shorter than that with room for citations).
        max_spans: most spans quoted.
        keep_ratio: a further span is quoted when its score is at least this share of the best.
        min_confidence: below this best-span score the evidence is too weak to answer
            (chosen on the shared evaluation set; see the README).
        refuse_missing: refuse when an identifier of the question is in no passage.
    """

    max_words: int = 100
    max_spans: int = 4
    keep_ratio: float = 0.0
    min_confidence: float = 0.0
    refuse_missing: bool = True


@dataclass(frozen=True, slots=True)
class EvidenceAnswer:
    """The composed answer.

    Attributes:
        text: the answer text (quotes with ``[n]``), or :data:`NOT_IN_DOCUMENTS`.
        spans: the spans quoted (empty for a refusal).
        refused: the evidence was too weak.
        reason: why it refused ("" when it answered): ``no_evidence``, ``weak:<score>`` or
            ``missing:<identifier>``.
    """

    text: str
    spans: tuple[Span, ...]
    refused: bool
    reason: str = ""


def weakness(evidence: Evidence, policy: AnswerPolicy) -> str:
    """Why ``evidence`` is too weak to answer from, or "" when it is strong enough."""
    if not evidence.spans:
        return "no_evidence"
    if policy.refuse_missing and evidence.missing:
        return f"missing:{evidence.missing[0]}"
    if evidence.confidence < policy.min_confidence:
        return f"weak:{evidence.confidence:.3f}"
    return ""


class Quotable(Protocol):
    """A span as the selector or an event carries it."""

    @property
    def n(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def context(self) -> str: ...
    @property
    def score(self) -> float: ...


S = TypeVar("S", bound=Quotable)


def render_span(span: Quotable) -> str:
    """``text [n]``; a table row is preceded by its header row (``header / row``)."""
    body = f"{span.context} / {span.text}" if span.context else span.text
    return f"{body} [{span.n}]"


def _words(span: Quotable) -> int:
    """Words ``span`` adds to the answer, its context (header or term) included."""
    return len(span.text.split()) + len(span.context.split())


def quote(spans: Sequence[S], policy: AnswerPolicy) -> tuple[str, tuple[S, ...]]:
    """The quoted answer over ``spans`` (best first, at least one) and the spans it quotes."""
    best = spans[0]
    chosen = [best]
    words = _words(best)
    for span in spans[1:]:
        if len(chosen) >= policy.max_spans or span.score < best.score * policy.keep_ratio:
            break
        n_words = _words(span)
        if words + n_words > policy.max_words:
            continue
        chosen.append(span)
        words += n_words
    return " ".join(render_span(s) for s in chosen), tuple(chosen)


def compose(evidence: Evidence, policy: AnswerPolicy) -> EvidenceAnswer:
    """The evidence tier's answer for ``evidence`` under ``policy``."""
    reason = weakness(evidence, policy)
    if reason:
        return EvidenceAnswer(NOT_IN_DOCUMENTS, (), True, reason)
    text, chosen = quote(evidence.spans, policy)
    return EvidenceAnswer(text, chosen, False)
