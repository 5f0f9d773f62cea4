"""Compressed prompts and honest outcomes of the LLM tiers.

The LLM tiers see the evidence, not whole chunks: each passage that holds evidence becomes one
prompt passage whose text is its evidence spans in reading order, joined by `` ... `` (prompt
compression by extraction, in the spirit of RECOMP's extractive compressor, Xu et al. 2023).
Passages are renumbered ``[1]..[m]`` in the order of their best span, and the evidence spans are
renumbered the same way, so an answer's ``[n]``, its citations and its evidence agree.

A completion is judged before it is published: an empty (or whitespace, or stop-only) completion
falls back to the evidence answer; one cut at its token limit (``finish_reason == "length"``) is
kept up to its last whole sentence and marked truncated, or falls back when no sentence is whole;
a completion that repeats itself (the loop of a small model that reached the limit) is kept up
to its last whole sentence before the first repeat and marked truncated (:func:`clean_prefix`),
or falls back when no sentence is whole before it. What a stream shows of a completion is never
more than what the judge keeps.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from topics.responses import EvidenceSpan
from topics.retrieved import Candidate

#: Joins two spans of one passage that are not adjacent in the text.
GAP = " ... "
#: The end of a whole sentence: end punctuation (and a closing quote/bracket or citation).
_SENTENCE_END = re.compile(r"[.!?](?:[\"')\]]|\s*\[\d{1,3}\])*(?=\s|$)")
#: A line repeated this many times or more makes a completion degenerate.
REPEATED_LINES = 3


def compress(
    passages: Sequence[Candidate], spans: Sequence[EvidenceSpan]
) -> tuple[list[Candidate], list[EvidenceSpan]]:
    """The prompt passages built from ``spans`` and the spans renumbered to them.

    Args:
        passages: the question's passages; ``span.n`` is 1-based into this list.
        spans: evidence spans, best first.

    Returns:
        ``(prompt passages, renumbered spans)``: one passage per passage that holds a span, in
        the order of its best span, its text the spans in reading order; spans whose ``n`` is
        out of range are left out.
    """
    order: list[int] = []
    by_passage: dict[int, list[EvidenceSpan]] = {}
    for span in spans:
        if not 1 <= span.n <= len(passages):
            continue
        if span.n not in by_passage:
            order.append(span.n)
            by_passage[span.n] = []
        by_passage[span.n].append(span)
    renumber = {n: i + 1 for i, n in enumerate(order)}
    out: list[Candidate] = []
    for n in order:
        ordered = sorted(by_passage[n], key=lambda s: s.start)
        parts: list[str] = []
        last_end = -1
        for s in ordered:
            body = f"{s.context} / {s.text}" if s.context else s.text
            if parts and s.start > last_end + 2:
                parts.append(GAP.strip())
            parts.append(body)
            last_end = max(last_end, s.end)
        out.append(passages[n - 1].model_copy(update={"text": " ".join(parts)}))
    renumbered = [s.model_copy(update={"n": renumber[s.n]}) for s in spans if s.n in renumber]
    return out, renumbered


@dataclass(frozen=True, slots=True)
class Judged:
    """What to publish for a completion.

    Attributes:
        text: the answer text to publish ("" means: fall back to the evidence answer).
        truncated: the completion hit its token limit, or began repeating itself, and was cut
            at its last whole sentence before that.
        reason: why it fell back or was cut ("" for a clean answer): ``empty``, ``repeated``,
            ``repeated_cut``, ``length_no_sentence``, ``length_cut``.
    """

    text: str
    truncated: bool
    reason: str

    @property
    def fallback(self) -> bool:
        """The evidence answer must be published instead."""
        return not self.text


def last_whole_sentence(text: str) -> str:
    """``text`` up to the end of its last whole sentence ("" when none ends)."""
    ends = [m.end() for m in _SENTENCE_END.finditer(text)]
    return text[: ends[-1]].rstrip() if ends else ""


#: A list marker at the start of a line or sentence ("1.", "2)", "-", "*"): a loop of a small
#: model often numbers its repeats ("1. Create ... 2. Create ...").
_LIST_MARKER = re.compile(r"^(?:\d{1,3}[.)]|[-*\u2022])\s+")


#: Citation markers ("[1]", "[2, 3]") with the space before them: a small model's loop often
#: differs from line to line only in the passage it cites.
_CITATIONS = re.compile(r"\s*\[\d{1,3}(?:\s*,\s*\d{1,3})*\]")


def _piece(text: str) -> str:
    """What two lines or sentences are compared by: list marker and citation markers left
    out, whitespace collapsed, case folded."""
    bare = _CITATIONS.sub("", _LIST_MARKER.sub("", text.strip()))
    return " ".join(bare.split()).casefold()


#: A list marker left alone at the end of a cut text ("... Use venv. 2.").
_TRAILING_MARKER = re.compile(r"\s*(?:\d{1,3}[.)]|[-*\u2022])\s*$")
#: One sentence of a line (its end punctuation kept).
_SENTENCE = re.compile(r"[^.!?]+[.!?]*")


def clean_prefix(text: str) -> str:
    """``text`` up to the end of its last whole sentence before the first line or sentence
    that repeats an earlier one (list markers left out, as :func:`is_repetitive` counts
    them); its whole sentences when nothing repeats; "" when no sentence ends before the
    repeat. What a stream may show of a completion before it is judged: a later token can only
    add to it (:class:`workers.generation.generator.TokenSink`), and :func:`judge` keeps at
    least it."""
    seen: set[str] = set()
    offset = 0
    for line in text.split("\n"):
        for m in _SENTENCE.finditer(line):
            piece = _piece(m.group())
            if not piece or re.fullmatch(r"\d{1,3}[.)]|[.!?]", piece):
                continue
            if piece in seen:
                cut = last_whole_sentence(text[: offset + m.start()])
                return _TRAILING_MARKER.sub("", cut)
            seen.add(piece)
        offset += len(line) + 1
    return last_whole_sentence(text)


def is_repetitive(text: str) -> bool:
    """True when one non-blank line, or one sentence, occurs :data:`REPEATED_LINES` times or
    more, list markers ("1.", "-") and citation markers ("[2]") left out (:func:`_piece`)."""
    pieces = [ln.strip() for ln in text.splitlines() if ln.strip()]
    pieces += [p.strip() for p in re.split(r"(?<=[.!?])\s+", " ".join(pieces)) if p.strip()]
    pieces = [_piece(p) for p in pieces]
    pieces = [p for p in pieces if p]
    return any(pieces.count(p) >= REPEATED_LINES for p in set(pieces))


def judge(text: str, finish_reason: str, stop: Sequence[str] = ()) -> Judged:
    """Judge one completion (see the module docstring).

    Args:
        text: the completion, stop sequence excluded.
        finish_reason: ``stop`` or ``length`` (the OpenAI API's values).
        stop: the stop sequences; a completion made only of them is empty.
    """
    clean = text.strip()
    for s in stop:
        if s.strip() and clean == s.strip():
            clean = ""
    if not clean:
        return Judged("", False, "empty")
    if is_repetitive(clean):
        cut = clean_prefix(clean)
        return Judged(cut, True, "repeated_cut") if cut else Judged("", False, "repeated")
    if finish_reason == "length":
        cut = last_whole_sentence(clean)
        if not cut:
            return Judged("", False, "length_no_sentence")
        return Judged(cut, True, "length_cut")
    return Judged(clean, False, "")
