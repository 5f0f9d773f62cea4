"""The evidence stage of the rerank pool: evidence for a batch, the answer tier, evidence answers.

Per batch: :class:`~workers.evidence.select.EvidenceSelector` chooses every question's evidence
in one embedding call; :func:`workers.routing.choose_tier` (the one place a tier is decided)
picks per question between the ``evidence`` tier (the quoted evidence is the answer, no LLM) and
the LLM tier the retrieval pool's router suggested, from the request's forced route, the
evidence's weakness (a calibrated refusal needs no LLM) and its confidence; the evidence tier's
answers are composed here
(:func:`~workers.evidence.answer.compose`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ragstream.settings import LEARNED_RERANK_BACKENDS, EvidenceSettings, RerankSettings
from topics.queries import QueryRequest
from topics.reranked import FallbackAnswer, RerankedPassages
from topics.responses import EvidenceSpan, QueryResponse
from topics.retrieved import Candidate
from topics.tokens import AnswerToken
from workers.citations import citations_of
from workers.conversation import (
    answer_names,
    asks_for_a_name,
    last_answer,
    question_of,
    split_context,
)
from workers.evidence.answer import AnswerPolicy, EvidenceAnswer, compose, quote
from workers.evidence.lexical import holds_word, identifiers, proper_names
from workers.evidence.select import (
    Embeds,
    Evidence,
    EvidenceSelector,
    Span,
    Weights,
    repeats,
    shingles,
)
from workers.retrieval.definitions import DefinitionHit, definition_of
from workers.routing import AnswerTier, TierPolicy, choose_tier
from workers.runtime.handler import derive_event_id


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


def attach_definitions(
    top: Sequence[Candidate], definitions: Sequence[Candidate]
) -> list[Candidate]:
    """``top`` plus, as its last passages, definition entries found for a question that asks
    for a name or a way (``definitions``, best first): first the first entry of a name the
    proposer named and the index verified (``metadata.proposed``) whose page a passage of
    ``top`` comes from, then the best searched entry of each other document of ``top``;
    ``top`` alone when there is none.

    Every entry is verified twice: the index defines it, and retrieval ranked its page (a
    proposed ``hashlib.scrypt`` for a question about PostgreSQL's password hashing, its page
    nowhere among the passages, is never attached). The evidence answer then opens with the
    entry of the page its best span quotes (:meth:`EvidenceStage.compose_answer`); the LLM
    tiers read the attached entries as passages.
    """
    docs = {p.doc_id for p in top}
    chosen: dict[str, Candidate] = {}
    # A proposed name the index defines, on a page retrieval ranked: the first such entry.
    lead = next(
        (d for d in definitions if d.metadata.get("proposed") is True and d.doc_id in docs), None
    )
    if lead is not None:
        chosen[lead.doc_id] = lead
    for d in definitions:
        if d.doc_id in docs and d.doc_id not in chosen and d.metadata.get("proposed") is not True:
            chosen[d.doc_id] = d
    return [*top, *chosen.values()]


def definition_first(
    answer: EvidenceAnswer,
    entry: DefinitionHit,
    n: int,
    evidence: Evidence,
    policy: AnswerPolicy,
) -> tuple[EvidenceAnswer, Span]:
    """The answer that opens with the definition entry that is passage ``n``: its signature
    and its summary (``str.split(sep=None, maxsplit=-1): Return a list of the words in the
    string, using sep as the delimiter string. [3]``) and its example, then the evidence of its
    document quoted as :func:`~workers.evidence.answer.quote` quotes it, in the words the
    entry leaves of ``policy.max_words`` (none when its best span does not fit). Returns the
    answer and the span it quotes of the entry (its summary, at its offsets in the passage).
    """
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
        score=evidence.confidence,
        kind="definition",
    )
    said = not entry.summary or entry.summary in head  # "createdb — create a new ..."
    lead = f"{head} [{n}]" if said else f"{head}: {entry.summary} [{n}]"
    if entry.example:
        lead = f"{lead}\n{entry.example}"
    budget = policy.max_words - len(lead.split())
    # The evidence of the entry's page supports it; of another page (a proposed entry),
    # the evidence answer follows as it is.
    support = [s for s in answer.spans if s.doc_id == entry.doc_id] or list(answer.spans)
    # What the entry says already is not quoted again (its own description term in a chunk).
    support = [s for s in support if " ".join(s.text.split()) not in " ".join(lead.split())]
    if not support or len(support[0].text.split()) + len(support[0].context.split()) > budget:
        return EvidenceAnswer(lead, (span,), False), span
    text, chosen = quote(support, replace(policy, max_words=budget))
    return EvidenceAnswer(f"{lead}\n{text}", (span, *chosen), False), span


def _holds(text: str, name: str, whole_word: bool) -> bool:
    return holds_word(text, name) if whole_word else name in text


class EvidenceStage:
    """Evidence, tier and evidence answer for a batch (see the module docstring).

    Args:
        selector: the evidence selector (its embedder is the pool's).
        answer_policy: how evidence answers are composed and when they refuse.
        tier_policy: how the tier is chosen.
        rerank_threshold: a tenant's abstention threshold on the learned reranker's best
            passage score (:meth:`ragstream.settings.RerankSettings.min_score_of`), which
            :meth:`policy_for` puts into the answer policy; ``None``: the passages' rerank
            scores are not a learned model's, no such gate.
        replaces_relevance: where a threshold is set, the kNN relevance gate
            (``min_relevance``) is off: the model's gate replaces it.
    """

    def __init__(
        self,
        selector: EvidenceSelector,
        answer_policy: AnswerPolicy,
        tier_policy: TierPolicy,
        rerank_threshold: Callable[[str], float | None] | None = None,
        replaces_relevance: bool = False,
    ) -> None:
        self.selector = selector
        self.answer_policy = answer_policy
        self.tier_policy = tier_policy
        self.rerank_threshold = rerank_threshold
        self.replaces_relevance = replaces_relevance

    def policy_for(self, request: QueryRequest) -> AnswerPolicy:
        """The answer policy of ``request``: with a learned reranker, its tenant's threshold on
        the best rerank score (``min_rerank_score``)."""
        if self.rerank_threshold is None:
            return self.answer_policy
        threshold = self.rerank_threshold(request.tenant)
        if threshold is None:
            return self.answer_policy
        relevance = 0.0 if self.replaces_relevance else self.answer_policy.min_relevance
        return replace(self.answer_policy, min_rerank_score=threshold, min_relevance=relevance)

    def run(
        self, batch: Sequence[tuple[QueryRequest, Sequence[Candidate], AnswerTier]]
    ) -> list[Decision]:
        """One :class:`Decision` per ``(request, passages best first, suggested LLM tier)``.

        Raises:
            Whatever the selector's embedder raises.
        """
        found = self.select([(r, passages) for r, passages, _ in batch])
        out = []
        for (request, passages, llm_tier), evidence in zip(batch, found, strict=True):
            tier, reason = choose_tier(
                request, llm_tier, evidence, self.policy_for(request), self.tier_policy
            )
            answer, spans = self.compose_answer(request, passages, evidence)
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

    def select(self, batch: Sequence[tuple[QueryRequest, Sequence[Candidate]]]) -> list[Evidence]:
        """The evidence of each ``(request, passages)``, in one embedding call. Definition
        entries (:func:`attach_definitions`) are the last passages: the selector reads the
        passages before them, so their numbers stay the citations of the whole list. With a
        learned reranker, each evidence carries its passages' best rerank score.

        Raises:
            Whatever the selector's embedder raises.
        """
        found = self.selector.select(*selector_input(batch))
        if self.rerank_threshold is None:
            return found
        return [
            replace(e, rerank_score=best_rerank_score(_without_entries(passages)))
            for e, (_, passages) in zip(found, batch, strict=True)
        ]

    def compose_answer(
        self, request: QueryRequest, passages: Sequence[Candidate], evidence: Evidence
    ) -> tuple[EvidenceAnswer, tuple[Span, ...]]:
        """The evidence answer of one question (:func:`~workers.evidence.answer.compose`) and
        its evidence spans. When the question asks for a name or a way, the answer opens
        (:func:`definition_first`, its span first among the evidence) with the attached entry
        of a proposed and verified name, else with the attached entry of the page its best span
        quotes when the quote names it: the evidence selector, on its own, found the answer on
        the page that defines the name. A refusal stays a refusal, and an entry the user has just
        been shown (a follow-up's last answer named it, :func:`~workers.conversation.answer_names`,
        or said what it says, :func:`~workers.evidence.select.repeats`) does not open the answer
        again."""
        policy = self.policy_for(request)
        answer = compose(evidence, policy)
        if answer.refused or not asks_for_a_name(question_of(request)):
            return answer, evidence.spans
        last = last_answer(request)
        shown, named = shingles(last), set(answer_names(last))
        entries = [
            None
            if e.name.lower() in named or (shown and repeats(f"{e.signature}\n{e.summary}", shown))
            else e
            for e in _entries(passages)
        ]
        if entries and entries[0] is not None and entries[0].proposed:
            n = len(passages) - len(entries) + 1
            answer, lead = definition_first(answer, entries[0], n, evidence, policy)
            return answer, (lead, *evidence.spans)
        lead_doc = answer.spans[0].doc_id
        quoted = "\n".join(f"{s.context}\n{s.text}" for s in answer.spans if s.doc_id == lead_doc)
        at = next(
            (
                (i, e)
                for i, e in enumerate(entries)
                if e is not None and e.doc_id == lead_doc and mentions(quoted, e.name)
            ),
            None,
        )
        if at is None:
            return answer, evidence.spans
        n = len(passages) - len(entries) + at[0] + 1
        answer, lead = definition_first(answer, at[1], n, evidence, policy)
        return answer, (lead, *evidence.spans)


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` names ``name``: a dotted name in full, or its last part called
    (``reader(``) or as an attribute (``.reader``); any other name as a whole word, case as
    written (``CONCURRENTLY``, ``pg_dump``, ``-m``)."""
    if "." in name.strip("."):
        last = name.rsplit(".", 1)[-1]
        return name in text or f"{last}(" in text or f".{last}" in text
    return re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text) is not None


def best_rerank_score(passages: Sequence[Candidate]) -> float | None:
    """The highest ``rerank_score`` of ``passages`` (``None`` when none has one)."""
    return max((p.rerank_score for p in passages if p.rerank_score is not None), default=None)


def _without_entries(passages: Sequence[Candidate]) -> Sequence[Candidate]:
    """``passages`` before the definition entries at their end."""
    return passages[: len(passages) - len(_entries(passages))]


def _entries(passages: Sequence[Candidate]) -> list[DefinitionHit]:
    """The definition entries at the end of ``passages`` (:func:`attach_definitions`), in
    order."""
    out: list[DefinitionHit] = []
    for p in reversed(passages):
        entry = definition_of(p)
        if entry is None:
            break
        out.append(entry)
    return out[::-1]


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
        statement_coverage=settings.statement_coverage,
        refuse_unknown_names=settings.refuse_unknown_names,
        unknown_name_relevance=settings.unknown_name_relevance,
    )


def selector_input(
    batch: Sequence[tuple[QueryRequest, Sequence[Candidate]]],
) -> tuple[list[tuple[str, Sequence[Candidate]]], list[str]]:
    """What the selector reads of each ``(request, passages)``: ``(question, passages before
    the definition entries)`` pairs (:meth:`EvidenceStage.select`) and the text each asker was
    just shown (:func:`workers.conversation.last_answer`)."""
    pairs: list[tuple[str, Sequence[Candidate]]] = [
        (question_of(r), passages[: len(passages) - len(_entries(passages))])
        for r, passages in batch
    ]
    return pairs, [last_answer(r) for r, _ in batch]


def build_evidence_stage(
    settings: EvidenceSettings,
    embedder: Embeds | None,
    vocabulary: frozenset[str] = frozenset(),
    rerank: RerankSettings | None = None,
) -> EvidenceStage:
    """The evidence stage from the settings (``embedder``: the pool's, already warm;
    ``vocabulary``: common English, :func:`ingest.factory.build_vocabulary`, empty when
    ``refuse_uncommon_words`` is off; ``rerank``: the rerank pool's settings, whose
    ``min_score`` gates on the best rerank score when its backend is a learned model)."""
    selector = EvidenceSelector(
        embedder,
        Weights.from_settings(settings),
        dense_top=settings.dense_top,
        max_spans=settings.prompt_spans,
        max_words=settings.prompt_words,
        vocabulary=vocabulary,
    )
    tiers = TierPolicy(settings.tier_mode, settings.evidence_min_confidence)
    learned = rerank is not None and rerank.backend in LEARNED_RERANK_BACKENDS
    threshold = rerank.min_score_of if rerank is not None and learned else None
    replaces = rerank is not None and rerank.min_score_replaces_relevance
    return EvidenceStage(selector, answer_policy(settings), tiers, threshold, replaces)


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
        degraded=event.degraded,
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
