"""The evaluation's metrics, page mapping, question files and report (pure, no services)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.evaluation.answers import Answer
from bench.evaluation.metrics import (
    answer_metrics,
    first_relevant_rank,
    group_by,
    hit_at,
    matches_any,
    reciprocal_rank,
    retrieval_metrics,
)
from bench.evaluation.modes import ALL_MODES, DEFAULT_MODES, plan_modes, rerank_text
from bench.evaluation.questions import (
    CORPUS_ROOTS,
    SAMPLE_QUESTIONS,
    EvaluationError,
    PageRef,
    QuestionFileError,
    load_questions,
    page_of,
    parse_roots,
)
from bench.evaluation.report import (
    EvalReport,
    Headline,
    ModeReport,
    QuestionRecord,
    summary_line,
    to_markdown,
    write_report,
)
from ragstream.settings import LlmSettings, RerankSettings, Settings
from replay.measures import is_refusal
from topics.answers import NOT_IN_DOCUMENTS
from topics.retrieved import Candidate
from workers.pools.rerank import _passage

PY, PG = "python-3.11", "postgresql-15"


# -- ranks, hit@k, MRR ---------------------------------------------------------------------


def test_rank_is_that_of_the_first_chunk_from_an_expected_page() -> None:
    pages = [PageRef(PY, "library/os.html"), None, PageRef(PY, "library/io.html")]
    pages += [PageRef(PY, "library/io.html")]
    assert first_relevant_rank(pages, PY, ["library/io.html", "tutorial/io.html"]) == 3
    assert first_relevant_rank(pages, PY, ["library/os.html"]) == 1
    assert first_relevant_rank(pages, PY, ["library/sys.html"]) is None
    assert first_relevant_rank([], PY, ["library/os.html"]) is None


def test_a_page_of_the_same_name_in_the_other_corpus_is_no_hit() -> None:
    pages = [PageRef(PG, "index.html"), PageRef(PY, "index.html")]
    assert first_relevant_rank(pages, PY, ["index.html"]) == 2
    assert first_relevant_rank(pages, PG, ["index.html"]) == 1
    assert first_relevant_rank(pages[:1], PY, ["index.html"]) is None


def test_hit_at_k_and_reciprocal_rank_cut_offs() -> None:
    assert hit_at(1, 1) and hit_at(5, 5) and not hit_at(6, 5) and not hit_at(None, 10)
    assert reciprocal_rank(1) == 1.0
    assert reciprocal_rank(4) == 0.25
    assert reciprocal_rank(10) == pytest.approx(0.1)
    assert reciprocal_rank(11) == 0.0
    assert reciprocal_rank(None) == 0.0
    assert reciprocal_rank(3, k=2) == 0.0


def test_retrieval_metrics_of_known_ranks() -> None:
    m = retrieval_metrics([1, 3, None, 12])
    assert m.n == 4
    assert m.hit_at_1 == 0.25
    assert m.hit_at[3] == 0.5
    assert m.hit_at_5 == 0.5
    assert m.hit_at_10 == 0.5
    assert m.hit_at[20] == 0.75
    assert m.mrr_at_10 == pytest.approx((1 + 1 / 3) / 4, abs=1e-4)


def test_retrieval_metrics_of_no_questions_are_none_not_zero() -> None:
    m = retrieval_metrics([])
    assert m.n == 0 and m.hit_at_5 is None and m.mrr_at_10 is None


# -- answers ---------------------------------------------------------------------------------


def test_patterns_match_anywhere_case_insensitively() -> None:
    assert matches_any("Use the EXPLAIN command [1].", [r"\bexplain\b"])
    assert matches_any("It is scram-sha-256.", [r"md5", r"SCRAM-SHA-256"])
    assert not matches_any("Use ANALYZE.", [r"\bexplain\b"])
    assert not matches_any("", [r".+"])


def test_citation_guard_of_a_numeric_pattern() -> None:
    # the sample set's pickle pattern must not count a citation "[4]" as the answer 4
    patterns = [r"(?<!\[)\b4\b(?!\])"]
    assert matches_any("The default protocol is 4 [2].", patterns)
    assert not matches_any("The default protocol is 5 [4].", patterns)


@pytest.mark.parametrize(
    "answer",
    [
        NOT_IN_DOCUMENTS,
        "the documents do not contain the answer",
        "The passages do not mention pg_combinebackup.",
        "This function is not described in the context.",
        "There is no information about uuidv7 in the passages.",
        "I cannot answer that from these passages.",
        "I don't know.",
    ],
)
def test_refusals(answer: str) -> None:
    assert is_refusal(answer)


@pytest.mark.parametrize(
    "answer",
    [
        "The server listens on port 5432 by default [1].",
        "A tuple does not contain mutable state by itself.",
        "Use os.getcwd() [2].",
        "",
    ],
)
def test_answers_that_are_not_refusals(answer: str) -> None:
    assert not is_refusal(answer)


def test_an_empty_completion_is_told_from_a_refusal_the_model_wrote() -> None:
    # The generator judges every completion; an empty one is replaced by the evidence answer
    # and says so in its trace ("judged"), which the evaluation reads.
    assert Answer("quoted evidence [1]", None, "small", "fallback", judged="empty").empty
    assert Answer("quoted evidence [1]", None, "small", "fallback", judged="repeated").empty
    # the model wrote the sentence
    assert not Answer(NOT_IN_DOCUMENTS, None, "small", "refusal").empty
    assert not Answer("It is 4 [1].", None, "small", "llm", judged="length_cut").empty
    assert not Answer("timed out", "BACKEND_UNAVAILABLE", "small", "error").empty


def test_answer_metrics_split_answerable_and_absent() -> None:
    # (answerable, correct, refused)
    judged = [
        (True, True, False),
        (True, False, True),
        (True, False, False),
        (False, True, True),
        (False, False, False),
    ]
    m = answer_metrics(judged)
    assert m.n == 5 and m.correct == 2
    assert m.answer_accuracy == 0.4
    assert m.answerable_accuracy == pytest.approx(1 / 3, abs=1e-4)
    assert m.absent_n == 2
    assert m.absent_refusal_rate == 0.5
    assert m.false_refusal_rate == pytest.approx(1 / 3, abs=1e-4)
    assert answer_metrics(judged[:3]).absent_refusal_rate is None


def test_group_by_sorts_groups_and_keeps_order_within() -> None:
    items = [("pg", 1), ("py", 2), ("pg", 3), ("absent", 4)]
    groups = group_by(items, lambda x: x[0])
    assert list(groups) == ["absent", "pg", "py"]
    assert groups["pg"] == [("pg", 1), ("pg", 3)]


# -- pages -----------------------------------------------------------------------------------


def test_page_of_maps_paths_under_each_manual_root() -> None:
    assert page_of("/usr/share/doc/python3.11/html/library/os.html") == PageRef(
        PY, "library/os.html"
    )
    assert page_of("/usr/share/doc/postgresql-doc-15/html/runtime-config-locks.html") == PageRef(
        PG, "runtime-config-locks.html"
    )
    assert page_of("file:///usr/share/doc/python3.11/html/index.html") == PageRef(PY, "index.html")


def test_page_of_maps_a_sphinx_source_to_its_page() -> None:
    root = "/usr/share/doc/python3.11/html/_sources/"
    assert page_of(root + "library/os.rst.txt") == PageRef(PY, "library/os.html")
    assert page_of(root + "library/os.path.rst.txt") == PageRef(PY, "library/os.path.html")


def test_page_of_outside_the_roots_is_none() -> None:
    assert page_of("/usr/share/doc/python3.12/html/library/os.html") is None
    assert page_of("/usr/share/doc/python3.11/htmlx/library/os.html") is None
    assert page_of("library/os.html") is None
    assert page_of("kb://acme/wal") is None
    assert page_of("") is None


def test_parse_roots() -> None:
    assert parse_roots([]) == dict(CORPUS_ROOTS)
    assert parse_roots(["a=/x/html"]) == {"a": Path("/x/html")}
    with pytest.raises(EvaluationError):
        parse_roots(["a=relative/html"])
    with pytest.raises(EvaluationError):
        parse_roots(["/x/html"])


# -- question files --------------------------------------------------------------------------


def _line(**over: object) -> str:
    row: dict[str, object] = {
        "id": "q1",
        "corpus": PY,
        "question": "What?",
        "answer_patterns": ["x"],
        "expected_pages": ["library/os.html"],
        "kind": "factual",
    }
    row.update(over)
    return json.dumps(row)


def test_a_refusal_question_needs_no_pattern_and_a_turn_stands_for_its_question(
    tmp_path: Path,
) -> None:
    f = tmp_path / "q.jsonl"
    turn = {"question": "How do I read a CSV file?", "answer": "csv.reader"}
    f.write_text(
        _line(kind="absent", expected_pages=[], answer_patterns=[])
        + "\n"
        + _line(id="q2", kind="followup", history=[turn, "And write one?"])
        + "\n"
    )
    absent, followup = load_questions(f)
    assert absent.answer_patterns == () and not absent.answerable
    assert followup.history == ("How do I read a CSV file?", "And write one?")


def test_load_questions_reads_lines_and_skips_blanks(tmp_path: Path) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text(_line() + "\n\n" + _line(id="q2", kind="absent", expected_pages=[]) + "\n")
    qs = load_questions(f)
    assert [q.id for q in qs] == ["q1", "q2"]
    assert qs[0].answerable and not qs[1].answerable


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ("{not json", ":2:"),
        (_line(id="q1"), "duplicate id"),
        (_line(id="q3", answer_patterns=["(unclosed"]), ":2:"),
        (_line(id="q4", kind="trivia"), ":2:"),
        (_line(id="q5", extra=1), ":2:"),
        (_line(id="q6", answer_patterns=[]), ":2:"),  # only a refusal question may have none
        (_line(id="q7", kind="followup", history=[{"answer": "a"}]), ":2:"),
    ],
)
def test_load_questions_names_the_bad_line(tmp_path: Path, bad: str, fragment: str) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text(_line() + "\n" + bad + "\n")
    with pytest.raises(QuestionFileError, match=fragment):
        load_questions(f)


def test_an_empty_question_file_is_an_error(tmp_path: Path) -> None:
    f = tmp_path / "q.jsonl"
    f.write_text("\n")
    with pytest.raises(QuestionFileError, match="no questions"):
        load_questions(f)


def test_sample_set_covers_both_manuals_and_the_kinds() -> None:
    qs = load_questions(SAMPLE_QUESTIONS)
    assert len(qs) >= 10
    assert {q.corpus for q in qs} == set(CORPUS_ROOTS)
    for corpus in CORPUS_ROOTS:
        kinds = {q.kind for q in qs if q.corpus == corpus}
        assert {"factual", "howto", "absent"} <= kinds, corpus
    assert all(q.answerable == (q.kind != "absent") for q in qs)


def test_sample_set_expected_pages_exist_in_the_manuals() -> None:
    roots = {c: r for c, r in CORPUS_ROOTS.items() if r.is_dir()}
    if not roots:
        pytest.skip("the manuals are not installed (make docs)")
    for q in load_questions(SAMPLE_QUESTIONS):
        if q.corpus in roots:
            for page in q.expected_pages:
                assert (roots[q.corpus] / page).is_file(), (q.id, page)


# -- modes -----------------------------------------------------------------------------------


def test_rerank_text_is_what_the_rerank_pool_scores() -> None:
    with_title = Candidate(chunk_id="c", doc_id="d", text="body", title="T", score=1.0)
    without = Candidate(chunk_id="c", doc_id="d", text="body", score=1.0)
    assert rerank_text(with_title) == _passage(with_title) == "T\nbody"
    assert rerank_text(without) == _passage(without) == "body"


def test_plan_modes_skips_what_cannot_run_and_rejects_unknown_modes() -> None:
    settings = Settings(
        rerank=RerankSettings(backend="none", model=None, onnx_model="no-such-model"),
        llm=LlmSettings(host="127.0.0.1", port=9),  # discard port: nothing listens
    )
    plan = plan_modes(ALL_MODES, settings)
    assert plan.runnable == ("bm25", "knn", "hybrid", "hybrid+none")
    assert set(plan.skipped) == {"hybrid+llm", "hybrid+cross-encoder", "hybrid+onnx"}
    assert "rerank.model" in plan.skipped["hybrid+cross-encoder"]
    assert "no-such-model" in plan.skipped["hybrid+onnx"]
    # Unless asked, the LLM and ONNX rerankers are not measured (minutes a set on two cores).
    assert plan_modes(DEFAULT_MODES, settings).runnable == plan.runnable
    assert {"hybrid+llm", "hybrid+onnx"}.isdisjoint(DEFAULT_MODES)
    assert set(DEFAULT_MODES) < set(ALL_MODES)
    with pytest.raises(ValueError, match="unknown mode"):
        plan_modes(["bm25", "sparse"], settings)


# -- report ----------------------------------------------------------------------------------


def _report() -> EvalReport:
    def mode(ranks: list[int | None]) -> ModeReport:
        m = retrieval_metrics(ranks)
        return ModeReport(
            overall=m, by_kind={"factual": m}, by_corpus={PY: m}, seconds_per_question=0.01
        )

    return EvalReport(
        questions_file="q.jsonl",
        n_questions=2,
        tenant="t",
        index_alias="a",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        default_mode="hybrid+none",
        config={"top_k": 5},
        headline=Headline(
            hit_at_5=None, mrr_at_10=None, answer_accuracy=None, absent_refusal_rate=None
        ),
        modes={"bm25": mode([1, None]), "hybrid+none": mode([2, 6])},
        skipped_modes={"hybrid+llm": "down"},
        answers=None,
        questions=[
            QuestionRecord(
                id="q1",
                corpus=PY,
                kind="factual",
                question="?",
                expected_pages=["a.html"],
                ranks={"bm25": 1, "hybrid+none": 2},
                top_pages=[],
            )
        ],
    ).with_headline()


def test_headline_is_the_default_mode() -> None:
    r = _report()
    assert r.headline.hit_at_5 == 0.5  # ranks 2 and 6 of hybrid+none
    assert r.headline.mrr_at_10 == pytest.approx((0.5 + 1 / 6) / 2, abs=1e-4)
    assert r.headline.answer_accuracy is None


def test_markdown_and_summary_line(tmp_path: Path) -> None:
    r = _report()
    md = to_markdown(r)
    assert "| hybrid+none | 2 | 0.000 | 0.500 | 0.500 | 1.000 |" in md
    assert "| hybrid+llm | skipped: down |" in md
    line = summary_line(r, tmp_path)
    assert "\n" not in line
    assert "hybrid+none: hit@5 0.500" in line and "best MRR@10 bm25 0.500" in line
    json_path, md_path = write_report(r, tmp_path / "out")
    assert EvalReport.model_validate_json(json_path.read_text()) == r
    assert md_path.read_text() == md


def test_a_quoted_piece_of_evidence_is_never_a_refusal() -> None:
    from bench.evaluation.run import refused

    quote = 'fprintf(stderr, "Cannot find function") [1]'
    assert not refused(Answer(quote, None, "evidence", "evidence"))
    assert refused(Answer(NOT_IN_DOCUMENTS, None, "evidence", "refusal"))
    assert refused(Answer("The passages do not mention it.", None, "small", "llm"))


def test_an_aggregate_only_report_holds_no_question_of_the_set(tmp_path: Path) -> None:
    r = _report().model_copy(
        update={
            "questions": [
                q.model_copy(update={"question": "SECRET-Q"}) for q in _report().questions
            ]
        }
    )
    blind = r.aggregate_only()
    assert blind.headline == r.headline and blind.modes == r.modes
    json_path, md_path = write_report(blind, tmp_path / "out", side_by_side=False)
    written = json_path.read_text() + md_path.read_text()
    assert "SECRET-Q" not in written and "q1" not in written
    assert not (tmp_path / "out" / "side_by_side.md").exists()
    assert "SECRET-Q" in to_markdown(r) or "q1" in r.model_dump_json()  # the test can fail
