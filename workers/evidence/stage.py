"""The evidence stage of the rerank pool: evidence for a batch, the answer tier, evidence answers.

Per batch: :class:`~workers.evidence.select.EvidenceSelector` chooses every question's evidence
in one embedding call; :func:`choose_tier` decides per question between the ``evidence`` tier
(the quoted evidence is the answer, no LLM) and the LLM tier the retrieval pool's router
suggested, from the request's forced route, the evidence's weakness (a calibrated refusal needs
no LLM) and its confidence; the evidence tier's answers are composed here
(:func:`~workers.evidence.answer.compose`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ragstream.settings import EvidenceSettings
from topics.queries import QueryRequest
from topics.reranked import FallbackAnswer, RerankedPassages
from topics.responses import EvidenceSpan, QueryResponse
from topics.retrieved import Candidate
from topics.tokens import AnswerToken
from workers.citations import citations_of
from workers.conversation import split_context
from workers.evidence.answer import AnswerPolicy, EvidenceAnswer, compose, weakness
from workers.evidence.lexical import holds_word, identifiers, proper_names
from workers.evidence.select import Embeds, Evidence, EvidenceSelector, Span, Weights
from workers.retrieval.definitions import DefinitionHit, asks_for_a_name, definition_of
from workers.runtime.handler import derive_event_id

AnswerTier = Literal["evidence", "small", "large"]


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """How the router picks an answer tier once the evidence is known.

    Attributes:
        mode: ``evidence`` answers every question from its evidence; ``llm`` sends every
            question with usable evidence to its LLM tier; ``auto`` uses the evidence tier when
            the evidence's confidence reaches ``evidence_min_confidence``.
        evidence_min_confidence: see ``mode=auto`` (chosen with ``ragstream eval``).
    """

    mode: Literal["evidence", "llm", "auto"] = "evidence"
    evidence_min_confidence: float = 1.0


@dataclass(frozen=True, slots=True)
class Decision:
    """The evidence stage's result for one question.

    Attributes:
        tier: the answer tier.
        reason: why (``forced``, ``weak:...``, ``missing:...``, ``no_evidence``, ``policy``,
            ``confident:<score>``, ``unsure:<score>``).
        evidence: the question's evidence spans as carried by events, best first.
        confidence: the best span's score (``None`` without evidence).
        answer: the evidence tier's answer (a quote or a refusal), composed once for every
            question: the evidence tier's response, and what an LLM tier falls back on
            (:attr:`fallback`, carried by its ``rag.reranked`` event).
    """

    tier: AnswerTier
    reason: str
    evidence: tuple[EvidenceSpan, ...]
    confidence: float | None
    answer: EvidenceAnswer

    @property
    def fallback(self) -> FallbackAnswer:
        """The event form of :attr:`answer`."""
        return fallback_answer(self.answer)


def fallback_answer(answer: EvidenceAnswer) -> FallbackAnswer:
    """The event form of a composed evidence answer (the passage numbers it quotes)."""
    return FallbackAnswer(
        text=answer.text, cited=tuple(sorted({s.n for s in answer.spans})), refused=answer.refused
    )


def to_contract(span: Span, passages: Sequence[Candidate]) -> EvidenceSpan:
    """The event form of ``span`` (with its passage's title and source)."""
    p = passages[span.n - 1]
    return EvidenceSpan(
        n=span.n,
        chunk_id=span.chunk_id,
        doc_id=span.doc_id,
        start=span.start,
        end=span.end,
        text=span.text,
        score=span.score,
        context=span.context,
        title=p.title,
        source=p.source,
    )


def promote_identifiers(
    question: str,
    top: Sequence[Candidate],
    candidates: Sequence[Candidate],
    max_extra: int = 2,
) -> list[Candidate]:
    """``top`` plus, for each identifier or name of the question that no passage of ``top``
    contains, the best-ranked further candidate that contains it (at most ``max_extra`` added).

    An exact identifier (``gzip.open``, ``shared_buffers``) is the strongest sign of the page a
    question is about, and the fused ranking can leave that page just below the top K; the
    candidates the retrieval stage fetched (top N) are searched for it. A name that is not code
    (``PostgreSQL``, ``Unix``; :func:`~workers.evidence.lexical.proper_names`) is looked for the
    same way, as a whole word, so that the refusal gate (a name no passage holds) judges the
    candidates, not only the top K.
    """
    out = list(top)
    seen = {p.chunk_id for p in out}
    text = "\n".join(f"{p.title}\n{p.text}" for p in out).lower()
    wanted = [(n, False) for n in identifiers(question)]
    wanted += [(n, True) for n in proper_names(split_context(question)[0])]
    for name, whole_word in wanted:
        if len(out) - len(top) >= max_extra:
            break
        if _holds(text, name, whole_word):
            continue
        for c in candidates:
            body = f"{c.title}\n{c.text}".lower()
            if c.chunk_id not in seen and _holds(body, name, whole_word):
                out.append(c)
                seen.add(c.chunk_id)
                text += f"\n{body}"
                break
    return out


def attach_definition(
    top: Sequence[Candidate], definitions: Sequence[Candidate]
) -> list[Candidate]:
    """``top`` plus the best of ``definitions`` (definition entries found for a question that
    asks for a name or a way, best first) whose document is the document of a passage of
    ``top``, as the last passage; ``top`` alone when none is.

    The definition search proposes names, the passage searches verify them: an entry is kept
    only when the page that defines it is one the question's passages come from, so an entry
    near the question's words but from a page retrieval did not rank is never shown.
    """
    docs = {p.doc_id for p in top}
    chosen = next((d for d in definitions if d.doc_id in docs), None)
    return [*top, chosen] if chosen is not None else list(top)


def definition_first(
    answer: EvidenceAnswer, entry: DefinitionHit, n: int, policy: AnswerPolicy
) -> tuple[EvidenceAnswer, Span]:
    """``answer`` opened with the definition entry that is passage ``n``: its signature, its
    summary and its example (``str.split(sep=None, maxsplit=-1): Return a list of the words
    in the string, using sep as the delimiter string. [3]``), then the quoted evidence when
    both fit ``policy.max_words`` (else the entry alone). Returns the answer and the span it
    quotes of the entry (its summary, at its offsets in the passage text)."""
    head = entry.signature or entry.name
    start = len(head) + 1 if entry.summary else 0
    quoted = entry.summary or head
    span = Span(
        n=n,
        chunk_id=entry.entry_id,
        doc_id=entry.doc_id,
        start=start,
        end=start + len(quoted),
        text=quoted,
        score=answer.spans[0].score if answer.spans else 0.0,
        context=head if entry.summary else "",
        kind="definition",
    )
    lead = f"{head}: {entry.summary} [{n}]" if entry.summary else f"{head} [{n}]"
    if entry.example:
        lead = f"{lead}\n{entry.example}"
    words = len(lead.split())
    if answer.spans and words + len(answer.text.split()) <= policy.max_words:
        return EvidenceAnswer(f"{lead}\n{answer.text}", (span, *answer.spans), False), span
    return EvidenceAnswer(lead, (span,), False), span


def _holds(text: str, name: str, whole_word: bool) -> bool:
    return holds_word(text, name) if whole_word else name in text


def choose_tier(
    request: QueryRequest,
    llm_tier: AnswerTier,
    evidence: Evidence,
    answer_policy: AnswerPolicy,
    policy: TierPolicy,
) -> tuple[AnswerTier, str]:
    """The answer tier of one question and the reason (see :class:`TierPolicy`).

    The refusal gate comes first: weak evidence is refused by the evidence tier whatever tier
    the request forces (``route``), so a forced LLM tier never answers what the documents do
    not hold.
    """
    weak = weakness(evidence, answer_policy)
    if weak:
        return "evidence", weak
    if request.route != "auto":
        return request.route, "forced"
    if policy.mode == "evidence":
        return "evidence", "policy"
    if policy.mode == "llm":
        return llm_tier, "policy"
    if evidence.confidence >= policy.evidence_min_confidence:
        return "evidence", f"confident:{evidence.confidence:.3f}"
    return llm_tier, f"unsure:{evidence.confidence:.3f}"


class EvidenceStage:
    """Evidence, tier and evidence answer for a batch (see the module docstring).

    Args:
        selector: the evidence selector (its embedder is the pool's).
        answer_policy: how evidence answers are composed and when they refuse.
        tier_policy: how the tier is chosen.
    """

    def __init__(
        self, selector: EvidenceSelector, answer_policy: AnswerPolicy, tier_policy: TierPolicy
    ) -> None:
        self.selector = selector
        self.answer_policy = answer_policy
        self.tier_policy = tier_policy

    def run(
        self, batch: Sequence[tuple[QueryRequest, Sequence[Candidate], AnswerTier]]
    ) -> list[Decision]:
        """One :class:`Decision` per ``(request, passages best first, suggested LLM tier)``.

        Raises:
            Whatever the selector's embedder raises.
        """
        # A definition entry (attach_definition) is the last passage: the selector reads the
        # passages before it, so their numbers stay the citations of the whole list.
        entries = [_entry(passages) for _, passages, _ in batch]
        found = self.selector.select(
            [
                (r.query, passages[:-1] if entry is not None else passages)
                for (r, passages, _), entry in zip(batch, entries, strict=True)
            ]
        )
        out = []
        for (request, passages, llm_tier), evidence, entry in zip(
            batch, found, entries, strict=True
        ):
            tier, reason = choose_tier(
                request, llm_tier, evidence, self.answer_policy, self.tier_policy
            )
            answer = compose(evidence, self.answer_policy)
            spans: tuple[Span, ...] = evidence.spans
            if entry is not None and not answer.refused and asks_for_a_name(request.query):
                answer, lead = definition_first(answer, entry, len(passages), self.answer_policy)
                spans = (lead, *spans)
            out.append(
                Decision(
                    tier=tier,
                    reason=reason,
                    evidence=tuple(to_contract(s, passages) for s in spans),
                    confidence=evidence.confidence if evidence.spans else None,
                    answer=answer,
                )
            )
        return out


def _entry(passages: Sequence[Candidate]) -> DefinitionHit | None:
    """The definition entry that is the last of ``passages`` (:func:`attach_definition`)."""
    return definition_of(passages[-1]) if passages else None


def answer_policy(settings: EvidenceSettings) -> AnswerPolicy:
    """The evidence tier's :class:`AnswerPolicy` from the settings."""
    return AnswerPolicy(
        max_words=settings.answer_words,
        max_spans=settings.answer_spans,
        keep_ratio=settings.keep_ratio,
        min_confidence=settings.min_confidence,
        refuse_missing=settings.refuse_missing,
        same_document=settings.answer_same_document,
        value_spans=settings.answer_value_spans,
        min_relevance=settings.min_relevance,
        refuse_unknown_names=settings.refuse_unknown_names,
        unknown_name_relevance=settings.unknown_name_relevance,
    )


def build_evidence_stage(
    settings: EvidenceSettings,
    embedder: Embeds | None,
    vocabulary: frozenset[str] = frozenset(),
) -> EvidenceStage:
    """The evidence stage from the settings (``embedder``: the pool's, already warm;
    ``vocabulary``: common English, :func:`ingest.factory.build_vocabulary`, empty when
    ``refuse_uncommon_words`` is off)."""
    selector = EvidenceSelector(
        embedder,
        Weights(
            cosine=settings.w_cosine,
            lexical=settings.w_lexical,
            titled=settings.w_titled,
            identifier=settings.w_identifier,
            rank=settings.w_rank,
            answer_type=settings.w_answer_type,
            block=settings.w_block,
            rest=settings.w_rest,
            label=settings.w_label,
            value_type=settings.w_value_type,
            pointer=settings.w_pointer,
            default_statement=settings.w_default_statement,
            release_notes=settings.w_release_notes,
        ),
        dense_top=settings.dense_top,
        max_spans=settings.prompt_spans,
        max_words=settings.prompt_words,
        vocabulary=vocabulary,
    )
    tiers = TierPolicy(settings.tier_mode, settings.evidence_min_confidence)
    return EvidenceStage(selector, answer_policy(settings), tiers)


def evidence_response(event: RerankedPassages) -> QueryResponse:
    """The evidence tier's answer to ``event``: its composed :attr:`~RerankedPassages.fallback`
    with the passages it quotes cited, and its evidence.

    Raises:
        ValueError: ``event`` carries no evidence answer (no evidence stage ran).
    """
    answer = event.fallback
    if answer is None:
        raise ValueError("no evidence answer was composed for this event")
    return QueryResponse(
        event_id=derive_event_id(event.event_id, "answer-evidence"),
        tenant=event.tenant,
        request_id=event.request.request_id,
        status="answered",
        answer=answer.text,
        citations=citations_of(answer.cited, event.passages),
        evidence=event.evidence,
        tier="evidence",
        trace=event.trace,
        callback_url=event.request.callback_url,
    )


def evidence_token(event: RerankedPassages) -> AnswerToken:
    """The evidence event of a streamed answer (``seq`` 0, before any LLM token)."""
    return AnswerToken(
        event_id=derive_event_id(event.request.request_id, "token:evidence"),
        tenant=event.tenant,
        request_id=event.request.request_id,
        seq=0,
        kind="evidence",
        evidence=event.evidence,
    )
