"""Each rule of the evidence selector turned off (the rules table, docs/evaluation.md "The
selector's rules", names these tests), and the table itself kept true: every rule the ablation
finds is a row, and every row's test exists and turns that rule off."""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from bench.evaluation.ablation import all_rules
from tests.unit.test_evidence import P
from workers.evidence import select
from workers.evidence.lexical import coverage, idf, terms
from workers.evidence.select import EvidenceSelector, Weights

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "evaluation.md"


def _spans(question: str, passages: list[P], weights: Weights | None = None) -> list[select.Span]:
    [evidence] = EvidenceSelector(None, weights).select([(question, passages)])
    return list(evidence.spans)


def test_a_better_ranked_passage_wins_a_near_tie_by_its_rank() -> None:
    question = "Does the copy keep the mode bits of the file?"
    first = P("The copy keeps the mode bits.", chunk_id="a", doc_id="a")
    second = P("The copy keeps the mode bits of the file.", chunk_id="b", doc_id="b")
    other = P(
        "The file is opened. The file is closed. The file is read. The file is written.",
        chunk_id="c",
        doc_id="c",
    )
    assert _spans(question, [first, second, other])[0].doc_id == "a"
    assert _spans(question, [first, second, other], Weights(rank=0.0))[0].doc_id == "b"


def test_a_value_question_is_answered_by_the_sentence_that_holds_a_value() -> None:
    text = (
        "A connection attempt waits for the server to answer the connection attempt.\n\n"
        "It waits 30 seconds."
    )
    question = "How many seconds does a connection attempt wait?"
    assert _spans(question, [P(text)])[0].text == "It waits 30 seconds."
    off = Weights(answer_type=0.0, value_type=0.0)
    assert _spans(question, [P(text)], off)[0].text.startswith("A connection attempt")


def test_a_sentence_under_a_term_is_quoted_with_it(monkeypatch: pytest.MonkeyPatch) -> None:
    text = "autovacuum_naptime (integer)\n\nThe default is one minute."
    question = "What is the default of autovacuum_naptime?"
    assert _spans(question, [P(text)])[0].context == "autovacuum_naptime (integer)"
    monkeypatch.setattr(select, "QUOTE_HEAD", False)
    assert _spans(question, [P(text)])[0].context == ""


class _Topical:
    """Embeds a text as one of two directions: about moving or renaming, or not."""

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        rows = [[1.0 if ("rename" in t or "move" in t) else 0.0, 1.0] for t in texts]
        vectors = np.asarray(rows, dtype=np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_the_cosine_weight_lets_the_embedder_choose_among_the_dense_top_units() -> None:
    text = "A file is an object on disk. You can move it elsewhere with os.replace()."
    question = "How do I rename a file?"

    def lead(weights: Weights) -> str:
        selector = EvidenceSelector(_Topical(), weights, dense_top=24)
        return selector.select([(question, [P(text)])])[0].spans[0].text

    assert lead(Weights()).startswith("You can move")
    assert lead(Weights(cosine=0.0)).startswith("A file is")


@pytest.mark.parametrize("weight", ["lexical", "titled", "block"])
def test_each_coverage_weight_adds_its_coverage_and_nothing_else(weight: str) -> None:
    question = "How do I copy the mode bits of a file with shutil?"
    title = "shutil — High-level file operations"
    first = "copymode() copies the permission and mode bits from one path to another."
    second = "It works on a file and on a directory alike."
    passage = P(f"{first} {second}", title=title)
    unit_terms = [terms(first), terms(second)]
    weights = idf(unit_terms)
    q_terms = terms(question)
    expected = {
        "lexical": coverage(q_terms, unit_terms[0], weights),
        "titled": coverage(q_terms, [*unit_terms[0], *terms(title)], weights),
        "block": coverage(q_terms, [*terms(title), *unit_terms[0], *unit_terms[1]], weights),
    }[weight]
    assert expected > 0

    def score(w: Weights) -> float:
        return next(s.score for s in _spans(question, [passage], w) if s.text == first)

    on = Weights()
    gap = score(on) - score(Weights(**{weight: 0.0}))
    assert gap == pytest.approx(getattr(on, weight) * expected, abs=1e-3)


ROW = re.compile(r"^\| `([A-Za-z_]+)` \|(.*)\|$", re.MULTILINE)


def _tables() -> tuple[dict[str, str], set[str]]:
    """From docs/evaluation.md's "The selector's rules": rule -> its test cell of the rules
    table, and the rules of the table of removed ones."""
    section = DOC.read_text(encoding="utf-8").split("## The selector's rules", 1)[1]
    section = section.split("\n## ", 1)[0]
    kept, _, removed = section.partition("**Removed in this pass**")
    out = {}
    for rule, rest in ROW.findall(kept):
        cells = [c.strip() for c in rest.split("|")]
        out[rule] = next(c for c in cells if "::" in c).strip("`")
    return out, {rule for rule, _ in ROW.findall(removed)}


def test_the_rules_table_lists_every_rule_with_a_test_that_turns_it_off() -> None:
    rows, removed = _tables()
    assert set(rows) == set(all_rules()), "docs/evaluation.md's rules table is not the rules"
    assert removed and not removed & set(all_rules()), "a removed rule is still in the code"
    for rule, cell in rows.items():
        path, _, name = cell.partition("::")
        source = (ROOT / path).read_text(encoding="utf-8")
        tree = ast.parse(source)
        [test] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name]
        body = ast.get_source_segment(source, test) or ""
        parametrised = any("weight" in ast.unparse(d) for d in test.decorator_list)
        turned_off = (
            f'"{rule}"' in body
            if rule.isupper()
            else f"{rule.removeprefix('w_')}=" in body
            or rule in body
            or (parametrised and rule.removeprefix("w_") in ast.unparse(test.decorator_list[0]))
        )
        assert turned_off or _helper_turns_off(tree, body, rule), (rule, cell)


def _helper_turns_off(tree: ast.Module, body: str, rule: str) -> bool:
    """A test that calls a helper of its module which builds ``Weights(<weight>=...)``."""
    built = f"Weights({rule.removeprefix('w_')}="
    return any(
        isinstance(node, ast.FunctionDef) and f"{node.name}(" in body and built in ast.unparse(node)
        for node in tree.body
    )
