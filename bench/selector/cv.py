"""Leave-one-set-out cross-validation of the learned selector weights (``ragstream selector cv``).

For every set: weights are trained on the units of all the other sets
(:func:`bench.selector.train.train_weights`), and the held-out set is answered through the
real evidence tier twice, with the hand weights and with the learned ones (settings
``evidence.w_*``; retrieval kept per set, :class:`bench.selector.data.SetRunner`). A set is
never answered by weights that saw its questions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from bench.selector.data import QuestionUnits, SetRunner
from bench.selector.train import top1_rate, train_weights

if TYPE_CHECKING:
    from bench.evaluation.questions import EvalQuestion
    from ragstream.settings import Settings

__all__ = ["FoldResult", "cross_validate", "cv_table", "with_weights"]


class FoldResult(BaseModel):
    """One held-out set, answered with the hand and the learned weights.

    Attributes:
        set: the held-out set (registry key).
        questions: its questions.
        hand_correct / learned_correct: right answers.
        hand_first / learned_first: answers whose first sentence states what was asked.
        changed: answers whose text differs between the two.
        hand_top1 / learned_top1 / with_right_unit: offline, the questions whose best quotable
            unit is right under each, of those with a right unit among their units.
        weights: the learned weights of the fold (feature names).
    """

    model_config = ConfigDict(frozen=True)

    set: str
    questions: int
    hand_correct: int
    learned_correct: int
    hand_first: int
    learned_first: int
    changed: int
    hand_top1: int
    learned_top1: int
    with_right_unit: int
    weights: dict[str, float]


def with_weights(settings: Settings, weights: Mapping[str, float]) -> Settings:
    """``settings`` with ``evidence.w_<name>`` set to each of ``weights``."""
    evidence = settings.evidence.model_copy(update={f"w_{k}": v for k, v in weights.items()})
    return settings.model_copy(update={"evidence": evidence})


def cross_validate(
    settings: Settings,
    sets: Mapping[str, Sequence[EvalQuestion]],
    groups: Sequence[QuestionUnits],
    runner: SetRunner,
    say: Callable[[str], None] = lambda _m: None,
) -> list[FoldResult]:
    """One :class:`FoldResult` per set of ``sets`` (``groups``: every set's labelled units).

    Raises:
        As :func:`bench.evaluation.run.run_evaluation`.
    """
    from bench.selector.train import hand_weights

    hand = hand_weights()
    out = []
    for held, qs in sets.items():
        train = [g for g in groups if g.set != held]
        test = [g for g in groups if g.set == held]
        weights = train_weights(train)
        say(f"held out {held}: learned {weights}")
        base = runner.answer(settings, held, qs).questions
        learned = runner.answer(with_weights(settings, weights), held, qs).questions
        hand_top1, n = top1_rate(test, hand)
        learned_top1, _ = top1_rate(test, weights)
        out.append(
            FoldResult(
                set=held,
                questions=len(qs),
                hand_correct=sum(bool(r.correct) for r in base),
                learned_correct=sum(bool(r.correct) for r in learned),
                hand_first=sum(bool(r.answer_first) for r in base),
                learned_first=sum(bool(r.answer_first) for r in learned),
                changed=sum(a.answer != b.answer for a, b in zip(base, learned, strict=True)),
                hand_top1=hand_top1,
                learned_top1=learned_top1,
                with_right_unit=n,
                weights=weights,
            )
        )
    return out


def cv_table(folds: Sequence[FoldResult]) -> str:
    """The folds as a Markdown table, with a total row."""
    head = (
        "| held-out set | questions | right: hand | right: learned | first: hand | "
        "first: learned | answers changed | best unit right (offline): hand | learned |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    rows = []
    for f in [*folds, _total(folds)]:
        name = f.set.removeprefix("bench/evaluation/questions.").removesuffix(".jsonl")
        rows.append(
            f"| {name} | {f.questions} | {f.hand_correct} | {f.learned_correct} | "
            f"{f.hand_first} | {f.learned_first} | {f.changed} | "
            f"{f.hand_top1}/{f.with_right_unit} | {f.learned_top1}/{f.with_right_unit} |"
        )
    return head + "\n".join(rows) + "\n"


def _total(folds: Sequence[FoldResult]) -> FoldResult:
    def total(name: str) -> int:
        return sum(int(getattr(f, name)) for f in folds)

    counted = [k for k in FoldResult.model_fields if k not in ("set", "weights")]
    return FoldResult(set="**all**", weights={}, **{k: total(k) for k in counted})
