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
when no passage was retrieved; :data:`replay.measures.REFUSAL_PATTERNS` (:func:`replay.measures.
is_refusal`, shared with the shadow replay's report) also accept the usual paraphrases.

What a reader sees:

- *answer first*: a pattern of an answerable question matches the answer's **first sentence**
  (:func:`first_sentence`); for a question whose right answer is a refusal (``absent``,
  ``off_topic``) a refusal counts. ``answer_first_rate`` is taken over answerable questions.
- *words*: the answer's words (whitespace-separated, citation marks ``[n]`` not counted), p50
  and p90 over the answers of a group (refusals included: they are what the reader got).
- refusal rates: of ``absent`` questions, of ``off_topic`` questions, and the false refusal
  rate of answerable questions; answer latency p50/p95.

CRAG-style outcomes (Yang et al. 2024, "CRAG - Comprehensive RAG Benchmark", arXiv:2406.04744:
an answer is *accurate*, *hallucinated* or *missing*, scored 1, -1 and 0), :func:`crag_outcome`:

- *accurate*: a correct answer, or a refusal of a question whose right answer is one
  (``absent``, ``off_topic``);
- *hallucinated*: a wrong answer that is not a refusal (an answer to an absent or off-topic
  question included);
- *missing*: a refusal of an answerable question, or an error response (CRAG counts a system
  error as missing).

``crag_score`` = accurate rate - hallucination rate, in ``[-1, 1]``.

Answer containment (the reader's ceiling: no selector can quote what it was not given): a
question's ``answer_rank`` is the 1-based position of the first passage, among those the rerank
pool sends on, whose text one of its ``answer_patterns`` matches (:func:`answer_passage_rank`);
*answer in top k* is ``answer_rank <= k`` for k in :data:`CONTAINMENT_KS`, over answerable
questions.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import NamedTuple, TypeVar

from pydantic import BaseModel, ConfigDict

from bench.evaluation.questions import PageRef

#: Cut-offs reported for hit@k.
HIT_KS = (1, 3, 5, 10, 20, 30)
#: Cut-off of the mean reciprocal rank.
MRR_K = 10
#: Cut-offs reported for answer-in-top-k containment.
CONTAINMENT_KS = (1, 3, 5)

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


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


#: Words that end with a period but do not end a sentence ("e.g. The" goes on).
#: Units ("200 ms. The") and "no." do end sentences, so they are not listed.
ABBREVIATIONS = frozenset({"e.g", "i.e", "cf", "vs", "al", "approx", "incl", "resp", "viz", "fig"})
#: A citation mark or a run of them: ``[1]``, ``[1][2]``, ``[1, 3]``.
_CITES = r"(?:\s*\[\d+(?:\s*,\s*\d+)*\])+"
#: Characters that may start a sentence after a terminator (an upper-case letter is checked
#: apart, so that any script's capitals count).
_STARTERS = frozenset("0123456789\"'\u201c\u2018`(")
_TERMINATOR = re.compile(
    r"(?P<punct>[.?!])(?P<close>[)\"'\u201d\u2019]*)(?P<cites>" + _CITES + r")?(?=\s|$)"
)
_BARE_CITES = re.compile(r"(?<![.?!\s])" + _CITES + r"(?=\s)")
_FENCE = re.compile(r"^\s*(```|~~~)[\w+-]*\s*$")
_CITE_MARK = re.compile(r"\[\d+(?:\s*,\s*\d+)*\]")


def _starts_sentence(text: str, at: int) -> bool:
    """Whether the text after the whitespace at ``at`` starts a sentence."""
    rest = text[at:].lstrip(" \t")
    return bool(rest) and (rest[0].isupper() or rest[0] in _STARTERS)


def _word_before(text: str, end: int) -> str:
    start = end
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] in "._"):
        start -= 1
    return text[start:end]


def _is_list_marker(text: str, end: int) -> bool:
    """``1.`` or ``a.`` alone at the start of a line (a numbered list item, not an end)."""
    line_start = text.rfind("\n", 0, end) + 1
    head = text[line_start:end].strip()
    return head.isdigit() or (len(head) == 1 and head.isalpha())


def first_sentence(answer: str) -> str:
    """The first sentence of ``answer``, as a reader takes it in.

    The sentence ends at the first of:

    - a newline (a line of its own: a list item, a code line, a table row); leading blank
      lines and code-fence markers are skipped, and a first line that ends with ``:`` takes
      the next line with it ("To create one, run:" and ``createdb mydb`` below it);
    - ``.``, ``?`` or ``!`` (closing quotes or brackets may follow) followed by whitespace and
      an upper-case letter, a digit, a quote, a backtick or ``(``; when citation marks follow
      the terminator (``... 5432. [1] Then``) they belong to the sentence, and it ends there
      whatever comes next (an evidence answer's quoted spans). Not after an abbreviation
      (``e.g.``, ``i.e.``, ``cf.``) nor after a list number at the start of a line (``1.``);
      never inside an identifier or a number (``os.getcwd()``, ``1.5``: no whitespace follows
      the period);
    - a citation mark ``[n]`` (or ``[1][2]``, ``[1, 2]``) followed by whitespace and an
      upper-case letter (``... is 5432 [1] The server ...``).

    Args:
        answer: an answer text.

    Returns:
        The first sentence, stripped (the whole answer when no boundary is found; "" for an
        empty answer).
    """
    lines = _content_lines(answer)
    text = lines[0] if lines else ""
    sentence = _cut(text)
    if sentence == text and text.endswith(":") and len(lines) > 1:
        sentence = f"{sentence} {lines[1]}"  # "Run:" and the command on the next line
    return sentence


def _content_lines(answer: str) -> list[str]:
    """The answer's lines, stripped, without blank lines and code-fence markers."""
    return [x.strip() for x in answer.split("\n") if x.strip() and not _FENCE.match(x)]


def _cut(text: str) -> str:
    """``text`` (one line) up to the end of its first sentence (see :func:`first_sentence`)."""
    ends: list[int] = []
    for m in _TERMINATOR.finditer(text):
        punct_at = m.start("punct")
        if m["punct"] == "." and (
            _word_before(text, punct_at).lower().rstrip(".") in ABBREVIATIONS
            or _is_list_marker(text, punct_at)
        ):
            continue
        if m["cites"] or m.end() == len(text) or _starts_sentence(text, m.end()):
            ends.append(m.end())
            break
    for m in _BARE_CITES.finditer(text):
        rest = text[m.end() :].lstrip()
        if rest and rest[0].isupper():
            ends.append(m.end())
            break
    return text[: min(ends)].strip() if ends else text


def answer_words(answer: str) -> int:
    """Words of ``answer`` a reader reads: whitespace-separated tokens once the citation marks
    (``[1]``, ``[2][3]``, ``[1, 2]``) are taken out; a token of punctuation alone (the ``.``
    left of ``[1].``) is no word."""
    tokens = _CITE_MARK.sub(" ", answer).split()
    return sum(1 for w in tokens if any(c.isalnum() for c in w))


def is_answer_first(
    answer: str, patterns: Iterable[str], *, refusal_expected: bool, refused: bool
) -> bool:
    """Whether the answer states what was asked in its first sentence: a pattern matches
    :func:`first_sentence` (answerable questions), or the answer is a refusal (questions whose
    right answer is one: ``refusal_expected``)."""
    if refusal_expected:
        return refused
    return not refused and matches_any(first_sentence(answer), patterns)


class Judged(NamedTuple):
    """One question's answer as judged.

    Attributes:
        answerable: the question has expected pages.
        correct: :func:`is_correct` (a refusal for ``absent``/``off_topic``).
        refused: the answer declines to answer.
        kind: the question's kind ("" when unknown: then an unanswerable question is
            ``absent``).
        first: :func:`is_answer_first`.
        words: :func:`answer_words` (``None`` for an error response).
        latency_ms: the answer's latency (``None`` when unknown).
        error: the response was an error (neither correct nor a refusal).
    """

    answerable: bool
    correct: bool
    refused: bool
    kind: str = ""
    first: bool = False
    words: int | None = None
    latency_ms: float | None = None
    error: bool = False


#: The CRAG outcomes of an answer (:func:`crag_outcome`).
ACCURATE, HALLUCINATED, MISSING = "accurate", "hallucinated", "missing"


def crag_outcome(j: Judged) -> str:
    """The CRAG outcome of one judged answer (Yang et al. 2024; see the module docstring).

    Returns:
        :data:`ACCURATE` (correct, or a refusal of an unanswerable question),
        :data:`MISSING` (a refusal of an answerable question, or an error response) or
        :data:`HALLUCINATED` (any other answer).
    """
    if j.correct or (j.refused and not j.answerable):
        return ACCURATE
    if j.refused or j.error:
        return MISSING
    return HALLUCINATED


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
        off_topic_n: questions of kind ``off_topic``.
        off_topic_refusal_rate: share of ``off_topic`` questions whose answer is a refusal.
        answer_first: answers that state what was asked in their first sentence (refusals of
            ``absent``/``off_topic`` questions included).
        answer_first_rate: the share of answerable questions answered first.
        words_p50, words_p90: answer words (:func:`answer_words`) over the group's answers.
        latency_p50_ms, latency_p95_ms: answer latency over the group, ms.
        accurate, hallucinated, missing: the CRAG outcomes (:func:`crag_outcome`), summing to
            ``n``; ``accurate`` is ``correct`` plus the refusals of unanswerable questions
            whose patterns do not match the refusal's words.
        hallucination_rate, missing_rate: ``hallucinated / n``, ``missing / n``.
        crag_score: ``(accurate - hallucinated) / n``, in ``[-1, 1]``.
    """

    model_config = ConfigDict(frozen=True)

    n: int
    correct: int
    answer_accuracy: float | None
    answerable_accuracy: float | None
    absent_n: int
    absent_refusal_rate: float | None
    false_refusal_rate: float | None
    off_topic_n: int = 0
    off_topic_refusal_rate: float | None = None
    answer_first: int = 0
    answer_first_rate: float | None = None
    words_p50: float | None = None
    words_p90: float | None = None
    latency_p50_ms: float | None = None
    latency_p95_ms: float | None = None
    accurate: int = 0
    hallucinated: int = 0
    missing: int = 0
    hallucination_rate: float | None = None
    missing_rate: float | None = None
    crag_score: float | None = None


def answer_metrics(judged: Sequence[Judged | tuple[bool, bool, bool]]) -> AnswerMetrics:
    """Aggregate the :class:`Judged` answers (or bare ``(answerable, correct, refused)``
    triples) of a group of questions."""
    js = [j if isinstance(j, Judged) else Judged(*j) for j in judged]
    answerable = [j for j in js if j.answerable]
    off_topic = [j for j in js if j.kind == "off_topic"]
    absent = [j for j in js if not j.answerable and j.kind != "off_topic"]
    words = [float(j.words) for j in js if j.words is not None]
    latency = [j.latency_ms for j in js if j.latency_ms is not None]
    outcomes = [crag_outcome(j) for j in js]
    scores = {ACCURATE: 1.0, HALLUCINATED: -1.0, MISSING: 0.0}
    return AnswerMetrics(
        n=len(js),
        correct=sum(1 for j in js if j.correct),
        answer_accuracy=_mean([float(j.correct) for j in js]),
        answerable_accuracy=_mean([float(j.correct) for j in answerable]),
        absent_n=len(absent),
        absent_refusal_rate=_mean([float(j.refused) for j in absent]),
        false_refusal_rate=_mean([float(j.refused) for j in answerable]),
        off_topic_n=len(off_topic),
        off_topic_refusal_rate=_mean([float(j.refused) for j in off_topic]),
        answer_first=sum(1 for j in js if j.first),
        answer_first_rate=_mean([float(j.first) for j in answerable]),
        words_p50=percentile(words, 50),
        words_p90=percentile(words, 90),
        latency_p50_ms=percentile(latency, 50),
        latency_p95_ms=percentile(latency, 95),
        accurate=outcomes.count(ACCURATE),
        hallucinated=outcomes.count(HALLUCINATED),
        missing=outcomes.count(MISSING),
        hallucination_rate=_mean([float(o == HALLUCINATED) for o in outcomes]),
        missing_rate=_mean([float(o == MISSING) for o in outcomes]),
        crag_score=_mean([scores[o] for o in outcomes]),
    )


def answer_passage_rank(passages: Sequence[str], patterns: Iterable[str]) -> int | None:
    """1-based rank of the first passage whose text one of ``patterns`` matches.

    Args:
        passages: the text of each passage sent on, best first (title line and text, as the
            rerank pool scores it).
        patterns: the question's answer regexes (``re.search``, case-insensitive; each passage
            is matched on its own, never across two).

    Returns:
        The rank, or ``None`` when no passage holds an answer.
    """
    wanted = list(patterns)
    for rank, text in enumerate(passages, start=1):
        if matches_any(text, wanted):
            return rank
    return None


class ContainmentMetrics(BaseModel):
    """Answer-in-top-k over ``n`` answerable questions: the share whose ``answer_rank``
    (:func:`answer_passage_rank`) is at most k; ``None`` when n=0.

    Attributes:
        at: ``{k: share}`` for :data:`CONTAINMENT_KS` (keys are strings in JSON).
    """

    model_config = ConfigDict(frozen=True)

    n: int
    at_1: float | None
    at_3: float | None
    at_5: float | None
    at: dict[int, float | None]


def containment_metrics(ranks: Sequence[int | None]) -> ContainmentMetrics:
    """Answer-in-top-k of the answer ranks of answerable questions (one per question)."""
    at = {k: _mean([float(hit_at(r, k)) for r in ranks]) for k in CONTAINMENT_KS}
    return ContainmentMetrics(n=len(ranks), at_1=at[1], at_3=at[3], at_5=at[5], at=at)


def group_by(items: Iterable[T], key: Callable[[T], str]) -> dict[str, list[T]]:
    """Items by ``key(item)``, groups sorted by key, items in input order within a group."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return dict(sorted(groups.items()))
