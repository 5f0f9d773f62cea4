"""The evidence tier's answer: the best evidence span, quoted with its citation, then at most a
little support, or a refusal.

No model is called. The answer opens with the best span (it states what was asked); further
spans follow only from the same passage or document, within ``keep_ratio`` of it and the word
budget, two in all when the question asks for a value. Weak evidence (:func:`weakness`: an
identifier or a name of the question that no passage holds, passages far from the question, a
best score under ``min_confidence``) gives :data:`NOT_IN_DOCUMENTS` instead: a calibrated
refusal.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from topics.answers import NOT_IN_DOCUMENTS
from workers.evidence.select import EXAMPLE, Evidence, Span


@dataclass(frozen=True, slots=True)
class AnswerPolicy:
    """How an evidence answer is composed and when it refuses.

    Attributes:
        max_words: word budget of the answer (the evaluation counts answers over 120 words as
            wrong; a quote should be shorter than that with room for citations).
        max_spans: most spans quoted.
        keep_ratio: a further span is quoted when its score is at least this share of the best.
        min_confidence: below this best-span score the evidence is too weak to answer
            (chosen on the shared evaluation set; see docs/evaluation.md).
        refuse_missing: refuse when an identifier of the question is in no passage.
        same_document: further spans only from the best span's passage or document.
        value_spans: most spans quoted when the question asks for a value (a number, a size, a
            default): one statement and little support.
        min_relevance: below this best kNN score of the passages
            (:attr:`~workers.evidence.select.Evidence.relevance`) the same, unless ...
        statement_coverage: ... a sentence of a passage states at least this share of the
            question's content terms (:attr:`~workers.evidence.select.Evidence.stated`; 1.0:
            all of them). ``None``: the kNN score alone decides.
        refuse_unknown_names: refuse when the question names something that is not code
            (``Paris``, ``MongoDB``) and no passage names it ...
        unknown_name_relevance: ... and the passages' best kNN score is under this (a
            passage very close to the question answers it, whatever name it leaves out).
        min_rerank_score: below this best rerank score of the passages
            (:attr:`~workers.evidence.select.Evidence.rerank_score`, a learned cross-encoder's
            probability of relevance) the question is refused as off-topic; ``None``: no such
            gate (no learned reranker, or no calibrated threshold; ``rerank.min_score``).
    """

    max_words: int = 100
    max_spans: int = 4
    keep_ratio: float = 0.0
    min_confidence: float = 0.0
    refuse_missing: bool = True
    same_document: bool = True
    value_spans: int = 4
    min_relevance: float = 0.0
    statement_coverage: float | None = None
    refuse_unknown_names: bool = False
    unknown_name_relevance: float = 1.0
    min_rerank_score: float | None = None


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
    """Why ``evidence`` is too weak to answer from, or "" when it is strong enough.

    Reasons, first match wins: ``no_evidence``; ``missing:<identifier>`` (a code name of the
    question no passage holds); ``unknown:<name>`` (a name no passage holds); ``weak:<score>``
    (best span under ``min_confidence``); ``off_topic:rerank=<score>`` (the learned reranker's
    best score is under ``min_rerank_score``); ``off_topic:relevance=<score>`` (the passages are
    about something else: their best kNN score is low, and no sentence of theirs states the
    question's words, :func:`off_topic`).
    """
    if not evidence.spans:
        return "no_evidence"
    checks = (
        (policy.refuse_missing and bool(evidence.missing), "missing:{}", evidence.missing[:1]),
        (
            policy.refuse_unknown_names
            and bool(evidence.unknown_names)
            and (evidence.relevance is None or evidence.relevance < policy.unknown_name_relevance),
            "unknown:{}",
            evidence.unknown_names[:1],
        ),
        (evidence.confidence < policy.min_confidence, "weak:{:.3f}", (evidence.confidence,)),
        (
            policy.min_rerank_score is not None
            and evidence.rerank_score is not None
            and evidence.rerank_score < policy.min_rerank_score,
            "off_topic:rerank={:.3f}",
            (evidence.rerank_score,),
        ),
        (
            off_topic(evidence, policy),
            "off_topic:relevance={:.3f}",
            (evidence.relevance,),
        ),
    )
    return next((form.format(*args) for hit, form, args in checks if hit), "")


def off_topic(evidence: Evidence, policy: AnswerPolicy) -> bool:
    """Whether the passages are about something else than the question.

    Both must hold: the passages' best kNN score is under ``min_relevance``, and no unit of
    theirs states ``statement_coverage`` of the question's content terms. The kNN score of a
    passage that holds the answer among other facts is diluted by them (a tenant's sentence
    "The backup generator serial number is GX-5531." in a chunk of its manual scored 0.75-0.83
    against "What is the backup generator serial number?"), and where that score falls depends
    on the embedder and on how the tenant writes; a sentence of the tenant's own documents
    that holds every word of the question does not (docs/evaluation.md, refusals on a
    tenant's own documents).
    """
    if evidence.relevance is None or evidence.relevance >= policy.min_relevance:
        return False
    cover = policy.statement_coverage
    return cover is None or evidence.stated < cover


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


def render_spans(spans: Sequence[Quotable]) -> str:
    """The spans rendered in order (:func:`render_span`), a context already shown by an
    earlier span of the answer (the same term or header row, or a span that quoted that term
    itself, as a line of its own: an example line the segmenter took for a term) left out."""
    shown: set[str] = set()
    pieces: list[str] = []
    for span in spans:
        piece = render_span(span, with_context=span.context not in shown)
        # Code keeps its lines: it starts a line of its own, and so does what follows it.
        if pieces:
            pieces.append("\n" if "\n" in piece or "\n" in pieces[-1] else " ")
        pieces.append(piece)
        shown.add(span.context)
        shown.update(line.strip() for line in span.text.splitlines())  # a term quoted already
    return "".join(pieces)


#: Where the line introducing an example ends (its ":" and the line break before the code).
INTRO_END = re.compile(r":[ \t]*\n")


def render_span(span: Quotable, *, with_context: bool = True) -> str:
    """``text [n]`` on one line; a table row is read with its column names
    (:func:`named_cells`: ``Part: generator; Serial: GX-5531``), or preceded by its header row
    when the two do not match cell for cell (``header / row``),
    a sentence of a description by its term (``term / sentence``), and a term quoted with the
    start of its description reads ``term: description``. Code keeps its lines, also after the
    line that introduces it (an :data:`~workers.evidence.select.EXAMPLE` span: "... a simple
    policy can be used:" on one line, the statement on the next)."""
    text = span.text
    kind = getattr(span, "kind", "sentence")
    cut = INTRO_END.search(text) if kind == EXAMPLE else None
    if cut is not None and text[cut.end() :].strip():
        intro, example = text[: cut.start()], text[cut.end() :].strip("\n")
        text = f"{' '.join(intro.split())}:\n{example}"
    elif kind != "code":
        first, sep, rest = text.partition("\n")
        if sep and getattr(span, "kind", "") == "term":
            text = f"{first.strip()}: {' '.join(rest.split())}"
        else:
            text = " ".join(text.split())
    if DANGLING_COLON and kind != "code" and text.endswith(":"):
        text = f"{text[:-1].rstrip()} …"  # what the colon announces is not quoted
    named = named_cells(span.context, text) if kind == "row" and with_context else None
    if named is not None:
        body = named
    else:
        body = f"{span.context} / {text}" if span.context and with_context else text
    return f"{body} [{span.n}]"


def table_cells(line: str) -> list[str]:
    """The cells of a pipe-table line, stripped: a Markdown row (``| a | b |``) without its
    outer pipes; a parsed page's row (``a | b |``, its last cell empty) as it is."""
    inner = line.strip()
    if inner.startswith("|"):
        inner = inner[1:].removesuffix("|")
    return [c.strip() for c in inner.split("|")]


def named_cells(header: str, row: str) -> str | None:
    """A table row read with its column names: ``Part: generator; Serial: GX-5531`` (empty
    cells left out), when ``header`` and ``row`` have the same number of cells and every
    column has a name; ``None`` otherwise (the row is then quoted after its header)."""
    if not header:
        return None
    names, cells = table_cells(header), table_cells(row)
    if len(names) != len(cells) or len(names) < 2 or not all(names):
        return None
    pairs = [f"{name}: {cell}" for name, cell in zip(names, cells, strict=True) if cell]
    return "; ".join(pairs) if pairs else None


#: Whether a quote ending in a colon whose continuation is not quoted ends with "…" instead.
DANGLING_COLON = True


def _words(span: Quotable) -> int:
    """Words ``span`` adds to the answer, its context (header or term) included."""
    return len(span.text.split()) + len(span.context.split())


def supports(lead: Quotable, span: Quotable) -> bool:
    """Whether ``span`` can follow ``lead`` in an answer: it comes from the same passage or the
    same document (a sentence of another document is no support of the first one's claim), and
    when the lead is quoted under a definition term (``max_connections (integer) / The default
    is typically 100 ...``), under the same term: "The default value is three connections.",
    of another setting of that page whose term its chunk cut off, contradicted it; and when
    the lead is a table row, no other row of its table (:data:`ONE_ROW`)."""
    if SAME_TERM and lead.context and span.context != lead.context:
        return False
    if ONE_ROW and _kind(lead) == _kind(span) == "row" and span.context == lead.context:
        return False
    return span.n == lead.n or _doc(span) == _doc(lead)


#: Whether a span supports a lead quoted under a definition term only under the same term.
SAME_TERM = True
#: Whether another row of the lead row's table never follows it: each row is its own record,
#: and a row that matched only by the header every row carries ("Serial") is no support of
#: the row that answers (issue 39: a question over a parts table was answered by its row,
#: then an unrelated one).
ONE_ROW = True


def _kind(span: Quotable) -> str:
    return str(getattr(span, "kind", "sentence"))


def _doc(span: Quotable) -> str:
    return str(getattr(span, "doc_id", "") or f"passage:{span.n}")


def quote(
    spans: Sequence[S], policy: AnswerPolicy, *, max_spans: int | None = None
) -> tuple[str, tuple[S, ...]]:
    """The quoted answer over ``spans`` (best first, at least one) and the spans it quotes.

    The best span comes first: it states the answer. Further spans follow, best first, only
    while they support it (:func:`supports`, with ``policy.same_document``), score at least
    ``keep_ratio`` of it, and fit ``max_spans`` and ``max_words``.
    """
    limit = policy.max_spans if max_spans is None else max_spans
    best = spans[0]
    chosen = [best]
    words = _words(best)
    for span in spans[1:]:
        if len(chosen) >= limit:
            break
        if span.score < best.score * policy.keep_ratio:
            continue
        if policy.same_document and not supports(best, span):
            continue
        n_words = _words(span)
        if words + n_words > policy.max_words:
            continue
        chosen.append(span)
        words += n_words
    return render_spans(chosen), tuple(chosen)


def compose(evidence: Evidence, policy: AnswerPolicy) -> EvidenceAnswer:
    """The evidence tier's answer for ``evidence`` under ``policy``."""
    reason = weakness(evidence, policy)
    if reason:
        return EvidenceAnswer(NOT_IN_DOCUMENTS, (), True, reason)
    limit = min(policy.max_spans, policy.value_spans) if evidence.asks_value else None
    text, chosen = quote(evidence.spans, policy, max_spans=limit)
    if evidence.leads_with_value:
        ordered = value_first(chosen)
        if ordered != chosen:
            text, chosen = render_spans(ordered), ordered
    return EvidenceAnswer(text, chosen, False)


def value_first(spans: tuple[S, ...]) -> tuple[S, ...]:
    """``spans`` (an answer's, best first) with the first one of the lead's document that fits
    the asked kind of value better than the lead moved to the front.

    The lead span says what the answer is about; a definition's best span is often its
    description ("checkpoint_timeout (integer) / Maximum time between automatic WAL
    checkpoints.") and the value the question asks for comes in the next sentence of the same
    definition ("The default is five minutes (5min)."). The reader should meet the value first;
    the same spans are quoted, only their order changes. The fit is the selector's answer-type
    match (:attr:`workers.evidence.select.Span.fit`; 0 for spans that do not carry one). The
    lead's document, not only its passage: the spans that follow a lead are its document's
    (:func:`supports`), and the statement is often in the next chunk ("Cluster-wide data can be
    dumped alone using the pg_dumpall --globals-only option." after the chunk introducing
    pg_dumpall: shared answer first +1, the other sets unchanged).
    """
    if len(spans) < 2:
        return spans
    lead = spans[0]
    fit = getattr(lead, "fit", 0.0)
    for i, span in enumerate(spans[1:], start=1):
        if _doc(span) == _doc(lead) and getattr(span, "fit", 0.0) > fit:
            return (span, *spans[:i], *spans[i + 1 :])
    return spans
