"""The off-topic gate: a low kNN score refuses only a question no sentence of the passages
states (issue 39 item 4)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from ragstream.settings import EvidenceSettings
from workers.evidence.answer import AnswerPolicy, compose, off_topic
from workers.evidence.lexical import stated_share, terms
from workers.evidence.select import Evidence, EvidenceSelector
from workers.evidence.stage import answer_policy

GENERATOR = (
    "The plant room houses the chillers and the standby power equipment. Contractors sign in at "
    "the security desk. The backup generator serial number is GX-5531. Service is contracted to "
    "PowerServ Ltd; their emergency line is 0800 555 0192. A home office allowance of 450 euros "
    "is paid once."
)


@dataclass(frozen=True)
class Scored:
    text: str
    knn_score: float | None = None
    title: str = ""
    chunk_id: str = "c"
    doc_id: str = "d"


def _evidence(question: str, knn: float = 0.8) -> Evidence:
    [ev] = EvidenceSelector(None).select([(question, [Scored(GENERATOR, knn_score=knn)])])
    return ev


def test_stated_share_counts_derived_words_of_one_stem_but_not_numbers() -> None:
    weights = {"contractor": 2.0, "emerg": 1.0}
    unit = terms("Service is contracted to PowerServ Ltd; their emergency line is 0800.")
    assert stated_share(terms("emergency contractor"), unit, weights) == 1.0
    assert stated_share(terms("emergency plumber"), unit, {}) == 0.5
    assert stated_share(["08"], terms("0800"), {}) == 0.0  # a number is stated whole only
    assert stated_share([], unit, weights) == 0.0


def test_a_sentence_stating_every_word_of_the_question_makes_it_stated() -> None:
    assert _evidence("What is the backup generator serial number?").stated == 1.0
    assert _evidence("What is the emergency line of the service contractor?").stated == 1.0
    # "how much" asks for the value; the sentence states the value, not the words
    assert _evidence("How much is the home office allowance?").stated == 1.0
    assert _evidence("What is the warranty period of the backup generator?").stated < 1.0
    assert _evidence("What is the noise level of the chillers in decibels?").stated < 0.5
    assert _evidence("Who is PowerServ?").stated == 0.0  # one term names a topic, states nothing


def test_a_low_knn_score_refuses_only_what_no_sentence_states() -> None:
    gate = AnswerPolicy(min_relevance=0.83, statement_coverage=1.0)
    stated = _evidence("What is the backup generator serial number?", knn=0.76)
    assert not off_topic(stated, gate)
    answer = compose(stated, gate)
    assert not answer.refused and "GX-5531" in answer.text
    # the kNN score alone (the gate before issue 39) refused it
    assert compose(stated, replace(gate, statement_coverage=None)).reason.startswith("off_topic")
    unstated = _evidence("What is the warranty period of the backup generator?", knn=0.76)
    assert compose(unstated, gate).reason == "off_topic:relevance=0.760"
    # a passage close to the question is never off-topic, stated or not
    assert not off_topic(_evidence("What is the warranty period?", knn=0.9), gate)
    # no kNN score (a BM25-only passage): the gate does not apply
    assert not off_topic(replace(unstated, relevance=None), gate)


def test_the_settings_turn_the_statement_rule_on_and_off() -> None:
    assert answer_policy(EvidenceSettings()).statement_coverage == 1.0
    off = EvidenceSettings(statement_coverage=None)
    assert answer_policy(off).statement_coverage is None
