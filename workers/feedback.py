"""Readers' feedback on logged answers (SQL ``query_feedback``): the one module that writes and
reads it, and the labels the reranker's training reads from it.

``POST /v1/queries/{id}/feedback`` says whether an answer helped, and optionally which cited
passage (its citation number ``n``, ``[n]`` in the answer) or which evidence span (an index
into the answer's ``evidence`` list, 0 first) answered. One row per ``(request_id, key_id)``:
an API key's latest feedback on a query replaces its earlier one (last write wins; the row's
``created_at`` stays, ``updated_at`` moves), so a reader who changes their mind leaves one
label, not two that disagree.

Which passage a label is about (:func:`target`): the named passage, or the passage the named
span quotes; with neither, the passage the answer led with (its first evidence span's, else
its first citation), marked ``named=False`` (a weaker label: the reader judged the answer, not
a passage). Its text is copied from the index when the feedback arrives (the text the reader
saw, kept even if the document changes later), so training needs SQL only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.models import QueryFeedback, QueryLog, as_utc, utcnow
from topics.answers import Answer


class FeedbackError(ValueError):
    """Feedback that does not fit the answer it judges: ``field`` (``passage`` or
    ``sentence``) names a passage or span the answer does not have."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.reason = message


@dataclass(frozen=True, slots=True)
class Target:
    """The passage a label is about: citation number ``n``, its ``chunk_id`` and ``doc_id``,
    the named evidence span's text (``None``: no span named), and whether the reader named the
    passage or span (``named``) or it is the one the answer led with."""

    n: int
    chunk_id: str
    doc_id: str
    sentence_text: str | None
    named: bool


def target(answer: Answer, passage: int | None, sentence: int | None) -> Target | None:
    """The passage that feedback naming ``passage`` (a citation number ``n``) and/or
    ``sentence`` (an index into ``answer.evidence``, 0 first) is about; ``None`` when neither
    is named and the answer cites nothing (a refusal, a failure).

    Raises:
        FeedbackError: ``passage`` is not one of the answer's citation numbers, ``sentence``
            is past its evidence spans, or the span quotes another passage than ``passage``.
    """
    cited = {c.n: c for c in answer.citations}
    numbers = ", ".join(f"[{n}]" for n in sorted(cited)) or "nothing"
    if passage is not None and passage not in cited:
        raise FeedbackError("passage", f"the answer cites {numbers}; there is no [{passage}]")
    span = None
    if sentence is not None:
        if sentence >= len(answer.evidence):
            have = len(answer.evidence)
            raise FeedbackError(
                "sentence",
                f"the answer has {have} evidence span{'s' if have != 1 else ''} "
                f"(indices 0-{have - 1}); there is no {sentence}"
                if have
                else f"the answer has no evidence spans; there is no {sentence}",
            )
        span = answer.evidence[sentence]
        if passage is not None and span.n != passage:
            raise FeedbackError(
                "sentence", f"span {sentence} quotes passage [{span.n}], not [{passage}]"
            )
    named = passage is not None or span is not None
    n = passage if passage is not None else span.n if span is not None else _lead(answer)
    if n is None:
        return None
    if n in cited:
        chunk_id, doc_id = cited[n].chunk_id, cited[n].doc_id
    else:  # a span of a passage the citations leave out (never written so; kept safe)
        assert span is not None
        chunk_id, doc_id = span.chunk_id, span.doc_id
    return Target(n, chunk_id, doc_id, span.text if span is not None else None, named)


def _lead(answer: Answer) -> int | None:
    """The citation number of the passage ``answer`` led with: its first evidence span's, else
    its first citation's; ``None`` when it cites nothing."""
    if answer.evidence and answer.evidence[0].n in {c.n for c in answer.citations}:
        return answer.evidence[0].n
    return answer.citations[0].n if answer.citations else None


def record(
    sessions: sessionmaker[Session],
    *,
    tenant: str,
    request_id: str,
    key_id: int,
    helpful: bool,
    passage: int | None,
    sentence: int | None,
    comment: str | None,
    about: Target | None,
    passage_text: str | None,
) -> dict[str, Any]:
    """Store key ``key_id``'s feedback on ``request_id`` (a row of ``tenant``'s query log),
    replacing its earlier one; return it as :func:`of_query` shows it. ``about`` is the
    passage the label is about (:func:`target`), ``passage_text`` its text (``None``: gone
    from the index)."""
    now = utcnow()
    with sessions.begin() as session:
        row = session.get(QueryFeedback, (request_id, key_id))
        if row is None:
            row = QueryFeedback(request_id=request_id, key_id=key_id, created_at=now)
            session.add(row)
        row.tenant = tenant
        row.helpful = helpful
        row.passage = passage
        row.sentence = sentence
        row.comment = comment
        row.chunk_id = about.chunk_id if about is not None else None
        row.doc_id = about.doc_id if about is not None else None
        row.passage_text = passage_text
        row.sentence_text = about.sentence_text if about is not None else None
        row.updated_at = now
        session.flush()
        return _shown(row, key_id)


def _shown(row: QueryFeedback, key_id: int | None) -> dict[str, Any]:
    return {
        "helpful": row.helpful,
        "passage": row.passage,
        "sentence": row.sentence,
        "comment": row.comment,
        "mine": key_id is not None and row.key_id == key_id,
        "created_at": as_utc(row.created_at),
        "updated_at": as_utc(row.updated_at),
    }


def of_query(
    sessions: sessionmaker[Session], request_id: str, key_id: int | None = None
) -> list[dict[str, Any]]:
    """Every key's feedback on ``request_id``, oldest first, each as ``{helpful, passage,
    sentence, comment, mine, created_at, updated_at}`` (``mine``: given by key ``key_id``).
    The caller has checked that its key may read the query (:func:`workers.query_log.read`)."""
    stmt = (
        select(QueryFeedback)
        .where(QueryFeedback.request_id == request_id)
        .order_by(QueryFeedback.created_at, QueryFeedback.key_id)
    )
    with sessions() as session:
        return [_shown(row, key_id) for row in session.scalars(stmt)]


def tallies(sessions: sessionmaker[Session], request_ids: Sequence[str]) -> dict[str, list[int]]:
    """``{request_id: [helpful, not_helpful]}``: how many keys found each of ``request_ids``'
    answers helpful and not; a query without feedback is left out."""
    if not request_ids:
        return {}
    stmt = (
        select(QueryFeedback.request_id, QueryFeedback.helpful, func.count())
        .where(QueryFeedback.request_id.in_(list(request_ids)))
        .group_by(QueryFeedback.request_id, QueryFeedback.helpful)
    )
    out: dict[str, list[int]] = {}
    with sessions() as session:
        for rid, helpful, count in session.execute(stmt):
            out.setdefault(rid, [0, 0])[0 if helpful else 1] += int(count)
    return out


class FeedbackLabel(NamedTuple):
    """One stored label, in full: the question answered (``query_log.query``: a follow-up made
    standalone), the judged passage's text as the index held it, ``label`` (1.0 helpful, 0.0
    not), the evidence span's text when one was named, whether the reader named the passage
    or span (``named``; else it is the passage the answer led with), and where it came from."""

    question: str
    passage_text: str
    label: float
    sentence_text: str | None
    named: bool
    request_id: str
    chunk_id: str
    doc_id: str
    updated_at: dt.datetime


def feedback_labels(sessions: sessionmaker[Session], tenant: str) -> list[FeedbackLabel]:
    """Every label of ``tenant``'s feedback that is about a passage with known text, oldest
    first by ``(updated_at, request_id)``: one per feedback row (one per API key and query;
    two keys that judged the same passage are two labels, which may disagree). Feedback on
    an answer that cited nothing, or whose passage had left the index, has no passage and is
    left out."""
    stmt = (
        select(QueryFeedback, QueryLog.query)
        .join(QueryLog, QueryLog.request_id == QueryFeedback.request_id)
        .where(
            and_(
                QueryFeedback.tenant == tenant,
                QueryLog.tenant == tenant,
                QueryFeedback.passage_text.is_not(None),
                QueryLog.query != "",
            )
        )
        .order_by(QueryFeedback.updated_at, QueryFeedback.request_id, QueryFeedback.key_id)
    )
    with sessions() as session:
        return [
            FeedbackLabel(
                question=question,
                passage_text=row.passage_text or "",
                label=1.0 if row.helpful else 0.0,
                sentence_text=row.sentence_text,
                named=row.passage is not None or row.sentence is not None,
                request_id=row.request_id,
                chunk_id=row.chunk_id or "",
                doc_id=row.doc_id or "",
                updated_at=as_utc(row.updated_at),
            )
            for row, question in session.execute(stmt)
        ]


def feedback_pairs(sessions: sessionmaker[Session], tenant: str) -> list[tuple[str, str, float]]:
    """``tenant``'s feedback as cross-encoder training pairs ``(question, passage_text,
    label)``: ``label`` 1.0 where the reader found the answer helpful, 0.0 where not; the
    passage is the one the reader named (``passage``, or the passage of the named evidence
    ``sentence``), else the one the answer led with. What ``ragstream rerank train --tenant T``
    adds to its training data; :func:`feedback_labels` has the same labels with where each came
    from (``named`` tells a reader-named passage from an answer-level judgement).

    Args:
        sessions: the metadata store (``database_url``).
        tenant: the tenant whose feedback is read; no other tenant's rows are returned.

    Returns:
        One ``(question, passage_text, label)`` per stored feedback with a passage, oldest
        first; ``question`` is the question answered (a follow-up made standalone, what the
        reranker scored), ``passage_text`` the chunk's text as the index held it when the
        feedback came.
    """
    return [(f.question, f.passage_text, f.label) for f in feedback_labels(sessions, tenant)]
