"""What the evaluation measures as a reader sees an answer (issue 22): the first sentence,
answer-first, words, off-topic refusals, follow-ups, the side-by-side file and the summary keys
(pure, no services)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.evaluation.answers import Answer, cited_locations
from bench.evaluation.metrics import (
    Judged,
    answer_metrics,
    answer_words,
    first_sentence,
    is_answer_first,
    is_correct,
)
from bench.evaluation.questions import (
    CORPUS_ROOTS,
    OFF_TOPIC_QUESTIONS,
    EvalQuestion,
    QuestionFileError,
    load_questions,
)
from bench.evaluation.report import (
    AnswersReport,
    EvalReport,
    Headline,
    QuestionRecord,
    summary_line,
    to_side_by_side,
    write_report,
)
from bench.evaluation.run import _probes, _tier_report, asked, judge
from bench.summary import build_summary
from workers.conversation import standalone_question
from workers.generation.prompt import NOT_IN_DOCUMENTS

PY, PG = "python-3.11", "postgresql-15"
DEV = Path("bench/evaluation/questions.dev.jsonl")
ROOT = Path(__file__).resolve().parents[2]


# -- the first sentence ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer", "first"),
    [
        ("It listens on port 5432 [1]. You can change it.", "It listens on port 5432 [1]."),
        ("Use os.getcwd() to get it. It returns a str.", "Use os.getcwd() to get it."),
        ("It waits 1.5 seconds. Then it checks.", "It waits 1.5 seconds."),
        ("Call os.path.join(a, b). Next.", "Call os.path.join(a, b)."),
        ("Python 3.11. The next release.", "Python 3.11."),
        ("The default is 200 ms. The next one.", "The default is 200 ms."),
        ("e.g. Python does this. Next one.", "e.g. Python does this."),
        ("Use one, i.e. A with statement. Done.", "Use one, i.e. A with statement."),
        ("1. Use createdb mydb. 2. Then connect.", "1. Use createdb mydb."),
        ('It prints "done." Then it exits.', 'It prints "done."'),
        ("Is it on? Yes, by default.", "Is it on?"),
        ("Stop! Now.", "Stop!"),
        ("Use the `port` setting. `listen_addresses` is another.", "Use the `port` setting."),
        ("It is 5432. 5433 is the next one.", "It is 5432."),
        # an evidence answer: spans, each with its citation
        (
            "port (integer) The TCP port; 5432 by default. [1] listen_addresses (string) Sets",
            "port (integer) The TCP port; 5432 by default. [1]",
        ),
        ("The default is 128. [1][2] more text", "The default is 128. [1][2]"),
        ("is 5432 [1] The server also", "is 5432 [1]"),
        ("is 5432 [1, 2] The server also", "is 5432 [1, 2]"),
        # a citation inside a sentence does not end it
        ("It is 4 [1] and can be changed [2].", "It is 4 [1] and can be changed [2]."),
        # no space after the period: an identifier, a number, a file name
        (
            "See os.getcwd().strip() in 2.5.1 of a.conf",
            "See os.getcwd().strip() in 2.5.1 of a.conf",
        ),
        # lower case after a period: not a sentence start
        ("Set it in postgresql.conf. then reload", "Set it in postgresql.conf. then reload"),
        # a newline ends it; blank lines and code fences before it are skipped
        ("Use createdb. Then:\nconnect", "Use createdb."),
        ("No colon\ncreatedb mydb", "No colon"),
        # a line that ends with ":" takes the next line (the command it announces) with it
        (
            "To create one, run:\n\n```sh\ncreatedb mydb\n```\nDone.",
            "To create one, run: createdb mydb",
        ),
        ("\n\n```sh\ncreatedb mydb\n```\nThis creates it.", "createdb mydb"),
        ("Use subprocess.run(). \nNext", "Use subprocess.run()."),
        ("", ""),
        ("   ", ""),
        ("No boundary at all", "No boundary at all"),
    ],
)
def test_first_sentence(answer: str, first: str) -> None:
    assert first_sentence(answer) == first


def test_words_leave_out_citation_marks() -> None:
    assert answer_words("It is 5432 [1]. Yes [2][3].") == 4
    assert answer_words("[1, 2] alone") == 1
    assert answer_words("It is 5432[1]. Done [2] .") == 4  # "." alone is no word
    assert answer_words("Use x = 1 [1]") == 3
    assert answer_words("") == 0
    assert answer_words("a\nb  c") == 3


def test_answer_first_needs_the_pattern_in_the_first_sentence() -> None:
    patterns = [r"\b5432\b"]
    late = "SSL uses the same TCP port [1]. The default port is 5432 [2]."
    early = "The server listens on port 5432 by default [1]. SSL uses it too [2]."
    assert is_correct(late, patterns) and not is_answer_first(
        late, patterns, refusal_expected=False, refused=False
    )
    assert is_answer_first(early, patterns, refusal_expected=False, refused=False)
    # a refusal is answer-first exactly where a refusal is the right answer
    assert is_answer_first(NOT_IN_DOCUMENTS, [r"x"], refusal_expected=True, refused=True)
    assert not is_answer_first("It is 5432.", [r"5432"], refusal_expected=True, refused=False)
    assert not is_answer_first(
        "5432 is not in the documents", [r"5432"], refusal_expected=False, refused=True
    )


# -- metrics over a group --------------------------------------------------------------------


def test_answer_metrics_of_judged_answers() -> None:
    judged = [
        Judged(True, True, False, "factual", first=True, words=10, latency_ms=10.0),
        Judged(True, True, False, "howto", first=False, words=30, latency_ms=20.0),
        Judged(True, False, True, "followup", first=False, words=7, latency_ms=30.0),
        Judged(False, True, True, "absent", first=True, words=7, latency_ms=40.0),
        Judged(False, True, True, "off_topic", first=True, words=7, latency_ms=50.0),
        Judged(False, False, False, "off_topic", first=False, words=90, latency_ms=60.0),
        Judged(True, False, False, "factual", first=False, words=None, latency_ms=70.0),  # error
    ]
    m = answer_metrics(judged)
    assert m.n == 7 and m.correct == 4
    assert m.absent_n == 1 and m.absent_refusal_rate == 1.0  # off-topic is not absent
    assert m.off_topic_n == 2 and m.off_topic_refusal_rate == 0.5
    assert m.false_refusal_rate == 0.25  # 1 of the 4 answerable
    assert m.answer_first == 3 and m.answer_first_rate == 0.25  # of answerable only
    # nearest rank over 7, 7, 7, 10, 30, 90 (the error has no words)
    assert m.words_p50 == 10.0 and m.words_p90 == 90.0
    assert m.latency_p50_ms == 40.0 and m.latency_p95_ms == 70.0
    empty = answer_metrics([])
    assert empty.answer_first_rate is None and empty.words_p50 is None
    assert empty.off_topic_refusal_rate is None


def test_judge_of_an_answer() -> None:
    q = EvalQuestion(
        id="q",
        corpus=PG,
        question="Port?",
        answer_patterns=["5432"],
        expected_pages=["a.html"],
        kind="factual",
    )
    good = judge(q, Answer("It is 5432 [1]. More [2].", None, "evidence", "evidence", latency_ms=3))
    assert good == Judged(True, True, False, "factual", True, 4, 3.0)
    bad = judge(q, Answer("timed out", "DEADLINE_EXCEEDED", "small", "error"))
    assert not bad.correct and not bad.refused and not bad.first and bad.words is None
    off = q.model_copy(update={"kind": "off_topic", "expected_pages": (), "id": "o"})
    no = judge(off, Answer(NOT_IN_DOCUMENTS, None, "evidence", "refusal"))
    assert no.refused and no.first and not no.answerable
    quoted = judge(off, Answer("Paris is a city [1].", None, "evidence", "evidence"))
    assert not quoted.refused and not quoted.first
    # a quote that matches a refusal pattern is no refusal, so no right answer either
    words = Answer("This is not in the documentation [1].", None, "evidence", "evidence")
    assert is_correct(words.text, [r"not[^.]*documentation"])
    looks = judge(off.model_copy(update={"answer_patterns": (r"not[^.]*documentation",)}), words)
    assert not looks.refused and not looks.correct
    llm = Answer("The documentation does not cover it.", None, "small", "llm")
    assert judge(off.model_copy(update={"answer_patterns": (r"does not",)}), llm).correct
    # without patterns, any refusal is the right answer and nothing else is
    bare = off.model_copy(update={"answer_patterns": ()})
    assert judge(bare, llm).correct and judge(bare, llm).refused
    assert not judge(bare, Answer("Paris is a city [1].", None, "evidence", "evidence")).correct


def test_cited_locations_in_the_order_of_first_citation() -> None:
    where = {1: "/a.html", 2: "/b.html", 3: "/c.html"}
    assert cited_locations("x [2] y [1] z [2]", where) == ("/b.html", "/a.html")
    assert cited_locations("x [3, 1]", where) == ("/c.html", "/a.html")
    assert cited_locations("x [9] y", where) == ()
    assert cited_locations("no marks", where) == ()


def test_a_tier_report_keeps_the_probes_apart() -> None:
    qs = [
        EvalQuestion(
            id="a",
            corpus=PY,
            question="A?",
            answer_patterns=["yes"],
            expected_pages=["a.html"],
            kind="howto",
        ),
        EvalQuestion(
            id="b", corpus=PY, question="B?", answer_patterns=["not contain"], kind="absent"
        ),
    ]
    probe = EvalQuestion(
        id="p", corpus=PY, question="Weather?", answer_patterns=["not contain"], kind="off_topic"
    )
    answers = [
        Answer("yes it is [1]", None, "evidence", "evidence", latency_ms=5),
        Answer(NOT_IN_DOCUMENTS, None, "evidence", "refusal", latency_ms=5),
        Answer("Sunny [1].", None, "evidence", "evidence", latency_ms=5),
    ]
    t = _tier_report(qs, answers, ([probe], [2]))
    assert t.overall.n == 2 and t.overall.off_topic_n == 0 and t.overall.correct == 2
    assert t.by_kind["howto"].answer_first_rate == 1.0
    assert t.off_topic is not None and t.off_topic.n == 1
    assert t.off_topic.off_topic_refusal_rate == 0.0


# -- question files --------------------------------------------------------------------------


def _row(**over: object) -> dict[str, object]:
    row: dict[str, object] = {
        "id": "q1",
        "corpus": PY,
        "question": "What?",
        "answer_patterns": ["x"],
        "expected_pages": [],
        "kind": "off_topic",
    }
    row.update(over)
    return row


def _write(tmp_path: Path, *rows: dict[str, object]) -> Path:
    f = tmp_path / "q.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return f


def test_off_topic_and_followup_questions_load(tmp_path: Path) -> None:
    f = _write(
        tmp_path,
        _row(),
        _row(
            id="q2",
            kind="followup",
            question="And how?",
            history=["Which port?"],
            expected_pages=["a.html"],
        ),
        _row(id="q3", kind="factual", expected_pages=["a.html"]),
    )
    off, follow, plain = load_questions(f)
    assert off.kind == "off_topic" and not off.answerable and off.history == ()
    assert follow.history == ("Which port?",) and follow.answerable
    assert plain.history == ()


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        (_row(expected_pages=["a.html"]), "off_topic question has no expected_pages"),
        (_row(kind="followup", expected_pages=["a.html"]), "needs its history"),
        (_row(kind="followup", history=["  "], expected_pages=["a.html"]), "empty question"),
        (_row(history="Which port?"), ":1:"),  # a list, not a string
    ],
)
def test_question_file_rejects_bad_new_rows(
    tmp_path: Path, bad: dict[str, object], fragment: str
) -> None:
    with pytest.raises(QuestionFileError, match=fragment):
        load_questions(_write(tmp_path, bad))


def test_a_followup_is_asked_as_its_standalone_question() -> None:
    q = EvalQuestion(
        id="f",
        corpus=PG,
        question="And how do I change it?",
        answer_patterns=["port"],
        expected_pages=["a.html"],
        kind="followup",
        history=("Which TCP port does PostgreSQL listen on?",),
    )
    assert asked(q) == standalone_question(q.history, q.question)
    assert asked(q) != q.question
    plain = q.model_copy(update={"history": (), "kind": "factual"})
    assert asked(plain) == "And how do I change it?"


def test_probes_already_in_the_file_are_answered_once(tmp_path: Path) -> None:
    f = _write(tmp_path, _row(id="p1", question="Weather?"), _row(id="p2", question="Eggs?"))
    mine = EvalQuestion(
        id="m", corpus=PY, question="Eggs?", answer_patterns=["x"], kind="off_topic"
    )
    probes, rows, every = _probes(f, [mine])
    assert [p.id for p in probes] == ["p1", "p2"]
    assert rows == [1, 0] and [q.id for q in every] == ["m", "p1"]
    assert _probes(None, [mine]) == ([], [], [mine])


def test_dev_set_has_off_topic_and_followup_questions() -> None:
    qs = load_questions(ROOT / DEV)
    off = [q for q in qs if q.kind == "off_topic"]
    follow = [q for q in qs if q.kind == "followup"]
    assert len(off) >= 10 and len(follow) >= 10
    assert all(q.history for q in follow) and {q.corpus for q in follow} == {PY, PG}
    absent = {q.answer_patterns for q in qs if q.kind == "absent"}
    assert len(absent) == 1 and all(q.answer_patterns in absent for q in off)
    # the refusal the system answers is the right answer to them
    assert all(is_correct(NOT_IN_DOCUMENTS, q.answer_patterns) for q in off)
    probes = load_questions(OFF_TOPIC_QUESTIONS)
    assert {p.question for p in probes} == {q.question for q in off}
    assert all(p.kind == "off_topic" and p.answer_patterns in absent for p in probes)


def test_dev_followups_expected_pages_hold_a_pattern() -> None:
    roots = {c: r for c, r in CORPUS_ROOTS.items() if r.is_dir()}
    if not roots:
        pytest.skip("the manuals are not installed (make docs)")
    for q in load_questions(ROOT / DEV):
        if q.kind != "followup" or q.corpus not in roots:
            continue
        texts = []
        for page in q.expected_pages:
            path = roots[q.corpus] / page
            assert path.is_file(), (q.id, page)
            texts.append(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", path.read_text())))
        assert any(re.search(p, t, re.I) for p in q.answer_patterns for t in texts), q.id


# -- report, side by side, summary -----------------------------------------------------------


def _record(qid: str, kind: str, *, correct: bool, first: bool, **over: object) -> QuestionRecord:
    base: dict[str, object] = {
        "id": qid,
        "corpus": PG,
        "kind": kind,
        "question": f"question {qid}?",
        "expected_pages": [] if kind in ("absent", "off_topic") else ["a.html"],
        "ranks": {"hybrid+none": 1},
        "top_pages": [f"{PG}:a.html"],
        "answer": f"answer {qid}",
        "correct": correct,
        "refused": False,
        "answer_first": first,
        "words": 2,
        "latency_ms": 12.0,
        "answer_patterns": ["5432"],
        "first_cited_page": f"{PG}:a.html",
    }
    base.update(over)
    return QuestionRecord.model_validate(base)


def _report() -> EvalReport:
    records = [
        _record("f1", "factual", correct=True, first=True),
        _record("f2", "factual", correct=False, first=False, answer="wrong | pipe\nnewline"),
        _record("h1", "howto", correct=True, first=False),
        _record(
            "u1",
            "followup",
            correct=True,
            first=True,
            history=["Which port?"],
            standalone="Which port?\nAnd how do I change it?",
        ),
        _record("o1", "off_topic", correct=True, first=True, refused=True),
    ]
    judged = [
        Judged(True, True, False, "factual", True, 20, 10.0),
        Judged(True, False, False, "factual", False, 30, 30.0),
        Judged(True, True, False, "howto", False, 30, 20.0),
        Judged(True, True, False, "followup", True, 10, 10.0),
        Judged(False, True, True, "off_topic", True, 7, 5.0),
    ]
    kinds = {
        k: answer_metrics([j for j in judged if j.kind == k])
        for k in ("factual", "howto", "followup", "off_topic")
    }
    probes = answer_metrics(
        [Judged(False, True, True, "off_topic", True, 7, 5.0)] * 3
        + [Judged(False, False, False, "off_topic", False, 9, 5.0)]
    )
    answers = AnswersReport(
        mode="hybrid+none",
        top_k=5,
        overall=answer_metrics(judged),
        by_kind=kinds,
        by_corpus={PG: answer_metrics(judged)},
        seconds_per_question=0.01,
        off_topic=probes,
    )
    return EvalReport(
        questions_file="q.jsonl",
        n_questions=5,
        tenant="t",
        index_alias="a",
        started_at="2026-01-01T00:00:00+00:00",
        duration_s=1.0,
        default_mode="hybrid+none",
        config={},
        headline=Headline(
            hit_at_5=None, mrr_at_10=None, answer_accuracy=None, absent_refusal_rate=None
        ),
        modes={},
        skipped_modes={},
        answers=answers,
        questions=records,
        off_topic_file="offtopic.jsonl",
        off_topic_questions=[_record("p1", "off_topic", correct=False, first=False)],
    ).with_headline()


def test_headline_has_the_reader_numbers() -> None:
    h = _report().headline
    assert h.answer_accuracy == 0.8
    assert h.howto_accuracy == 1.0
    assert h.answer_first_rate == 0.5  # f1 and u1 of the 4 answerable
    assert h.factual_words_p50 == 30.0  # nearest rank of 20, 30
    assert h.answer_words_p50 == 20.0 and h.answer_words_p90 == 30.0
    assert h.off_topic_refusal_rate == 0.75  # the probes, not the file's own off-topic row
    assert h.false_refusal_rate == 0.0


def test_headline_falls_back_to_the_files_off_topic_questions() -> None:
    r = _report()
    assert r.answers is not None
    bare = r.model_copy(update={"answers": r.answers.model_copy(update={"off_topic": None})})
    assert bare.with_headline().headline.off_topic_refusal_rate == 1.0


def test_side_by_side_groups_by_kind_with_wrong_answers_first(tmp_path: Path) -> None:
    text = to_side_by_side(_report())
    heads = [line for line in text.splitlines() if line.startswith("## ")]
    assert heads == [
        "## factual: 1/2 correct, 1 answer first",
        "## howto: 1/1 correct, 0 answer first",
        "## followup: 1/1 correct, 1 answer first",
        "## off_topic: 1/1 correct, 1 answer first",
        "## off-topic probes: 0/1 correct, 0 answer first",
    ]
    assert text.index("#### f2") < text.index("#### f1")  # wrong first within the group
    assert "#### f2 (postgresql-15) — **wrong** · answer not first · 2 words · 12 ms" in text
    assert "- **A**: wrong \\| pipe newline" in text  # one line, table-safe
    assert "- earlier question 1: Which port?" in text
    assert "- asked as: Which port? And how do I change it?" in text
    assert "- expected: `5432` on a.html" in text
    assert f"- first cited page: {PG}:a.html; top retrieved page: {PG}:a.html" in text
    assert "none (a refusal is right)" in text
    write_report(_report(), tmp_path)
    assert (tmp_path / "side_by_side.md").read_text() == text


def test_side_by_side_cuts_long_answers() -> None:
    r = _report()
    long = r.questions[0].model_copy(update={"answer": "word " * 500})
    text = to_side_by_side(r.model_copy(update={"questions": [long]}))
    line = next(x for x in text.splitlines() if x.startswith("- **A**:"))
    assert len(line) < 420 and line.endswith("\u2026")


def test_summary_line_shows_the_reader_numbers() -> None:
    line = summary_line(_report(), Path("/out"))
    assert "\n" not in line
    for part in (
        "answers 4/5 correct (0.800)",
        "how-to 1.000",
        "answer first 0.500",
        "words p50 20 (factual 30)",
        "off-topic refusal rate 0.750",
        "false refusal rate 0.000",
        "absent refusal rate -",
    ):
        assert part in line, part


def test_summary_json_has_the_issue_22_keys_and_targets(tmp_path: Path) -> None:
    (tmp_path / "eval").mkdir()
    report = _report()
    (tmp_path / "eval" / "eval.json").write_text(report.model_dump_json())
    s = build_summary(tmp_path)
    for key in (
        "answer_accuracy",
        "howto_accuracy",
        "answer_first_rate",
        "factual_words_p50",
        "absent_refusal_rate",
        "off_topic_refusal_rate",
        "false_refusal_rate",
        "answer_latency_p50_ms",
    ):
        assert key in s["eval"], key
    t = s["targets"]
    assert t["eval.answer_accuracy"] == {"target": ">= 0.7", "value": 0.8, "met": True}
    assert t["eval.howto_accuracy"]["met"] is True
    assert t["eval.answer_first_rate"]["met"] is False  # 0.5 < 0.6
    assert t["eval.factual_words_p50"] == {"target": "<= 40", "value": 30.0, "met": True}
    assert t["eval.off_topic_refusal_rate"]["met"] is False  # 0.75 < 0.9
    assert t["eval.false_refusal_rate"]["target"] == "<= 0.05"
    assert "eval.answer_latency_p50_ms" not in t  # a batch in-process: no API latency
    assert t["query.api_evidence_p50_ms"] == {"target": "<= 150", "value": None, "met": None}
    assert t["eval.absent_refusal_rate"]["met"] is None  # no absent question: not measured
    (tmp_path / "api-evidence-shared.json").write_text(
        json.dumps({"tier_latency": {"evidence": {"p50": 101.6, "p95": 135.9}}})
    )
    t = build_summary(tmp_path)["targets"]
    assert t["query.api_evidence_p50_ms"] == {"target": "<= 150", "value": 101.6, "met": True}
