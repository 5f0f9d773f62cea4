"""CRAG-style answer outcomes and answer-in-top-k containment of the evaluation (pure)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from bench.evaluation.answers import Answer
from bench.evaluation.metrics import (
    ACCURATE,
    HALLUCINATED,
    MISSING,
    Judged,
    answer_metrics,
    answer_passage_rank,
    containment_metrics,
    crag_outcome,
    retrieval_metrics,
)
from bench.evaluation.questions import EvalQuestion
from bench.evaluation.report import (
    EvalReport,
    Headline,
    ModeReport,
    PassagesReport,
    QuestionRecord,
    summary_line,
    to_markdown,
    write_report,
)
from bench.evaluation.run import judge, served_passages
from topics.answers import NOT_IN_DOCUMENTS
from topics.queries import QueryRequest
from topics.retrieved import Candidate

PY = "python-3.11"


def _q(kind: str, patterns: tuple[str, ...] = ("getcwd",)) -> EvalQuestion:
    pages = () if kind in ("absent", "off_topic") else ("library/os.html",)
    return EvalQuestion(
        id=f"q-{kind}",
        corpus=PY,
        question="Which function returns the working directory?",
        answer_patterns=patterns,
        expected_pages=pages,
        kind=kind,  # type: ignore[arg-type]
    )


# -- CRAG outcomes ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("judged", "outcome"),
    [
        (Judged(answerable=True, correct=True, refused=False), ACCURATE),
        # right words in an answer that also says the passages lack something: still right
        (Judged(answerable=True, correct=True, refused=True), ACCURATE),
        (Judged(answerable=True, correct=False, refused=False), HALLUCINATED),
        (Judged(answerable=True, correct=False, refused=True), MISSING),
        (Judged(answerable=True, correct=False, refused=False, error=True), MISSING),
        (Judged(answerable=False, correct=True, refused=True, kind="absent"), ACCURATE),
        # a refusal of an absent question whose patterns miss the refusal's words
        (Judged(answerable=False, correct=False, refused=True, kind="absent"), ACCURATE),
        (Judged(answerable=False, correct=False, refused=False, kind="absent"), HALLUCINATED),
        (Judged(answerable=False, correct=False, refused=True, kind="off_topic"), ACCURATE),
        (Judged(answerable=False, correct=False, refused=False, kind="off_topic"), HALLUCINATED),
        (Judged(answerable=False, correct=False, refused=False, error=True), MISSING),
    ],
)
def test_each_answer_is_accurate_hallucinated_or_missing(judged: Judged, outcome: str) -> None:
    assert crag_outcome(judged) == outcome


def test_the_crag_score_is_the_accurate_rate_minus_the_hallucination_rate() -> None:
    js = [
        Judged(answerable=True, correct=True, refused=False, kind="factual"),
        Judged(answerable=True, correct=True, refused=False, kind="factual"),
        Judged(answerable=True, correct=False, refused=False, kind="howto"),
        Judged(answerable=True, correct=False, refused=True, kind="howto"),
        Judged(answerable=False, correct=False, refused=False, kind="absent"),
        Judged(answerable=False, correct=False, refused=True, kind="absent"),
    ]
    m = answer_metrics(js)
    assert (m.accurate, m.hallucinated, m.missing) == (3, 2, 1)
    assert m.accurate + m.hallucinated + m.missing == m.n == 6
    assert m.correct == 2  # the refused absent question's patterns did not match
    assert m.hallucination_rate == pytest.approx(2 / 6, abs=1e-4)
    assert m.missing_rate == pytest.approx(1 / 6, abs=1e-4)
    assert m.crag_score == pytest.approx((3 - 2) / 6, abs=1e-4)
    # all hallucinated: the score's floor is -1; an empty group has no score
    assert answer_metrics([(True, False, False)] * 3).crag_score == -1.0
    assert answer_metrics([]).crag_score is None


def test_judging_an_answer_gives_its_crag_outcome() -> None:
    refusal = Answer(NOT_IN_DOCUMENTS, None, "evidence", "refusal")
    quote = Answer(
        "os.getcwd() returns the current working directory. [1]", None, "evidence", "evidence"
    )
    failed = Answer("timeout", "llm_timeout", "small", "error")
    assert crag_outcome(judge(_q("factual"), quote)) == ACCURATE
    assert crag_outcome(judge(_q("factual"), refusal)) == MISSING
    assert crag_outcome(judge(_q("factual"), failed)) == MISSING
    assert judge(_q("factual"), failed).error
    assert crag_outcome(judge(_q("absent", ("not contain",)), quote)) == HALLUCINATED
    # the author's refusal pattern misses the system's sentence: wrong by accuracy, accurate
    # by CRAG (the question was refused, as it should be)
    odd = judge(_q("absent", ("no mention",)), refusal)
    assert not odd.correct and crag_outcome(odd) == ACCURATE


# -- answer in top k passages ----------------------------------------------------------------


def test_the_answer_rank_is_that_of_the_first_passage_an_answer_pattern_matches() -> None:
    passages = ["os\nchdir(path) changes it", "os\nUse os.GETCWD() for it", "getcwd again"]
    assert answer_passage_rank(passages, [r"\bgetcwd\b"]) == 2  # case-insensitive
    assert answer_passage_rank(passages, [r"nothing", r"changes"]) == 1
    assert answer_passage_rank(passages, [r"sqlite"]) is None
    assert answer_passage_rank([], [r"getcwd"]) is None
    # each passage is matched on its own: a pattern never spans two
    assert answer_passage_rank(["current working", "directory"], [r"working\s+directory"]) is None


def test_containment_at_k_is_the_share_of_answer_ranks_within_k() -> None:
    m = containment_metrics([1, 3, None, 5, 6])
    assert (m.n, m.at_1, m.at_3, m.at_5) == (5, 0.2, 0.4, 0.6)
    assert m.at == {1: 0.2, 3: 0.4, 5: 0.6}
    empty = containment_metrics([])
    assert empty.n == 0 and empty.at_3 is None


def _c(chunk_id: str, text: str, doc_id: str = "") -> Candidate:
    return Candidate(chunk_id=chunk_id, doc_id=doc_id or chunk_id, text=text, score=1.0)


def _request(query: str) -> QueryRequest:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    return QueryRequest(tenant="t", query=query, deadline=deadline, top_k=2)


def test_the_passages_sent_on_are_the_top_k_then_promoted_identifiers() -> None:
    ranked = [_c("a", "alpha"), _c("b", "beta"), _c("c", "gamma")]
    # a fused candidate below the top K holds the identifier the question names
    fused = [*ranked, _c("d", "use shutil.copytree(src, dst)")]
    request = _request("What does shutil.copytree do?")
    (served,) = served_passages([request], [ranked], [fused], [[]], top_k=2)
    assert [p.chunk_id for p in served] == ["a", "b", "d"]
    assert answer_passage_rank([p.text for p in served], ["copytree"]) == 3
    plain = _request("What is alpha?")
    (served,) = served_passages([plain], [ranked], [fused], [[]], top_k=2)
    assert [p.chunk_id for p in served] == ["a", "b"]


# -- the report ------------------------------------------------------------------------------


def _report() -> EvalReport:
    r = retrieval_metrics([1, 4])
    c = containment_metrics([1, None])
    a = answer_metrics(
        [
            Judged(answerable=True, correct=True, refused=False, kind="factual"),
            Judged(answerable=True, correct=False, refused=False, kind="factual"),
            Judged(answerable=False, correct=False, refused=True, kind="absent"),
        ]
    )
    from bench.evaluation.report import AnswersReport

    return EvalReport(
        questions_file="q.jsonl",
        n_questions=3,
        tenant="t",
        index_alias="a",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        default_mode="hybrid+none",
        config={"top_k": 10},
        headline=Headline(
            hit_at_5=None, mrr_at_10=None, answer_accuracy=None, absent_refusal_rate=None
        ),
        modes={
            "hybrid+none": ModeReport(
                overall=r, by_kind={"factual": r}, by_corpus={PY: r}, seconds_per_question=0.1
            )
        },
        skipped_modes={},
        answers=AnswersReport(
            mode="hybrid+none",
            top_k=10,
            overall=a,
            by_kind={"factual": answer_metrics([(True, True, False), (True, False, False)])},
            by_corpus={PY: a},
            seconds_per_question=0.2,
        ),
        passages=PassagesReport(
            mode="hybrid+none", top_k=10, overall=c, by_kind={"factual": c}, by_corpus={PY: c}
        ),
        questions=[
            QuestionRecord(
                id="SECRET-ID",
                corpus=PY,
                kind="factual",
                question="SECRET-Q",
                expected_pages=["library/os.html"],
                ranks={"hybrid+none": 1},
                top_pages=[],
                answer_rank=1,
            )
        ],
    ).with_headline()


def test_the_report_shows_retrieval_containment_and_crag_side_by_side(tmp_path: Path) -> None:
    r = _report()
    h = r.headline
    assert (h.hit_at_1, h.answer_in_top_1, h.answer_in_top_5) == (0.5, 0.5, 0.5)
    assert h.crag_score == pytest.approx(1 / 3, abs=1e-4)  # 2 accurate, 1 hallucinated
    assert h.hallucination_rate == pytest.approx(1 / 3, abs=1e-4) and h.missing_rate == 0.0
    md = to_markdown(r)
    assert "| group | n | hit@1 | MRR@10 | answer in top 1 | top 3 | top 5 | accuracy " in md
    assert "| all | 3 | 0.500 | 0.625 | 0.500 | 0.500 | 0.500 | 0.333 (1/3) | 0.333 " in md
    assert "| kind factual | 2 | 0.500 | 0.625 | 0.500 |" in md
    assert "answer in top 1/3/5 passages 0.500/0.500/0.500" in summary_line(r)
    assert "CRAG score 0.333 (hallucinated 1, missing 0)" in summary_line(r)
    # a blind set stays blind: the aggregates stay, no question's record is written
    blind = r.aggregate_only()
    assert blind.passages == r.passages and blind.headline == r.headline
    json_path, md_path = write_report(blind, tmp_path / "out", side_by_side=False)
    written = json_path.read_text() + md_path.read_text()
    assert "SECRET" not in written and '"crag_score"' in written and "answer in top 1" in written
    assert "SECRET" in r.model_dump_json()  # the check above can fail
    assert EvalReport.model_validate_json(json_path.read_text()) == blind
