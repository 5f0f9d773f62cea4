"""``ragstream eval`` end to end on a private index laid out like the two manuals: the real
embedding model, Elasticsearch, the rerank backends and the real LLM server (8-token answers)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from typer.testing import CliRunner

from bench.evaluation.questions import OFF_TOPIC_QUESTIONS
from entry.cli import app
from ingest.ops import IngestOp
from ragstream.settings import Settings
from tests.integration.ingestkit import Kit

TENANT = "evalsmoke"

PAGES = {
    # (corpus, page under the html root): (title, text)
    ("py", "library/os.html"): (
        "os - Miscellaneous operating system interfaces",
        "os.getcwd() returns a string representing the current working directory. "
        "os.chdir(path) changes the current working directory to path.",
    ),
    ("py", "_sources/library/tempfile.rst.txt"): (
        "tempfile - Generate temporary files and directories",
        "tempfile.TemporaryDirectory() creates a temporary directory; on completion of the "
        "context or destruction of the object the directory and its contents are removed.",
    ),
    ("pg", "runtime-config-locks.html"): (
        "Lock Management",
        "deadlock_timeout is the amount of time to wait on a lock before checking for a "
        "deadlock condition. The default is one second (1s).",
    ),
    ("pg", "tutorial-createdb.html"): (
        "Creating a Database",
        "To create a new database named mydb, run the command createdb mydb in a shell.",
    ),
}

QUESTIONS = [
    {"id": "py-1", "corpus": "python-3.11",
     "question": "Which os function returns the current working directory?",
     "answer_patterns": ["getcwd"], "expected_pages": ["library/os.html"], "kind": "factual"},
    {"id": "py-2", "corpus": "python-3.11",
     "question": "How do I get a temporary directory that is removed automatically?",
     "answer_patterns": ["TemporaryDirectory"], "expected_pages": ["library/tempfile.html"],
     "kind": "howto"},
    {"id": "pg-1", "corpus": "postgresql-15",
     "question": "How long does PostgreSQL wait on a lock before checking for a deadlock?",
     "answer_patterns": ["1\\s*s", "one second"],
     "expected_pages": ["runtime-config-locks.html"], "kind": "factual"},
    {"id": "pg-2", "corpus": "postgresql-15",
     "question": "How do I configure the zebra replication feature?",
     "answer_patterns": ["not contain"], "expected_pages": [], "kind": "absent"},
]  # fmt: skip


def _html(title: str, text: str) -> bytes:
    return (
        f"<html><head><title>{title}</title></head><body><div role='main'>"
        f"<h1>{title}</h1><p>{text}</p></div></body></html>"
    ).encode()


def _index_pages(kit: Kit, tmp_path: Path) -> dict[str, Path]:
    """Write :data:`PAGES` under ``tmp_path/<corpus>/html`` and index them; the html roots."""
    roots = {"py": tmp_path / "py" / "html", "pg": tmp_path / "pg" / "html"}
    ops = []
    for (corpus, page), (title, text) in PAGES.items():
        path = roots[corpus] / page
        path.parent.mkdir(parents=True, exist_ok=True)
        data = _html(title, text) if page.endswith(".html") else f"{title}\n\n{text}".encode()
        path.write_bytes(data)
        ops.append(IngestOp(TENANT, str(path), data=data, filename=str(path), source=str(path)))
    assert all(o[0].status == "indexed" for o in kit.pipeline.apply(ops))
    kit.index.refresh()
    return roots


def test_eval_command_measures_modes_and_answers(
    kit: Kit, settings: Settings, tmp_path: Path
) -> None:
    roots = _index_pages(kit, tmp_path)
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    probes = tmp_path / "offtopic.jsonl"  # two of the repository's probes: a short LLM run
    probes.write_text("".join(OFF_TOPIC_QUESTIONS.read_text().splitlines(keepends=True)[:2]))
    out = tmp_path / "out"
    llm_up = httpx.get(settings.llm.base_url + "/health", timeout=5).status_code == 200
    assert llm_up, "the LLM server (make up) is needed for this test"

    result = CliRunner().invoke(
        app,
        [
            "eval", str(qfile), "--out", str(out), "--index", kit.index.alias,
            "--tenant", TENANT, "--root", f"python-3.11={roots['py']}",
            "--root", f"postgresql-15={roots['pg']}",
            "--modes", "bm25,knn,hybrid,hybrid+none,hybrid+llm,hybrid+cross-encoder",
            "--max-tokens", "8", "--tiers", "small,evidence", "--off-topic-file", str(probes),
        ],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    default = f"hybrid+{settings.rerank.backend}"
    assert f"eval: 4 questions, {default}: hit@5 1.000" in result.output
    report = json.loads((out / "eval.json").read_text())
    assert report["n_questions"] == 4
    assert set(report["modes"]) == {"bm25", "knn", "hybrid", "hybrid+none", "hybrid+llm"}
    assert "rerank.model" in report["skipped_modes"]["hybrid+cross-encoder"]
    by_id = {q["id"]: q for q in report["questions"]}
    # the one page on the subject is found by every mode; its reST source counts as the page
    for qid in ("py-1", "py-2", "pg-1"):
        assert all(r is not None and r <= 4 for r in by_id[qid]["ranks"].values()), by_id[qid]
    assert by_id["py-2"]["top_pages"][0] == "python-3.11:library/tempfile.html"
    assert all(r is None for r in by_id["pg-2"]["ranks"].values())
    for mode in report["modes"].values():
        assert mode["overall"]["n"] == 3 and mode["overall"]["hit_at_10"] == 1.0
        assert set(mode["by_corpus"]) == {"python-3.11", "postgresql-15"}
        assert set(mode["by_kind"]) == {"factual", "howto"}
    answers = report["answers"]
    assert answers["overall"]["n"] == 4 and answers["overall"]["absent_n"] == 1
    assert set(answers["by_kind"]) == {"absent", "factual", "howto"}
    assert all(q["answer"] is not None and q["error"] is None for q in report["questions"])
    assert all(q["completion_tokens"] <= 8 for q in report["questions"])
    # The LLM saw every answerable question (weak evidence would be refused without it).
    assert all(q["prompt_tokens"] > 0 for q in report["questions"] if q["expected_pages"]), [
        (q["id"], q["prompt_tokens"], q["answer"], q["refused"]) for q in report["questions"]
    ]
    assert set(answers["tiers"]) == {"small", "evidence"}
    assert "### Answer configurations" in (out / "eval.md").read_text()
    md = (out / "eval.md").read_text()
    top_k = settings.rerank.top_k
    assert "| hybrid+llm | 3 |" in md and f"## Answers (`{default}`, top {top_k} passages" in md
    # The off-topic probes ran beside the file in every configuration, reported apart.
    assert len(report["off_topic_questions"]) == 2
    assert all(q["kind"] == "off_topic" for q in report["off_topic_questions"])
    assert answers["off_topic"]["n"] == 2 and answers["off_topic"]["off_topic_n"] == 2
    assert all(t["off_topic"]["n"] == 2 for t in answers["tiers"].values())
    assert report["headline"]["off_topic_refusal_rate"] is not None
    assert "off-topic refusal rate" in result.output
    side = (out / "side_by_side.md").read_text()
    assert "## off-topic probes:" in side and "#### py-2 (python-3.11)" in side


def test_ablate_command_switches_each_rule_off_over_the_real_index(
    kit: Kit, settings: Settings, tmp_path: Path
) -> None:
    from workers.evidence import answer

    _index_pages(kit, tmp_path)
    dev, blind = tmp_path / "questions.dev.jsonl", tmp_path / "questions.blind.jsonl"
    dev.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS[:2]))
    blind.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS[2:]))
    where = ["--index", kit.index.alias, "--tenant", TENANT]
    out = tmp_path / "ablate"

    result = CliRunner().invoke(
        app,
        ["ablate", str(dev), "--blind", str(blind), "--rules", "SAME_TERM,w_rank,w_block",
         "--out", str(out), *where],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    assert answer.SAME_TERM is True  # switched back on
    report = json.loads((out / "ablation.json").read_text())
    assert report["sets"] == ["dev", "blind"] and report["blind"] == ["blind"]
    assert [r["rule"] for r in report["rules"]] == ["SAME_TERM", "w_rank", "w_block"]
    assert "| `w_rank` |" in (out / "ablation.md").read_text() and "blind (blind)" in result.output
    # The base is what `ragstream eval` gives the evidence tier on the same set and index.
    for name, path in (("dev", dev), ("blind", blind)):
        ev_out = tmp_path / f"eval-{name}"
        ran = CliRunner().invoke(
            app,
            ["eval", str(path), "--modes", "hybrid+none", "--tiers", "evidence",
             "--no-off-topic", "--out", str(ev_out), *where],
        )  # fmt: skip
        assert ran.exit_code == 0, ran.output
        answers = json.loads((ev_out / "eval.json").read_text())["answers"]["overall"]
        assert report["base"][name]["correct"] == answers["correct"]
        assert report["base"][name]["answer_first"] == answers["answer_first"]
    for effect in report["rules"]:
        blind_base = report["base"]["blind"]
        off = effect["sets"]["blind"]
        assert effect["gain_correct"] == blind_base["correct"] - off["correct"]
        assert 0 <= off["changed"] <= 2
    bad = CliRunner().invoke(app, ["ablate", str(dev), "--rules", "NO_SUCH_RULE", *where])
    assert bad.exit_code == 2 and "unknown rules" in bad.output


def test_eval_command_scores_crag_outcomes_and_answer_containment_blind(
    kit: Kit, settings: Settings, tmp_path: Path
) -> None:
    """The evidence tier only (no LLM): CRAG outcomes and answer-in-top-k of the passages sent
    on, per kind, in an aggregate-only report."""
    roots = _index_pages(kit, tmp_path)
    qfile = tmp_path / "questions.jsonl"
    qfile.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    out = tmp_path / "out"

    result = CliRunner().invoke(
        app,
        [
            "eval", str(qfile), "--out", str(out), "--index", kit.index.alias,
            "--tenant", TENANT, "--root", f"python-3.11={roots['py']}",
            "--root", f"postgresql-15={roots['pg']}", "--modes", "hybrid+none",
            "--tiers", "evidence", "--no-off-topic", "--aggregate-only",
        ],
    )  # fmt: skip

    assert result.exit_code == 0, result.output
    report = json.loads((out / "eval.json").read_text())
    assert report["questions"] == []
    passages = report["passages"]
    # four pages, one chunk each: every answer pattern is in one of the five passages sent on
    assert passages["overall"]["n"] == 3 and passages["overall"]["at_5"] == 1.0, passages
    assert set(passages["by_kind"]) == {"factual", "howto"}
    a = report["answers"]["overall"]
    assert a["accurate"] + a["hallucinated"] + a["missing"] == a["n"] == 4
    assert a["crag_score"] == round((a["accurate"] - a["hallucinated"]) / 4, 4)
    assert set(report["answers"]["by_kind"]) == {"absent", "factual", "howto"}
    h = report["headline"]
    assert h["answer_in_top_5"] == 1.0 and h["crag_score"] == a["crag_score"]
    md = (out / "eval.md").read_text()
    assert "| all | 4 | " in md and "answer in top 1" in md
    print(f"CRAG {a['accurate']}/{a['hallucinated']}/{a['missing']}, containment {passages}")
