"""Issue 22, sixth pass: release notes yield to the reference page unless the question asks
about versions, and near-tied passages share their rank bonus."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.unit.test_evidence import P
from workers.evidence import select
from workers.evidence.lexical import asks_about_versions, is_release_notes
from workers.evidence.select import EvidenceSelector, Weights


@pytest.mark.parametrize(
    ("title", "release"),
    [
        ("Index > C", False),
        ("dataclasses \u2014 Data Classes > Module contents", False),
        ("What\u2019s New in Python 2.7 > PEP 389: The argparse Module", True),
        ("E.1. Release 15.20 > E.1.2. Changes", True),
        ("argparse \u2014 Parser for command-line options", False),
    ],
)
def test_page_kinds_are_read_from_the_first_heading(title: str, release: bool) -> None:
    assert is_release_notes(title) is release


@pytest.mark.parametrize(
    ("question", "versions"),
    [
        ("Which enum base class introduced in Python 3.11 creates members?", True),
        ("What changed in the csv module?", True),
        ("Which module was deprecated in favour of argparse?", True),
        ("How do I parse command line arguments in a Python script?", False),
        ("I copied a list, but changing the copy also changes the original. How?", False),
    ],
)
def test_questions_about_versions(question: str, versions: bool) -> None:
    assert asks_about_versions(question) is versions


#: The same sentence on two pages, the release notes retrieved first: only the page kind differs.
SENTENCE = (
    "In a script, parse_args() will typically be called with no arguments, and the "
    "ArgumentParser will determine the command-line arguments from sys.argv."
)
ARGPARSE = P(SENTENCE, title="argparse \u2014 Python parser", chunk_id="a", doc_id="argparse")
WHATS_NEW = P(SENTENCE, title="What\u2019s New in Python 2.7 > PEP 389", doc_id="whatsnew")


def _lead(question: str, passages: list[P], weight: float) -> select.Span:
    selector = EvidenceSelector(None, Weights(release_notes=weight))
    [evidence] = selector.select([(question, passages)])
    return evidence.spans[0]


def test_release_notes_yield_to_the_reference_page_unless_versions_are_asked() -> None:
    question = "How do I parse command line arguments in a Python script?"
    passages = [WHATS_NEW, ARGPARSE]  # the release notes retrieved first
    assert _lead(question, passages, 0.0).doc_id == "whatsnew"
    assert _lead(question, passages, 0.2).doc_id == "argparse"
    dated = "How were command line arguments parsed in Python 2.7?"
    assert _lead(dated, passages, 0.2).doc_id == "whatsnew"


@dataclass(frozen=True)
class Scored:
    """A passage with a retrieval score, as the rerank pool's candidates carry one."""

    text: str
    score: float
    title: str = ""
    chunk_id: str = "c"
    doc_id: str = "d"


def test_near_tied_passages_share_their_rank_bonus(monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = Scored("a", 0.0290), Scored("b", 0.0286), Scored("c", 0.0200)
    bonuses = select.rank_bonuses([a, b, c])
    assert bonuses[0] == bonuses[1] == pytest.approx((1 + 1 / 2) / 2)
    assert bonuses[2] == pytest.approx(1 / 3)
    assert select.rank_bonuses([b, a, c]) == bonuses  # swapped near ties: the same bonuses
    assert select.rank_bonuses([P("x"), P("y")]) == [1.0, 0.5]  # no scores: positions
    monkeypatch.setattr(select, "RANK_TIE", 0.0)  # the rule off: positions again
    assert select.rank_bonuses([a, b, c]) == pytest.approx([1.0, 0.5, 1 / 3])


def test_the_answer_does_not_turn_on_the_order_of_near_tied_passages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    question = "How do I parse command line arguments in a Python script?"
    better = Scored("The argparse module parses command line arguments.", 0.0290, doc_id="a")
    other = Scored("In a script, parse_args() is called with no arguments.", 0.0288, doc_id="b")

    def leads() -> list[str]:
        selector = EvidenceSelector(None, Weights())
        orders = ([better, other], [other, better])
        return [selector.select([(question, order)])[0].spans[0].doc_id for order in orders]

    assert leads() == ["a", "a"]
    monkeypatch.setattr(select, "RANK_TIE", 0.0)  # the rule off: whichever came first leads
    assert leads() == ["a", "b"]
