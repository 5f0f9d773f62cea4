"""Feedback on logged answers (``workers/feedback.py``): which passage a label is about, the
refusals of passages and spans an answer does not have, last-write-wins per key, and the
pairs training reads, on a throwaway SQLite store."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from topics.answers import Answer
from topics.queries import QueryRequest
from topics.responses import Citation, EvidenceSpan, QueryResponse
from workers import feedback, query_log
from workers.feedback import FeedbackError, target

CITATIONS = (
    Citation(n=1, doc_id="ports", chunk_id="c-ports"),
    Citation(n=2, doc_id="vacuum", chunk_id="c-vacuum"),
)
EVIDENCE = (
    EvidenceSpan(n=2, chunk_id="c-vacuum", doc_id="vacuum", start=0, end=6, text="VACUUM"),
    EvidenceSpan(n=1, chunk_id="c-ports", doc_id="ports", start=4, end=8, text="5432"),
)


def _answer(citations: tuple[Citation, ...] = CITATIONS, evidence=EVIDENCE) -> Answer:  # type: ignore[no-untyped-def]
    return Answer(
        request_id="r1", tenant="acme", status="answered", answer="x", citations=citations,
        evidence=evidence,
    )  # fmt: skip


def test_a_named_passage_or_span_is_the_labels_passage() -> None:
    by_passage = target(_answer(), 1, None)
    assert by_passage is not None
    assert (by_passage.n, by_passage.chunk_id, by_passage.named) == (1, "c-ports", True)
    assert by_passage.sentence_text is None
    by_span = target(_answer(), None, 1)
    assert by_span is not None
    assert (by_span.n, by_span.chunk_id, by_span.sentence_text) == (1, "c-ports", "5432")
    both = target(_answer(), 2, 0)
    assert both is not None and (both.n, both.sentence_text) == (2, "VACUUM")


def test_without_a_name_the_label_is_about_the_passage_the_answer_led_with() -> None:
    led = target(_answer(), None, None)
    assert led is not None and (led.n, led.named) == (2, False)  # the first span's passage
    no_spans = target(_answer(evidence=()), None, None)
    assert no_spans is not None and no_spans.n == 1  # the first citation
    assert target(_answer(citations=(), evidence=()), None, None) is None  # a refusal


@pytest.mark.parametrize(
    ("passage", "sentence", "field", "says"),
    [
        (3, None, "passage", "the answer cites [1], [2]; there is no [3]"),
        (None, 2, "sentence", "2 evidence spans (indices 0-1); there is no 2"),
        (1, 0, "sentence", "span 0 quotes passage [2], not [1]"),
    ],
)
def test_a_passage_or_span_the_answer_lacks_is_refused_with_what_it_has(
    passage: int | None, sentence: int | None, field: str, says: str
) -> None:
    with pytest.raises(FeedbackError) as info:
        target(_answer(), passage, sentence)
    assert info.value.field == field and says in str(info.value), str(info.value)


def test_an_answer_without_citations_or_spans_names_none() -> None:
    bare = _answer(citations=(), evidence=())
    with pytest.raises(
        FeedbackError, match=r"passage: the answer cites nothing; there is no \[1\]"
    ):
        target(bare, 1, None)
    with pytest.raises(FeedbackError, match="sentence: the answer has no evidence spans"):
        target(bare, None, 0)


def _sessions(tmp_path: Path) -> sessionmaker[Session]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    upgrade_head(url)
    return make_session_factory(make_engine(url))


def _logged(sessions: sessionmaker[Session], tenant: str, question: str) -> str:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60)
    request = QueryRequest(tenant=tenant, query=question, deadline=deadline)
    query_log.log_pending(sessions, request)
    response = QueryResponse(
        tenant=tenant, request_id=request.request_id, status="answered", answer="x",
        citations=CITATIONS, evidence=EVIDENCE, tier="evidence",
    )  # fmt: skip
    with sessions.begin() as session:
        query_log.record_final(session, [response])
    return request.request_id


def _give(
    sessions: sessionmaker[Session],
    tenant: str,
    rid: str,
    key_id: int,
    helpful: bool,
    passage: int | None,
    text: str | None = "passage text",
) -> dict[str, object]:
    answer = query_log.read(sessions, tenant, rid)
    assert answer is not None
    return feedback.record(
        sessions, tenant=tenant, request_id=rid, key_id=key_id, helpful=helpful,
        passage=passage, sentence=None, comment=None, about=target(answer, passage, None),
        passage_text=text,
    )  # fmt: skip


def test_a_keys_feedback_again_replaces_its_earlier_one(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    rid = _logged(sessions, "acme", "Which port?")
    first = _give(sessions, "acme", rid, 7, False, 2)
    second = _give(sessions, "acme", rid, 7, True, 1)
    _give(sessions, "acme", rid, 8, True, None)
    shown = feedback.of_query(sessions, rid, key_id=7)
    assert [(f["helpful"], f["passage"], f["mine"]) for f in shown] == [
        (True, 1, True),
        (True, None, False),
    ]
    assert second["created_at"] == first["created_at"]
    assert second["updated_at"] >= first["updated_at"]  # type: ignore[operator]
    assert feedback.tallies(sessions, [rid, "unknown"]) == {rid: [2, 0]}


def test_feedback_pairs_hold_the_tenants_labels_only(tmp_path: Path) -> None:
    sessions = _sessions(tmp_path)
    rid = _logged(sessions, "acme", "Which port?")
    other = _logged(sessions, "globex", "Which port?")
    _give(sessions, "acme", rid, 1, True, 1, text="listens on 5432")
    _give(sessions, "acme", rid, 2, False, None, text="VACUUM reclaims")
    _give(sessions, "acme", rid, 3, True, 2, text=None)  # the chunk had left the index
    _give(sessions, "globex", other, 4, True, 1, text="globex text")
    assert feedback.feedback_pairs(sessions, "acme") == [
        ("Which port?", "listens on 5432", 1.0),
        ("Which port?", "VACUUM reclaims", 0.0),
    ]
    labels = feedback.feedback_labels(sessions, "acme")
    assert [(f.named, f.chunk_id) for f in labels] == [(True, "c-ports"), (False, "c-vacuum")]
    assert feedback.feedback_pairs(sessions, "globex") == [("Which port?", "globex text", 1.0)]
    assert feedback.feedback_pairs(sessions, "initech") == []
