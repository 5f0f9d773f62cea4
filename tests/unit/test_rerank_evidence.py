"""The rerank pool's evidence stage: evidence-tier answers at once, LLM tiers get the evidence,
a streamed request gets its evidence before any token, weak evidence is refused."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence

from api.models import QueryResult
from ragstream.settings import PoolSettings, RerankSettings
from topics.answers import NOT_IN_DOCUMENTS, Answer
from topics.queries import QueryRequest, Turn
from topics.registry import RERANKED_BY_TIER, RESPONSES, TOKENS
from topics.reranked import RerankedPassages
from topics.responses import QueryResponse
from topics.retrieved import Candidate, RetrievedCandidates
from topics.tokens import AnswerToken
from workers.evidence.answer import AnswerPolicy
from workers.evidence.select import EvidenceSelector
from workers.evidence.stage import EvidenceStage
from workers.pools.rerank import rerank_handler
from workers.retrieval.definitions import DefinitionHit
from workers.routing import TierPolicy
from workers.runtime.handler import Emit

LOCKS = (
    "deadlock_timeout (integer)\n"
    "This is the amount of time to wait on a lock before checking to see if there is a "
    "deadlock condition. The default is one second (1s), which is probably about the smallest "
    "value you would want in practice."
)
OTHER = "The planner estimates the cost of each plan. Costs are arbitrary units."
DEEP = "Setting shared_buffers too high wastes memory. The default is 128 megabytes (128MB)."


class KeepOrder:
    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        return [-float(i) for i in range(len(pairs))]


def _candidate(chunk_id: str, text: str) -> Candidate:
    return Candidate(chunk_id=chunk_id, doc_id=f"doc-{chunk_id}", text=text, title="t", score=1.0)


def _event(
    query: str, route: str = "auto", stream: bool = False, top_k: int = 2
) -> RetrievedCandidates:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    request = QueryRequest(
        tenant="t",
        query=query,
        deadline=deadline,
        route=route,
        stream=stream,
        top_k=top_k,  # type: ignore[arg-type]
    )
    candidates = (_candidate("c1", OTHER), _candidate("c2", LOCKS), _candidate("c3", DEEP))
    return RetrievedCandidates(tenant="t", request=request, candidates=candidates, tier="small")


def _run(events: list[RetrievedCandidates], mode: str = "evidence") -> list[Emit]:
    # One quoted span, so that the answer's citation is the one passage it quotes.
    policy = AnswerPolicy(max_spans=1)
    stage = EvidenceStage(EvidenceSelector(None), policy, TierPolicy(mode))  # type: ignore[arg-type]
    handler = rerank_handler(KeepOrder(), RerankSettings(), pool=PoolSettings(), evidence=stage)
    out = handler.fn(events)
    assert all(isinstance(o, Emit) for o in out)
    return list(out)  # type: ignore[arg-type]


def test_evidence_tier_answers_with_quote_citations_offsets_and_trace() -> None:
    [emit] = _run([_event("What is the default deadlock timeout?")])
    assert emit.topic == RESPONSES
    response = emit.event
    assert isinstance(response, QueryResponse) and response.tier == "evidence"
    assert "(1s)" in response.answer and "[2]" in response.answer
    assert [c.chunk_id for c in response.citations] == ["c2"]
    best = response.evidence[0]
    assert LOCKS[best.start : best.end] == best.text and best.chunk_id == "c2"
    stages = [t.stage for t in response.trace]
    assert stages[-2:] == ["rerank", "evidence"]
    assert response.trace[-1].detail["tier"] == "evidence"


def test_an_identifier_below_the_top_k_is_promoted_and_quoted() -> None:
    [emit] = _run([_event("What does shared_buffers default to?", top_k=1)])
    assert isinstance(emit.event, QueryResponse)
    assert [c.chunk_id for c in emit.event.citations] == ["c3"]  # the third candidate
    assert "(128MB)" in emit.event.answer


def test_a_missing_identifier_is_a_refusal_without_an_llm() -> None:
    [emit] = _run([_event("Which columns does pg_stat_io have?")], mode="llm")
    assert emit.topic == RESPONSES and isinstance(emit.event, QueryResponse)
    assert emit.event.answer == NOT_IN_DOCUMENTS
    assert emit.event.trace[-1].detail["route"].startswith("missing:pg_stat_io")


def test_llm_tier_gets_the_evidence_and_a_stream_gets_it_first() -> None:
    out = _run([_event("How long is the deadlock timeout?", stream=True)], mode="llm")
    assert [o.topic for o in out] == [TOKENS, RERANKED_BY_TIER["small"]]
    token, passages = out[0].event, out[1].event
    assert isinstance(token, AnswerToken) and token.kind == "evidence" and token.seq == 0
    assert isinstance(passages, RerankedPassages) and passages.tier == "small"
    assert passages.evidence and token.evidence == passages.evidence
    assert passages.route_reason == "policy"
    # The evidence answer is composed here, once, and carried for the LLM tier's fallback.
    assert passages.fallback is not None and not passages.fallback.refused
    cited = passages.fallback.cited
    assert cited and all(f"[{n}]" in passages.fallback.text for n in cited)


def test_a_forced_route_wins() -> None:
    [emit] = _run([_event("How long is the deadlock timeout?", route="large")])
    assert emit.topic == RERANKED_BY_TIER["large"]
    assert isinstance(emit.event, RerankedPassages) and emit.event.route_reason == "forced"


def test_a_forced_llm_tier_never_skips_the_refusal_gate() -> None:
    [emit] = _run([_event("How do I use the pg_stat_io view?", route="small")])
    assert emit.topic == RESPONSES
    assert isinstance(emit.event, QueryResponse) and emit.event.tier == "evidence"
    assert emit.event.answer == NOT_IN_DOCUMENTS


def test_the_tier_is_decided_once_with_its_reason_in_the_trace() -> None:
    """The retrieval pool's router only suggests; the decision is traced once, by the stage that
    makes it: the evidence stage, or the rerank stage when no evidence stage runs."""
    suggested = _event("How long is the deadlock timeout?").model_copy(
        update={"tier": "large", "route_reason": "cue"}
    )
    [emit] = _run([suggested], mode="evidence")
    stages = {t.stage: dict(t.detail) for t in emit.event.trace}
    assert "tier" not in stages["rerank"]
    assert stages["evidence"]["tier"] == "evidence" and stages["evidence"]["route"] == "policy"
    handler = rerank_handler(KeepOrder(), RerankSettings(), pool=PoolSettings())
    [plain] = handler.fn([suggested])
    assert isinstance(plain, Emit) and plain.topic == RERANKED_BY_TIER["large"]
    assert isinstance(plain.event, RerankedPassages) and plain.event.route_reason == "cue"
    [rerank] = [t for t in plain.event.trace if t.stage == "rerank"]
    assert rerank.detail["tier"] == "large" and rerank.detail["route"] == "cue"


def _definition(
    doc_id: str, name: str, signature: str, summary: str, *, proposed: bool = True
) -> Candidate:
    hit = DefinitionHit(
        entry_id=f"def-{name}",
        doc_id=doc_id,
        version=1,
        source="runtime-config-locks.html",
        name=name,
        kind="setting",
        signature=signature,
        summary=summary,
        example="",
        anchor=f"GUC-{name.upper()}",
        score=0.03,
    )
    return hit.candidate(proposed=proposed)


def _asking(*definitions: Candidate) -> RetrievedCandidates:
    event = _event("Which setting controls how long to wait on a lock before a deadlock check?")
    return event.model_copy(update={"definitions": definitions})


def test_a_name_question_opens_with_the_proposed_definition_its_passages_agree_on() -> None:
    entry = _definition(
        "doc-c2",
        "deadlock_timeout",
        "deadlock_timeout (integer)",
        "This is the amount of time to wait on a lock before checking for a deadlock.",
    )
    stranger = _definition("doc-elsewhere", "lock_timeout", "lock_timeout (integer)", "Abort.")
    [emit] = _run([_asking(stranger, entry)])
    response = emit.event
    assert isinstance(response, QueryResponse) and response.tier == "evidence"
    # The proposed entry whose page a passage comes from, not the first one, from another page.
    assert response.answer.startswith("deadlock_timeout (integer): This is the amount"), (
        response.answer
    )
    assert "lock_timeout (integer)" not in response.answer.replace("deadlock_timeout", "")
    n = len(response.citations)
    assert f"[{n}]" in response.answer and response.citations[-1].chunk_id == "def-deadlock_timeout"
    lead = response.evidence[0]
    assert lead.chunk_id == "def-deadlock_timeout"
    assert entry.text[lead.start : lead.end] == lead.text
    assert len(response.answer.split()) <= AnswerPolicy().max_words


def test_a_definition_from_no_page_of_the_passages_is_never_shown() -> None:
    stranger = _definition("doc-elsewhere", "lock_timeout", "lock_timeout (integer)", "Abort.")
    [emit] = _run([_asking(stranger)])
    response = emit.event
    assert isinstance(response, QueryResponse)
    assert "lock_timeout" not in response.answer.replace("deadlock_timeout", "")
    assert all(c.chunk_id != "def-lock_timeout" for c in response.citations)


def test_a_question_that_asks_for_no_name_is_answered_from_its_passages() -> None:
    entry = _definition("doc-c2", "deadlock_timeout", "deadlock_timeout (integer)", "Wait.")
    event = _event("What is the default deadlock timeout?").model_copy(
        update={"definitions": (entry,)}
    )
    [emit] = _run([event])
    response = emit.event
    assert isinstance(response, QueryResponse)
    assert "(1s)" in response.answer and not response.answer.startswith("deadlock_timeout")


def test_a_searched_definition_opens_the_answer_only_when_its_quote_names_it() -> None:
    entry = _definition(
        "doc-c2", "deadlock_timeout", "deadlock_timeout (integer)", "Wait.", proposed=False
    )
    [emit] = _run([_asking(entry)])
    response = emit.event
    assert isinstance(response, QueryResponse)
    assert not response.answer.startswith("deadlock_timeout (integer): Wait."), response.answer


def test_a_searched_definition_the_quote_names_opens_the_answer() -> None:
    entry = _definition(
        "doc-c2", "deadlock", "deadlock", "A cycle of sessions each waiting.", proposed=False
    )
    [emit] = _run([_asking(entry)])
    response = emit.event
    assert isinstance(response, QueryResponse)
    # The quote of doc-c2 ("... to see if there is a deadlock condition.") names it.
    assert response.answer.startswith("deadlock: A cycle of sessions each waiting."), (
        response.answer
    )


def test_the_definition_lead_is_not_quoted_again_from_its_own_passage() -> None:
    summary = (
        "This is the amount of time to wait on a lock before checking to see if there is a "
        "deadlock condition."
    )
    entry = _definition("doc-c2", "deadlock_timeout", "deadlock_timeout (integer)", summary)
    [emit] = _run([_asking(entry)])
    response = emit.event
    assert isinstance(response, QueryResponse)
    assert response.answer.startswith(f"deadlock_timeout (integer): {summary}"), response.answer
    assert response.answer.count("This is the amount of time") == 1, response.answer


def test_a_follow_up_is_not_opened_with_the_definition_its_last_answer_named() -> None:
    entry = _definition(
        "doc-c2",
        "deadlock_timeout",
        "deadlock_timeout (integer)",
        "This is the amount of time to wait on a lock before checking for a deadlock.",
    )
    asking = _asking(entry)
    first = "deadlock_timeout (integer): the time to wait before a check [1]"
    turn = Turn(question="Which setting sets the deadlock check delay?", answer=first)
    request = asking.request.model_copy(update={"conversation": (turn,)})
    [emit] = _run([asking.model_copy(update={"request": request})])
    response = emit.event
    assert isinstance(response, QueryResponse)
    assert not response.answer.startswith("deadlock_timeout (integer): This is"), response.answer
    assert all(c.chunk_id != "def-deadlock_timeout" for c in response.citations)


def test_a_question_whose_proposals_were_shed_is_answered_and_says_it_is_degraded() -> None:
    event = _asking().model_copy(update={"degraded": ("propose",)})
    [emit] = _run([event])
    response = emit.event
    assert isinstance(response, QueryResponse) and response.status == "answered"
    assert response.degraded == ("propose",)
    answer = Answer.of(response)
    assert answer.degraded == ("propose",)
    assert QueryResult.render(answer).degraded == ["propose"]
    [full] = _run([_asking()])
    assert isinstance(full.event, QueryResponse) and full.event.degraded == ()
