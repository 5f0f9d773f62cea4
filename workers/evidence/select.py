"""Evidence selection: the sentences of the top passages that answer the question.

For a batch of questions, each with its passages in rank order:

1. every passage is read with the part of the chunk before it that it continues
   (:func:`read_whole`) and split into units (:func:`workers.evidence.segment.segment`:
   sentences, code blocks, table rows with their header, list items, definition terms; "See
   also" boxes left out); a passage that continues another retrieved one takes its definition
   term (:func:`carry_heads`);
2. every unit gets a score, the dot product of its features (:data:`FEATURES`,
   :meth:`EvidenceSelector.features`) and the weights (:class:`Weights`, defaults
   ``evidence.w_*``, or a learned set: ``ragstream selector train``, docs/selector.md): the
   IDF-weighted coverage of the question's terms (stems and
   identifiers, :mod:`workers.evidence.lexical`; IDF over the question's own units; a
   follow-up's context terms at :data:`CONTEXT_WEIGHT`, answer-type cue words at
   :data:`CUE_WEIGHT`) in the unit, in the unit plus its passage's title, in its whole block
   plus the title, and in its label (its term or row's first cell); its fit to the asked answer
   type (:func:`workers.evidence.lexical.type_match`, more for a question for a value alone;
   a line introducing an example fits as the two together), plus a share of that for a term
   declaring the asked kind of thing; its passage's rank bonus (:func:`rank_bonuses`); a bonus
   for a statement of a default when one is asked (:func:`states_default`); minus a penalty for
   a sentence pointing elsewhere or reporting the SQL standard, and for release notes when the
   question does not ask about versions;
3. with ``dense_top`` > 0 (0 by default), that many best units of every question are embedded,
   with the questions, in ONE call of the embedder for the whole batch, and their cosine
   similarity to their question is added;
4. units are ranked by score; a unit too short to stand alone (a signature, a term, a line
   ending in ":") takes the next unit of its block as context, a line introducing an example
   takes the example; spans are kept best first up to ``max_spans`` and ``max_words``, leaving
   out a unit the user has just been shown (a follow-up's last answer, :func:`repeats`): the
   follow-up asks for something else, and a unit that says again what a span kept before it
   says (the same sentence in a definition entry and in its page's chunk). A sentence of a
   definition is quoted under its term.

The confidence of a question's evidence is its best unit's score. Identifiers the question names
that no passage contains (``pg_stat_io``, ``typing.override``) and DDL statements it names in
capitals that no passage writes are reported as ``missing``: the passages are then about
something else, the signature of a question the documents do not answer.

Every rule of this module and its neighbours has a switch (an upper-case ``bool``) or a weight,
and is kept for its gain on blind question sets: docs/evaluation.md, "The selector's rules"
(``ragstream ablate`` measures it).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from ragstream.settings import EvidenceSettings
from workers.conversation import split_context
from workers.evidence.lexical import (
    about_standard,
    answer_type,
    asks_about_versions,
    coverage,
    declares,
    holds_word,
    identifiers,
    idf,
    is_pointer,
    is_release_notes,
    near_word,
    proper_names,
    question_tokens,
    stated_share,
    statement_names,
    strong_identifiers,
    terms,
    top_weight,
    type_match,
    uncommon_words,
)
from workers.evidence.segment import CONTINUATION_CHARS, EXAMPLE_TERM, Unit, segment

Vectors = npt.NDArray[np.float32]

#: Share of its IDF that a term only the conversation's context holds counts for (see
#: :mod:`workers.conversation`): it says what the question is about, not what it asks.
CONTEXT_WEIGHT = 0.5
#: Stems of the words that say what kind of answer a question wants ("the number of columns",
#: "the maximum size", "by default") rather than what it is about: the answer-type score
#: (:func:`workers.evidence.lexical.type_match`) judges them; in the coverage of the
#: question's terms they count at CUE_WEIGHT of their IDF.
CUE_TERMS = frozenset(
    {"number", "amount", "size", "count", "valu", "maximum", "minimum", "max", "min", "limit"}
    | {"long", "mani", "much", "kind", "type"}
)
CUE_WEIGHT = 0.3
#: Units with fewer words than this take the next unit of their block as context.
SHORT_UNIT_WORDS = 6
#: A quoted sentence of a definition carries its term as context ("checkpoint_timeout (integer) /
#: The default is five minutes (5min)."): the value alone does not say what it is the value of.
QUOTE_HEAD = True


class Embeds(Protocol):
    """Embeds texts as ``(n, dim)`` float32 rows, L2-normalised."""

    def embed(self, texts: Sequence[str]) -> Vectors: ...


class PrecedingLike(Protocol):
    """What the selector reads of a passage's ``preceding`` part
    (a :class:`topics.retrieved.Preceding`)."""

    @property
    def chunk_id(self) -> str: ...
    @property
    def start(self) -> int: ...
    @property
    def text(self) -> str: ...
    @property
    def overlap(self) -> int: ...


class PassageLike(Protocol):
    """What the selector reads of a passage (a :class:`topics.retrieved.Candidate`)."""

    @property
    def chunk_id(self) -> str: ...
    @property
    def doc_id(self) -> str: ...
    @property
    def text(self) -> str: ...
    @property
    def title(self) -> str: ...


#: The one source of the weights' defaults: the settings' (``evidence.w_*``).
_DEFAULTS = EvidenceSettings()


@dataclass(frozen=True, slots=True)
class Weights:
    """Weights of the unit score (chosen with ``ragstream eval``; see docs/evaluation.md). The
    defaults are :class:`ragstream.settings.EvidenceSettings`' ``w_*``.

    Attributes:
        cosine: cosine similarity of question and unit embeddings, in [-1, 1].
        lexical: IDF-weighted coverage of the question's terms in the unit, in [0, 1].
        titled: the same coverage in the unit plus its passage's title, in [0, 1].
        rank: ``1 / (1 + rank)`` of the unit's passage (rank 0 is the best passage).
        answer_type: how well the unit fits the question's expected answer type
            (:func:`workers.evidence.lexical.type_match`), in [0, 1].
        block: IDF-weighted coverage of the question's terms in the unit's whole block (its
            paragraph, definition or table) plus the passage's title, in [0, 1]: a sentence
            such as "The default is five minutes." is about what its paragraph is about.
        label: IDF-weighted coverage of the question's terms in the unit's label, in [0, 1]:
            the definition term heading it (``deadlock_timeout (integer)`` over "The default is
            one second."), a table row's first cell (``columns per table``), or a term itself.
            Many sentences of one page fit the asked type ("The default is ..."); the label
            says which thing each is about.
        value_type: added to ``answer_type`` for a question that asks for a value and not for
            a name or a way: a sentence that holds no value cannot state its answer ("... on
            the same TCP port" for "Which TCP port does the server listen on by default?").
        pointer: subtracted from a sentence that sends the reader elsewhere ("For more
            information ..., see the ANALYZE documentation.";
            :func:`workers.evidence.lexical.is_pointer`): it names the right thing but states
            nothing, and led the answer to "How can I see the execution plan ...?" before "You
            can use the EXPLAIN command to see what query plan the planner creates ...". 0.1,
            0.2 and 0.4 measured the same (sample answer first 0.7 -> 0.8; shared and dev
            unchanged). Subtracted too from a sentence about what the SQL standard says when the
            question does not ask about the standard
            (:func:`workers.evidence.lexical.about_standard`).
        default_statement: added to a unit that states a default (:func:`states_default`)
            when the question asks for one (a focus word "default", or an argument or setting
            it leaves unspecified: :data:`workers.evidence.lexical.OMITTED_CUES`). Among
            sentences that share the question's words, the one written as the statement of a
            default answers it ("The default value is 1000, ..." over "Previously this limit
            was fixed when you compiled Python, ..."): a surface answer pattern of the question's
            type (Ravichandran and Hovy 2002, "Learning surface text patterns for a question
            answering system").
        release_notes: subtracted from a unit of a release-notes page ("What's New in Python
            2.7", "E.1. Release 15.20": :func:`workers.evidence.lexical.is_release_notes`) when
            the question does not ask about versions or changes
            (:func:`workers.evidence.lexical.asks_about_versions`). Release notes tell what
            changed in one version, in the words of that time ("The getopt module closely
            resembles the C library's getopt() function, ...", "Python now supports three
            different modules for parsing command-line arguments"); the reference page answers
            a question about how things are (a document-type prior of the kind web search
            gives its page types).
    """

    cosine: float = _DEFAULTS.w_cosine
    lexical: float = _DEFAULTS.w_lexical
    titled: float = _DEFAULTS.w_titled
    rank: float = _DEFAULTS.w_rank
    answer_type: float = _DEFAULTS.w_answer_type
    block: float = _DEFAULTS.w_block
    label: float = _DEFAULTS.w_label
    value_type: float = _DEFAULTS.w_value_type
    pointer: float = _DEFAULTS.w_pointer
    default_statement: float = _DEFAULTS.w_default_statement
    release_notes: float = _DEFAULTS.w_release_notes

    @classmethod
    def from_settings(cls, settings: EvidenceSettings) -> Weights:
        """The weights ``settings`` give (its ``w_<name>`` for every field ``<name>``)."""
        return cls(**{f.name: getattr(settings, f"w_{f.name}") for f in fields(cls)})

    def vector(self) -> tuple[float, ...]:
        """The weights in :data:`FEATURES` order (the score is their dot product with a unit's
        features, :func:`weighted_sum`)."""
        return tuple(getattr(self, name) for name in FEATURES)


#: The features of a unit's score, in the order :func:`weighted_sum` adds them; each is a field
#: of :class:`Weights` and the score is ``sum(w[name] * feature[name])``. The signs are the
#: features': ``pointer`` and ``release_notes`` are -1.0 where they apply, so their weights stay
#: positive. ``answer_type`` is the unit's fit plus :data:`TERM_BONUS` for a term declaring the
#: asked kind; ``value_type`` is the fit again for a question for a value alone (else 0);
#: ``cosine`` is 0 for a unit not embedded (``dense_top``). The order is the one the score was
#: written in before it was a dot product, cosine last (it is added after the ranking by the
#: lexical score, :meth:`EvidenceSelector._add_cosine`).
FEATURES: tuple[str, ...] = (
    "lexical",
    "titled",
    "pointer",
    "rank",
    "answer_type",
    "value_type",
    "block",
    "label",
    "default_statement",
    "release_notes",
    "cosine",
)
#: Where the cosine similarity is in a feature vector.
COSINE = FEATURES.index("cosine")


def weighted_sum(weights: Sequence[float], features: Sequence[float]) -> float:
    """``weights · features``, added left to right (``weights``: :meth:`Weights.vector`;
    ``features``: a unit's, :data:`FEATURES` order). A plain loop, so the sum is the same float
    on every Python (``sum`` compensates on 3.12+)."""
    total = 0.0
    for w, x in zip(weights, features, strict=True):
        total += w * x
    return total


@dataclass(frozen=True, slots=True)
class Span:
    """A quoted piece of one passage.

    Attributes:
        n: 1-based number of the passage in the question's passage list (its citation ``[n]``).
        chunk_id: the passage's chunk id.
        doc_id: the passage's document id.
        start: offset of the first character in the chunk text.
        end: offset one past the last character (``chunk.text[start:end] == text``).
        text: the quoted text.
        score: the unit score (see :class:`Weights`).
        context: text that frames the span: a table row's header, or the definition term heading
            a sentence of a description; else "".
        kind: the kind of its first unit (:attr:`workers.evidence.segment.Unit.kind`), or
            :data:`EXAMPLE` for a line introducing an example quoted with the example.
        fit: how well its unit fits the kind of answer asked for, in [0, 1]
            (:func:`workers.evidence.lexical.type_match`).
    """

    n: int
    chunk_id: str
    doc_id: str
    start: int
    end: int
    text: str
    score: float
    context: str = ""
    kind: str = "sentence"
    fit: float = 0.0

    @property
    def words(self) -> int:
        """Words of the quoted text."""
        return len(self.text.split())


@dataclass(frozen=True, slots=True)
class Evidence:
    """The evidence of one question.

    Attributes:
        spans: the chosen spans, best first (empty when no passage had text).
        confidence: the best unit's score; ``-inf`` when there was no unit.
        missing: identifiers of the question found in no passage.
        units: how many units were scored.
        relevance: the best raw kNN score of the passages (Elasticsearch's cosine form
            ``(1 + cos) / 2``, in [0, 1]); ``None`` when no passage came from the kNN list.
        asks_value: the question asks for a value (a number, a size, a default;
            :func:`workers.evidence.lexical.answer_type`): its answer is one short statement.
        unknown_names: names of the question that are not code (``Paris``, ``MongoDB``,
            :func:`workers.evidence.lexical.proper_names`; ``nginx``, a word outside the
            selector's vocabulary, :func:`workers.evidence.lexical.uncommon_words`) that no
            passage holds as a word.
        stated: the share of the question's own content terms (IDF-weighted over the
            passages' units, :func:`workers.evidence.lexical.stated_share`) that the one unit of
            a passage stating most of them holds: 1.0 when a sentence of the tenant's documents
            states every word of the question but those asking for the kind of answer
            (:data:`CUE_TERMS`, "often"). 0.0 for a question of fewer than
            :data:`STATED_MIN_TERMS` content terms (one word names a topic, it states nothing).
        leads_with_value: the question asks for a value and not for a name or a way ("How
            much disk space does my database take?" asks for a way), or for an option or a flag
            (the fit then asks for an option token, ``--globals-only``): its answer opens with
            the span that states it (:func:`workers.evidence.answer.value_first`).
        rerank_score: the best rerank score of the passages when a learned reranker scored
            them (:class:`workers.rerank.onnx_cross_encoder.OnnxCrossEncoder`: ``sigmoid(logit)``
            in [0, 1]); set by the evidence stage, ``None`` otherwise.
    """

    spans: tuple[Span, ...]
    confidence: float
    missing: tuple[str, ...] = ()
    units: int = 0
    relevance: float | None = None
    unknown_names: tuple[str, ...] = ()
    asks_value: bool = False
    leads_with_value: bool = False
    stated: float = 0.0
    rerank_score: float | None = None


#: Fewest distinct content terms a question needs before a unit holding them counts as
#: stating it (:attr:`Evidence.stated`).
STATED_MIN_TERMS = 2


@dataclass(slots=True)
class _Scored:
    unit: Unit
    passage: int
    score: float
    fit: float = 0.0
    features: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class UnitFeatures:
    """One scored unit of a question, as a learned ranker sees it (:meth:`EvidenceSelector.
    features`).

    Attributes:
        passage: 0-based position of its passage in the question's passage list.
        features: its features, :data:`FEATURES` order (the score is their dot product with
            :meth:`Weights.vector`).
        score: its score under the selector's weights.
        span: the span it would be quoted as when it leads (its context unit or example
            taken along), or ``None`` when it cannot be quoted alone (a header row, a quote
            across the end of the chunk before).
    """

    passage: int
    features: tuple[float, ...]
    score: float
    span: Span | None


class EvidenceSelector:
    """Chooses evidence spans for a batch of questions (see the module docstring).

    Args:
        embedder: the query-side embedder; ``None`` scores lexically only.
        weights: the score's weights.
        dense_top: units per question (best by lexical score) that are embedded; 0 embeds none.
        max_spans: most spans per question.
        max_words: word budget of a question's spans together.
        max_unit_chars: units are cut to this many characters before embedding (the model's
            window is 256 word pieces; a long code block is judged by its start).
        vocabulary: common lower-case English (:func:`ingest.factory.build_vocabulary`); a
            question word outside it that no passage holds is an unknown name
            (:func:`workers.evidence.lexical.uncommon_words`). Empty: only capitalised names
            count.
    """

    def __init__(
        self,
        embedder: Embeds | None,
        weights: Weights | None = None,
        *,
        dense_top: int = 24,
        max_spans: int = 8,
        max_words: int = 260,
        max_unit_chars: int = 600,
        vocabulary: frozenset[str] = frozenset(),
    ) -> None:
        self.embedder = embedder
        self.weights = weights or Weights()
        self.dense_top = dense_top if embedder is not None else 0
        self.max_spans = max_spans
        self.max_words = max_words
        self.max_unit_chars = max_unit_chars
        self.vocabulary = vocabulary

    def select(
        self,
        batch: Sequence[tuple[str, Sequence[PassageLike]]],
        shown: Sequence[str] | None = None,
    ) -> list[Evidence]:
        """Evidence for each ``(question, passages best first)`` of ``batch``, in order.
        ``shown``: per question, the text its asker has just been shown (a follow-up's last
        answer; "" for none): no span repeats it (:func:`repeats`).

        One embedding call covers the whole batch.

        Raises:
            Whatever the embedder raises (a transient model-server error, say).
        """
        batch, units, scored = self._score(batch)
        out = []
        seen = [shingles(text) for text in shown] if shown else [frozenset()] * len(batch)
        for (question, passages), per_passage, (ranked, missing, unknown, stated), before in zip(
            batch, units, scored, seen, strict=True
        ):
            ranked.sort(key=lambda s: -s.score)
            confidence = ranked[0].score if ranked else -math.inf
            spans = self._spans(ranked, passages, per_passage, before)
            kind = answer_type(split_context(question)[0])
            knn = [k for p in passages if (k := getattr(p, "knn_score", None)) is not None]
            out.append(
                Evidence(
                    spans,
                    round(confidence, 4),
                    missing,
                    len(ranked),
                    relevance=round(max(knn), 4) if knn else None,
                    unknown_names=unknown,
                    asks_value=kind.value,
                    leads_with_value=(kind.value and not kind.name) or kind.named in OPTION_KINDS,
                    stated=round(stated, 4),
                )
            )
        return out

    def features(
        self, batch: Sequence[tuple[str, Sequence[PassageLike]]]
    ) -> list[list[UnitFeatures]]:
        """Every unit of each ``(question, passages best first)`` of ``batch`` with its features
        and score, in the order the units were read (the input of a learned ranker,
        ``bench/selector/``). :meth:`select` ranks the same units by the same scores.

        Raises:
            Whatever the embedder raises (``dense_top`` > 0).
        """
        batch, units, scored = self._score(batch)
        out = []
        for (_, passages), per_passage, (found, *_) in zip(batch, units, scored, strict=True):
            rows = []
            for s in found:
                quoted = self._span_of(s, passages, per_passage)
                span = quoted[0] if quoted is not None else None
                rows.append(UnitFeatures(s.passage, tuple(s.features), s.score, span))
            out.append(rows)
        return out

    def _score(
        self, batch: Sequence[tuple[str, Sequence[PassageLike]]]
    ) -> tuple[
        list[tuple[str, list[PassageLike]]],
        list[list[list[Unit]]],
        list[tuple[list[_Scored], tuple[str, ...], tuple[str, ...], float]],
    ]:
        """Steps 1-3 of the module docstring: the passages read whole, their units, and every
        question's scored units with what :meth:`_lexical` found."""
        read = [(question, read_whole(passages)) for question, passages in batch]
        units = [carry_heads(passages, [_units(p) for p in passages]) for _, passages in read]
        scored = [
            self._lexical(question, passages, per_passage)
            for (question, passages), per_passage in zip(read, units, strict=True)
        ]
        if self.dense_top > 0:
            self._add_cosine(read, scored)
        return read, units, scored

    def _lexical(
        self, question: str, passages: Sequence[PassageLike], per_passage: list[list[Unit]]
    ) -> tuple[list[_Scored], tuple[str, ...], tuple[str, ...], float]:
        vector = self.weights.vector()
        # A follow-up made standalone (workers.conversation) carries its earlier questions as
        # context: what kind of answer is wanted comes from the question alone, and the
        # context's terms count at CONTEXT_WEIGHT of their IDF.
        own, q_terms, extra = question_terms(question)
        texts = [f"{p.title}\n{p.text}".lower() for p in passages]
        kind = answer_type(own)
        # A question for a value alone (not a name or a way) weighs the fit more: a sentence
        # without any value cannot state the answer.
        value_only = 1.0 if kind.value and not kind.name else 0.0
        asked = question_tokens(question)
        unit_terms = [[terms(_scored_text(u)) for u in plist] for plist in per_passage]
        weights = idf([t for plist in unit_terms for t in plist])
        # The words that ask for the kind of answer ("how much", "what type") are not stated
        # by the sentence that answers: it states the value.
        own_terms = [t for t in terms(own) if t not in CUE_TERMS and t != "often"]
        top = top_weight(weights)
        stated = (
            max(
                (stated_share(own_terms, ut, weights, top) for pl in unit_terms for ut in pl),
                default=0,
            )
            if len(set(own_terms)) >= STATED_MIN_TERMS
            else 0.0
        )
        _scale(weights, extra, CONTEXT_WEIGHT)
        _scale(weights, (t for t in q_terms if t in CUE_TERMS), CUE_WEIGHT)
        top = top_weight(weights)  # the scaled weights' (coverage below)
        haystack = "\n".join(texts)
        # Only unmistakable code names count as missing ("PostgreSQL" is a product name).
        strong = set(strong_identifiers(own))
        missing = tuple(sorted(i for i in strong if i not in haystack))
        statements = statement_names(own) if STATEMENTS else []
        if statements:  # written across a line break in a passage counts as written
            flat = " ".join(haystack.split())
            missing += tuple(n for n in statements if n not in flat)
        unknown = tuple(
            n for n in dict.fromkeys(proper_names(own)) if not holds_word(haystack, n)
        ) + tuple(
            w
            for w in uncommon_words(own, self.vocabulary)
            if not holds_word(haystack, w) and not near_word(w, haystack)
        )
        default_q = DEFAULT_FOCUS in kind.focus
        q_words = {x.lower() for x in re.findall(r"\w+", own)}
        dated = 0.0 if asks_about_versions(own) else -1.0
        scored: list[_Scored] = []
        rank_bonus = rank_bonuses(passages)
        for pi, (passage, plist) in enumerate(zip(passages, per_passage, strict=True)):
            subject = subject_name(passage.title)
            old = dated if is_release_notes(passage.title) else 0.0
            title_terms = terms(passage.title)
            blocks: dict[int, list[str]] = {}
            for ui, unit in enumerate(plist):
                blocks.setdefault(unit.block, list(title_terms)).extend(unit_terms[pi][ui])
            block_cover = {b: coverage(q_terms, t, weights, top) for b, t in blocks.items()}
            for ui, unit in enumerate(plist):
                ut = unit_terms[pi][ui]
                label = _label(unit)
                code, cell = unit.kind == "code", _cell(unit)
                example = _example(plist, ui)
                if example is not None and INTRO_FIT:
                    # An intro line is quoted with its example (_with_context): it fits as both.
                    fit = type_match(
                        kind,
                        f"{unit.text}\n{example.text}",
                        [*ut, *unit_terms[pi][ui + 1]],
                        True,
                        asked,
                        label=cell,
                        subject=subject,
                    )
                else:
                    fit = type_match(kind, unit.text, ut, code, asked, label=cell, subject=subject)
                features = [  # FEATURES order
                    coverage(q_terms, ut, weights, top),
                    coverage(q_terms, [*ut, *title_terms], weights, top),
                    -1.0 if is_pointer(unit.text) or about_standard(unit.text, own) else 0.0,
                    rank_bonus[pi],
                    fit + TERM_BONUS * _declared(kind.named, unit),
                    value_only * fit,
                    block_cover[unit.block],
                    coverage(q_terms, terms(label), weights, top) if label else 0.0,
                    states_default(unit, q_words) if default_q else 0.0,
                    old,
                    0.0,  # cosine: _add_cosine
                ]
                score = weighted_sum(vector, features)
                scored.append(_Scored(unit, pi, score, fit, features))
        return scored, missing, unknown, stated

    def _add_cosine(
        self,
        batch: Sequence[tuple[str, Sequence[PassageLike]]],
        scored: list[tuple[list[_Scored], tuple[str, ...], tuple[str, ...], float]],
    ) -> None:
        assert self.embedder is not None
        texts: list[str] = []
        picks: list[tuple[int, list[_Scored]]] = []
        for (question, _), (ranked, *_) in zip(batch, scored, strict=True):
            top = sorted(ranked, key=lambda s: -s.score)[: self.dense_top]
            picks.append((len(texts), top))
            texts.append(question)
            texts.extend(_scored_text(s.unit)[: self.max_unit_chars] for s in top)
        if not texts:
            return
        vectors = self.embedder.embed(texts)
        for q_row, top in picks:
            for j, s in enumerate(top, start=1):
                cosine = float(np.dot(vectors[q_row], vectors[q_row + j]))
                s.features[COSINE] = cosine
                s.score += self.weights.cosine * cosine  # the last term of weighted_sum

    def _spans(
        self,
        ranked: list[_Scored],
        passages: Sequence[PassageLike],
        per_passage: list[list[Unit]],
        shown: frozenset[tuple[str, ...]] = frozenset(),
    ) -> tuple[Span, ...]:
        chosen: list[Span] = []
        used: set[tuple[int, int]] = set()
        said: set[tuple[str, ...]] = set()  # the shingles of the spans chosen so far
        words = 0
        for s in ranked:
            if len(chosen) >= self.max_spans:
                break
            if (s.passage, s.unit.start) in used or s.unit.kind == "header":
                continue  # a header row frames its rows; alone it answers nothing
            units, _ = _with_context(s.unit, per_passage[s.passage])
            if any((s.passage, u.start) in used for u in units):
                continue  # its example is quoted already: the same code twice reads as a fault
            n_words = sum(len(u.text.split()) for u in units)
            if chosen and words + n_words > self.max_words:
                continue
            p = passages[s.passage]
            text = p.text[units[0].start : units[-1].end]
            if shown and repeats(text, shown):
                continue
            if said and repeats(text, frozenset(said)):
                continue  # the same sentence from another passage (an entry and its chunk)
            quoted = self._span_of(s, passages, per_passage)
            if quoted is None:
                continue  # across the end of the chunk before: no one chunk holds it whole
            chosen.append(quoted[0])
            used.update((s.passage, u.start) for u in quoted[1])
            said.update(shingles(text))
            words += n_words
        return tuple(chosen)

    @staticmethod
    def _span_of(
        s: _Scored, passages: Sequence[PassageLike], per_passage: list[list[Unit]]
    ) -> tuple[Span, list[Unit]] | None:
        """The span ``s`` is quoted as, with the units it quotes (its context unit or example
        taken along, :func:`_with_context`); ``None`` for a header row or a quote across the end
        of the chunk before (no one chunk holds it whole)."""
        if s.unit.kind == "header":
            return None
        units, example = _with_context(s.unit, per_passage[s.passage])
        p = passages[s.passage]
        first, last = units[0], units[-1]
        origin = _origin(p, first.start, last.end)
        if origin is None:
            return None
        span = Span(
            n=s.passage + 1,
            chunk_id=origin[0],
            doc_id=p.doc_id,
            start=origin[1],
            end=origin[2],
            text=p.text[first.start : last.end],
            score=round(s.score, 4),
            context=first.context or (first.head if QUOTE_HEAD else ""),
            kind=EXAMPLE if example else first.kind,
            fit=round(s.fit, 4),
        )
        return span, units


#: Words a shingle of :func:`shingles` holds (w-shingles, Broder 1997, "On the resemblance and
#: containment of documents").
SHINGLE_WORDS = 3
#: Share of a unit's shingles found in the text shown before that makes it a repeat.
REPEAT_SHARE = 0.6


def shingles(text: str) -> frozenset[tuple[str, ...]]:
    """The :data:`SHINGLE_WORDS`-word shingles of ``text``'s lower-case words (citation
    markers such as ``[2]`` and punctuation dropped); a text shorter than that is one
    shingle."""
    words = re.findall(r"[a-z0-9_]+", re.sub(r"\[\d+\]", " ", text.lower()))
    if len(words) <= SHINGLE_WORDS:
        return frozenset({tuple(words)}) if words else frozenset()
    return frozenset(
        tuple(words[i : i + SHINGLE_WORDS]) for i in range(len(words) - SHINGLE_WORDS + 1)
    )


def repeats(text: str, shown: frozenset[tuple[str, ...]]) -> bool:
    """Whether ``text`` says again what ``shown`` (the :func:`shingles` of a text the asker
    has read) said: at least :data:`REPEAT_SHARE` of its shingles are in it (the containment
    of Broder 1997)."""
    own = shingles(text)
    return bool(own) and len(own & shown) >= REPEAT_SHARE * len(own)


#: Whether a DDL statement the question names in capitals that no passage writes is missing
#: (:func:`workers.evidence.lexical.statement_names`).
STATEMENTS = True

#: Scale (of the answer-type weight) of the bonus of a definition term that declares the kind
#: of thing the question asks for ("Which class ..." and the term "class asyncio.TaskGroup"):
#: a term is short, so its own word coverage is low. 0.5 answered one more of the 90 questions
#: of the three sets (TaskGroup) and lost none; 1.0 also lifted every "-x" option term of a
#: command's page above the sentence that names the asked option (docs/evaluation.md).
TERM_BONUS = 0.5
#: The kinds of a "which <kind>" question whose answer is an option token: its answer opens
#: with the span that holds one (``leads_with_value``: "Cluster-wide data can be dumped alone
#: using the pg_dumpall --globals-only option." before the paragraph introducing pg_dumpall).
OPTION_KINDS = ("option", "flag")
#: The stem :func:`workers.evidence.lexical.answer_type` puts in a question's focus when it
#: asks for a default.
DEFAULT_FOCUS = "default"
#: How the manuals state a default: "The default is five minutes", "It defaults to -1",
#: "``ERROR`` is the default", "By default, ...", "width (default 80)", "A value of zero (the
#: default) disables the timeout".
DEFAULT_STATEMENT = re.compile(
    r"\bdefaults?\s+(?:\w+\s+){0,3}?(?:is|are|was)\b|\bdefault\s+value\s+of\b|\bdefaults?\s+to\b|"
    r"\bdefault:|"
    r"\b(?:is|are)\s+(?:\w+\s+){0,2}?(?:the\s+)?default\b|\bby default\b|\(\s*(?:the\s+)?default\b",
    re.IGNORECASE,
)
#: A keyword argument's default in a signature: ``timeout=None`` in ``subprocess.run(args, *,
#: ..., timeout=None, ...)``.
KEYWORD_DEFAULT = re.compile(r"[(,\s*](\w{2,})=(?!=)")
#: A signature's default counts this share of a sentence's: ``port=0`` only shows a value,
#: "The defaults are to connect ... at the standard SMTP port (25)" says what it means.
SIGNATURE_DEFAULT = 0.5


#: Whether a passage is read with the part of the chunk before it that it continues
#: (``Candidate.preceding``, set by retrieval; :func:`read_whole`).
READ_PRECEDING = True


@dataclass(frozen=True, slots=True)
class WholePassage:
    """A passage read with its ``preceding`` part before its text (:func:`read_whole`).

    Attributes:
        passage: the passage (a :class:`topics.retrieved.Candidate`); what this does not
            define is read from it.
        text: the preceding part's text, then the passage's text without its leading
            whitespace (the manual's text without a break).
        preceding: the passage's ``preceding`` (:class:`topics.retrieved.Preceding`).
        shift: characters of leading whitespace of the passage's own text.
    """

    passage: PassageLike
    text: str
    preceding: PrecedingLike
    shift: int

    @property
    def chunk_id(self) -> str:
        return self.passage.chunk_id

    @property
    def doc_id(self) -> str:
        return self.passage.doc_id

    @property
    def title(self) -> str:
        return self.passage.title

    def __getattr__(self, name: str) -> Any:  # score, knn_score, ... of the passage
        return getattr(self.passage, name)


def read_whole(passages: Sequence[PassageLike]) -> list[PassageLike]:
    """``passages``, each read with the part of the chunk before it that its text continues (its
    ``preceding``, :class:`topics.retrieved.Preceding`) when it has one and that chunk is not
    one of ``passages`` (:func:`carry_heads` then gives its units their term, and the same
    sentences are not read twice).

    Every quote keeps its place (:func:`_origin`): a unit of the preceding part is quoted from
    the chunk before, with offsets into that chunk's text; a unit that runs past that chunk's
    end is not quoted.
    """
    if not READ_PRECEDING:
        return list(passages)
    ids = {p.chunk_id for p in passages}
    out: list[PassageLike] = []
    for p in passages:
        preceding = getattr(p, "preceding", None)
        if preceding is None or not preceding.text or preceding.chunk_id in ids:
            out.append(p)
            continue
        body = p.text.lstrip()
        out.append(WholePassage(p, preceding.text + body, preceding, len(p.text) - len(body)))
    return out


def _units(passage: PassageLike) -> list[Unit]:
    units = segment(passage.text)
    if isinstance(passage, WholePassage):
        return [u for u in units if _origin(passage, u.start, u.end) is not None]
    return units


def _origin(passage: PassageLike, start: int, end: int) -> tuple[str, int, int] | None:
    """``(chunk_id, start, end)`` of the characters ``[start, end)`` of ``passage.text`` in
    the chunk that holds them; ``None`` when they run from the preceding part past the end of
    the chunk before (neither chunk holds them whole)."""
    if not isinstance(passage, WholePassage):
        return passage.chunk_id, start, end
    cut = len(passage.preceding.text)
    if start >= cut:
        return passage.passage.chunk_id, start - cut + passage.shift, end - cut + passage.shift
    if end > cut + passage.preceding.overlap:
        return None
    at = passage.preceding.start
    return passage.preceding.chunk_id, at + start, at + end


#: Whether a passage that continues another retrieved passage of its document takes that
#: passage's definition term as the head of its leading units (:func:`carry_heads`).
CARRY_HEADS = True


def carry_heads(passages: Sequence[PassageLike], per_passage: list[list[Unit]]) -> list[list[Unit]]:
    """``per_passage`` with the leading units of a passage that continues another one given the
    definition term they are under.

    Chunks overlap (``chunking.overlap_tokens``), and a chunk that starts inside a definition's
    description has lost its term: "The default is 4 gigabytes (4GB)." with no
    ``effective_cache_size (integer)`` over it, while the chunk before it, retrieved too, holds
    the term. A passage whose first :data:`CONTINUATION_CHARS` characters occur inside another
    passage of the same document continues it; its units before its own first term, when they
    have no head, take the head (or the term) of the unit of the other passage where the
    overlap begins.

    Returns:
        A list of the same shape; passages without such a predecessor keep their units.
    """
    if not CARRY_HEADS:
        return per_passage
    out = list(per_passage)
    for bi, b in enumerate(passages):
        key = b.text.lstrip()[:CONTINUATION_CHARS]
        if len(key) < CONTINUATION_CHARS or not per_passage[bi] or per_passage[bi][0].head:
            continue
        for ai, a in enumerate(passages):
            pos = a.text.find(key) if ai != bi and a.doc_id == b.doc_id else -1
            if pos <= 0:
                continue
            at = next((u for u in reversed(per_passage[ai]) if u.start <= pos), None)
            head = "" if at is None else at.text if at.kind == "term" else at.head
            if head and not EXAMPLE_TERM.search(head):
                units = per_passage[bi]
                n = next((i for i, u in enumerate(units) if u.kind == "term" or u.head), len(units))
                out[bi] = [replace(u, head=head) for u in units[:n]] + units[n:]
            break
    return out


#: Passages whose retrieval scores (RRF) are within this share of each other are near ties:
#: their order turns on the last digits of each index build's kNN and BM25 lists, so each gets
#: the mean of the rank bonuses of its near ties' positions (:func:`rank_bonuses`).
RANK_TIE = 0.02


def rank_bonuses(passages: Sequence[PassageLike]) -> list[float]:
    """Per passage (best first), the share of :attr:`Weights.rank` its units get: ``1 / (1 +
    position)``, averaged over the positions of the passages whose retrieval ``score`` is within
    :data:`RANK_TIE` of its own (itself included).

    Two near-tied passages swapped get the same bonuses, so the answer does not depend on
    which came first. Before, a swap of two near-tied passages changed 3 of the shared set's 30
    answers, 1 of the dev set's and 1 of the new user's (all losses; every adjacent pair within
    3% of each other swapped in turn on the same passages); with 0.02, only one shared answer
    still changes (the root logger's level: WARNING stated third in one order, not at all in
    the other). Passages without a float ``score`` keep
    ``1 / (1 + position)``.

    Returns:
        One float in (0, 1] per passage.
    """
    scores = [getattr(p, "score", None) for p in passages]
    plain = [1 / (1 + i) for i in range(len(passages))]
    if RANK_TIE <= 0 or not all(isinstance(x, float) for x in scores):
        return plain
    out = []
    for si in scores:
        assert isinstance(si, float)
        near = [
            j
            for j, sj in enumerate(scores)
            if isinstance(sj, float) and abs(sj - si) <= RANK_TIE * max(abs(si), abs(sj))
        ]
        out.append(sum(plain[j] for j in near) / len(near))
    return out


def states_default(unit: Unit, asked: set[str]) -> float:
    """Whether ``unit`` states a default (:data:`DEFAULT_STATEMENT`), or is a signature (a
    definition term or list item, not a code example: ``@lru_cache(maxsize=32)`` is one use,
    not the default) giving a default to an argument the question names (``asked``: its
    lower-case words)."""
    if DEFAULT_STATEMENT.search(unit.text):
        return 1.0
    if unit.kind not in ("term", "item"):
        return 0.0
    hit = any(m.lower() in asked for m in KEYWORD_DEFAULT.findall(unit.text))
    return SIGNATURE_DEFAULT if hit else 0.0


def _scale(weights: dict[str, float], words: Iterable[str], share: float) -> None:
    """Multiply the IDF ``weights`` of ``words`` by ``share``, in place; a word without one
    takes the highest IDF first (a word no unit holds is as rare as the rarest)."""
    default = max(weights.values(), default=1.0)
    weights.update({t: share * weights.get(t, default) for t in set(words)})


def question_terms(question: str) -> tuple[str, list[str], list[str]]:
    """``(the question asked, its scoring terms, the terms only its context adds)`` of a
    question a follow-up may have made standalone (:func:`workers.conversation.split_context`):
    the asked question's terms first, then the context's other terms."""
    own, context = split_context(question)
    own_terms = terms(own)
    seen = set(own_terms)
    extra = [t for t in terms(context) if t not in seen]
    return own, own_terms + extra, extra


def subject_name(title: str) -> str:
    """The name a reference page's title gives its subject, lower-case, or "".

    Sphinx titles a module's page "configparser — Configuration file parser" and the PostgreSQL
    manual's reference pages read "EXPLAIN — show the execution plan of a statement" (see
    :func:`ingest.parsers.html.purpose_headings`): the part before " — " of the title's first
    heading names the thing the page documents. Chapter titles ("20.12. Lock Management")
    name none.
    """
    name, sep, _ = title.partition(" > ")[0].partition(" — ")
    return name.strip().lower() if sep else ""


def _declared(named: str, unit: Unit) -> float:
    if not named or unit.kind != "term":
        return 0.0
    return 1.0 if declares(named, unit.text) else 0.0


def _label(unit: Unit) -> str:
    """What ``unit`` is about by its layout: its heading term, its row's first cell, or itself
    when it is a term (see :attr:`Weights.label`)."""
    if unit.kind == "term":
        return unit.text
    if unit.kind == "row":
        return _cell(unit)
    return unit.head


def _cell(unit: Unit) -> str:
    """A table row's first cell ("" for other units)."""
    return unit.text.split(" | ", 1)[0].strip() if unit.kind == "row" else ""


def _scored_text(unit: Unit) -> str:
    return f"{unit.context}\n{unit.text}" if unit.context else unit.text


def _with_context(unit: Unit, units: list[Unit]) -> tuple[list[Unit], bool]:
    """``unit`` and, when it is too short to stand alone, the next unit of its block; a unit
    that introduces an example ("To create the database demo using the default database
    server:") takes the example that follows it (``$ createdb demo``, :func:`_example`): the
    line says what the example does, the example is how. The flag says it took an example."""
    intro = unit.text.rstrip().endswith(":")
    if len(unit.text.split()) >= SHORT_UNIT_WORDS and not intro:
        return [unit], False
    at = units.index(unit)
    if at + 1 >= len(units) or unit.kind == "code":
        return [unit], False
    after = units[at + 1]
    if _example(units, at) is not None:
        return [unit, after], True
    return ([unit, after] if after.block == unit.block else [unit]), False


def _example(units: list[Unit], at: int) -> Unit | None:
    """The example that ``units[at]``, a line introducing it ("... a simple policy can be
    used:"), is quoted with (:func:`_with_context`): the code block after it, or a one-line term
    or item of the next block that reads as code (:func:`_code_like`; "The basic usage of this
    command is:" and ``pg_dump dbname > dumpfile``), of at most :data:`INTRO_CODE_WORDS` words;
    else ``None``."""
    unit = units[at]
    if unit.kind == "code" or not unit.text.rstrip().endswith(":") or at + 1 >= len(units):
        return None
    after = units[at + 1]
    if len(after.text.split()) > INTRO_CODE_WORDS:
        return None
    if after.kind == "code":
        return after
    if LINE_EXAMPLES and after.kind in ("term", "item") and after.block != unit.block:
        # A one-line example the manual does not set as code: "pg_dump dbname > dumpfile",
        # "ALTER TABLE distributors ADD COLUMN address varchar(30);".
        return after if _code_like(after.text) else None
    return None


#: Whether a one-line term or item that reads as code is an intro line's example.
LINE_EXAMPLES = True
#: Two upper-case SQL keywords in a row ("ALTER TABLE", "CREATE ROLE").
_KEYWORDS = re.compile(r"\b[A-Z]{2,}\s+[A-Z]{2,}\b")


def _code_like(text: str) -> bool:
    """Whether a line reads as code: it names an identifier (``pg_dump``, ``os.getcwd()``),
    runs two SQL keywords together, or holds a shell or statement marker (``$ ``, ``;``)."""
    return bool(identifiers(text) or _KEYWORDS.search(text) or re.search(r"^\$ |;\s*$", text))


#: A line introducing an example fits the answer type as itself and its example together (the
#: two are quoted together): "This pair of policies would allow all users to view all rows in
#: the users table, but only modify their own:" names nothing, its ``CREATE POLICY`` example
#: does. Shared 20 -> 21 (how-to 3 -> 4), dev 48 -> 49 (how-to 4 -> 5), sample unchanged.
INTRO_FIT = True
#: The kind of a span that is a line introducing an example and the example (code) after it.
EXAMPLE = "example"


#: Most words of the code block an introducing line takes with it (:func:`_with_context`).
INTRO_CODE_WORDS = 40
