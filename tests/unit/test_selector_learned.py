"""The learned answer-sentence selector (issue 50, docs/selector.md): the unit score is literally
``weights · features``, a pairwise ranker learns weights that put the right unit first, and
learned weights load as one settings object."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from bench.evaluation.questions import EvalQuestion
from bench.rerank.judged import check_trainable, load_registry
from bench.selector.data import SETS, QuestionUnits, label_units
from bench.selector.train import (
    TRAINED,
    fit_pairwise,
    hand_weights,
    pairs,
    top1_rate,
    train_weights,
    write_weights,
)
from ragstream.settings import EvidenceSettings
from tests.unit.test_evidence import LOCKS, P
from workers.evidence.select import FEATURES, EvidenceSelector, Weights, weighted_sum

QUESTIONS = (
    "What is the default of deadlock_timeout?",
    "How long does the server wait on a lock before checking for a deadlock?",
    "Which TCP port does the server listen on by default?",
)
PASSAGES = [
    P(LOCKS, title="20.12. Lock Management", chunk_id="a", doc_id="locks"),
    P(
        "port (integer)\n\nThe TCP port the server listens on; 5432 by default. "
        "For more information, see Section 19.3.",
        title="What's New in PostgreSQL 9.0",
        chunk_id="b",
        doc_id="conn",
    ),
]


@pytest.mark.parametrize(
    "weights",
    [Weights(), Weights(lexical=1.3, rank=0.0, pointer=0.7, value_type=-0.2, release_notes=0.5)],
    ids=["hand", "other"],
)
def test_the_unit_score_is_the_weights_dot_the_features(weights: Weights) -> None:
    selector = EvidenceSelector(None, weights)
    batch = [(q, PASSAGES) for q in QUESTIONS]
    rows = selector.features(batch)
    vector = np.array(weights.vector())
    for question_rows, evidence in zip(rows, selector.select(batch), strict=True):
        assert question_rows
        for r in question_rows:
            assert len(r.features) == len(FEATURES)
            assert r.score == weighted_sum(weights.vector(), r.features)
            assert r.score == pytest.approx(float(np.dot(vector, r.features)), abs=1e-12)
        # select() ranks the same units by the same scores: its lead is the best quotable unit.
        best = max((r for r in question_rows if r.span is not None), key=lambda r: r.score)
        assert best.span is not None
        assert evidence.spans[0].text == best.span.text
        assert evidence.confidence == round(max(r.score for r in question_rows), 4)


def test_features_do_not_depend_on_the_weights() -> None:
    batch = [(q, PASSAGES) for q in QUESTIONS]
    a = EvidenceSelector(None, Weights()).features(batch)
    b = EvidenceSelector(None, Weights(block=0.0, label=2.0)).features(batch)
    assert [[r.features for r in q] for q in a] == [[r.features for r in q] for q in b]


def _group(rows: list[tuple[list[float], int]], qid: str = "q") -> QuestionUnits:
    def full(x: list[float]) -> list[float]:
        return [*x, *[0.0] * (len(FEATURES) - len(x))]

    return QuestionUnits(
        set="s",
        id=qid,
        features=[full(x) for x, _ in rows],
        labels=[y for _, y in rows],
        texts=[f"unit {i}" for i in range(len(rows))],
    )


def test_training_learns_weights_that_rank_the_right_unit_first() -> None:
    # The right unit always has the most "label" coverage (feature 7); the wrong ones are
    # better ranked (feature 3) and longer-covered (feature 0) at random.
    rng = np.random.default_rng(0)
    label, rank, lexical = (
        FEATURES.index("label"),
        FEATURES.index("rank"),
        FEATURES.index("lexical"),
    )

    def question(qid: str) -> QuestionUnits:
        rows = []
        for i in range(6):
            x = [0.0] * len(FEATURES)
            x[rank], x[lexical] = rng.uniform(0.3, 1.0), rng.uniform(0.3, 1.0)
            x[label] = 0.9 if i == 3 else rng.uniform(0.0, 0.5)
            rows.append((x, int(i == 3)))
        return _group(rows, qid)

    train = [question(f"t{i}") for i in range(20)]
    held = [question(f"h{i}") for i in range(10)]
    weights = train_weights(train)
    assert set(weights) == set(FEATURES)
    assert weights["label"] > 0
    assert weights["cosine"] == hand_weights()["cosine"]  # not learned
    assert top1_rate(held, weights) == (10, 10)
    # scaled to the hand weights' L1 norm over the trained features
    total = sum(abs(weights[f]) for f in TRAINED)
    assert total == pytest.approx(sum(abs(hand_weights()[f]) for f in TRAINED), abs=1e-3)


def test_pairs_weigh_each_question_the_same_and_skip_unlabelled_ones() -> None:
    one = _group([([1.0], 1), ([0.0], 0)], "one")
    many = _group([([1.0], 1), ([0.0], 0), ([0.5], 0), ([0.2], 0)], "many")
    none = _group([([1.0], 0), ([0.0], 0)], "none")
    x, c = pairs([one, many, none])
    assert x.shape == (4, len(TRAINED))
    assert c.sum() == pytest.approx(2.0)
    w = fit_pairwise(x, c)
    assert w[0] > 0


def test_a_unit_is_right_when_the_judge_accepts_its_quote() -> None:
    q = EvalQuestion(
        id="q1",
        corpus="postgresql",
        question="What is the default of deadlock_timeout?",
        answer_patterns=(r"one second|1s",),
        expected_pages=("config.html",),
        kind="factual",
    )
    rows = label_units(q, [([0.0], "The default is one second (1s). [1]"), ([0.0], "Other.")])
    assert rows is not None and rows.labels == [1, 0]
    absent = q.model_copy(update={"kind": "absent", "expected_pages": ()})
    assert label_units(absent, [([0.0], "x")]) is None


def test_learned_weights_load_as_one_settings_object(tmp_path: Path) -> None:
    path = tmp_path / "weights.json"
    write_weights({"label": 0.9, "rank": 0.1}, path, sets=["s"], meta={})
    settings = EvidenceSettings(weights_file=path)
    assert (settings.w_label, settings.w_rank) == (0.9, 0.1)
    assert settings.w_block == EvidenceSettings().w_block  # not named: kept
    assert Weights.from_settings(settings).label == 0.9
    path.write_text(json.dumps({"weights": {"w_nothing": 1.0}}))
    with pytest.raises(ValidationError, match="w_nothing"):
        EvidenceSettings(weights_file=path)
    with pytest.raises(ValidationError, match="weights_file"):
        EvidenceSettings(weights_file=tmp_path / "missing.json")


def test_the_selector_trains_only_on_judged_sets() -> None:
    check_trainable(list(SETS), load_registry())


def test_the_retrieval_memo_key_is_what_is_asked_not_the_run_ids() -> None:
    # Each run builds its requests afresh (new event and request ids, a new time): the memo of
    # `ragstream ablate` and `ragstream selector` must still find the run before.
    import datetime as dt

    from bench.evaluation.run import memo_key
    from topics.queries import QueryRequest

    def request(query: str) -> QueryRequest:
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        return QueryRequest(tenant="default", query=query, deadline=deadline, top_n=50, top_k=10)

    first = memo_key("chunks", ["hybrid+none"], [request("What is a checkpoint?")])
    again = memo_key("chunks", ["hybrid+none"], [request("What is a checkpoint?")])
    other = memo_key("chunks", ["hybrid+none"], [request("What is a savepoint?")])
    assert first == again
    assert first != other
