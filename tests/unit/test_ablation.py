"""The rule ablation (``ragstream ablate``): which rules it finds, that switching one off is
undone, and the gains it counts (a fake answerer here; the command runs against the real
index in tests/integration/test_eval_command.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from bench.evaluation.ablation import (
    Outcome,
    ablate,
    ablation_table,
    all_rules,
    rule_switches,
    switched_off,
    weight_rules,
)
from bench.evaluation.questions import EvalQuestion
from ragstream.settings import Settings
from workers.evidence import answer as answer_module


def _qs(n: int) -> list[EvalQuestion]:
    return [
        EvalQuestion(
            id=f"q{i}", corpus="c", question=f"q{i}?", answer_patterns=(".",), kind="factual"
        )
        for i in range(n)
    ]


def test_the_rules_are_the_boolean_switches_and_the_weights() -> None:
    switches = rule_switches()
    assert switches["SAME_TERM"] is answer_module
    assert "CONTEXT_WEIGHT" not in switches  # a float constant is no switch
    assert "w_block" in weight_rules() and "w_pointer" in weight_rules()
    assert all_rules() == sorted(switches) + weight_rules()


def test_a_switch_is_restored_and_a_weight_is_off_only_in_the_copy() -> None:
    settings = Settings()
    with pytest.raises(RuntimeError), switched_off(settings, "SAME_TERM"):
        assert answer_module.SAME_TERM is False
        raise RuntimeError
    assert answer_module.SAME_TERM is True
    with switched_off(settings, "w_block") as off:
        assert off.evidence.w_block == 0.0
    assert settings.evidence.w_block > 0.0
    with pytest.raises(ValueError, match="unknown rule"), switched_off(settings, "NOPE"):
        pass


def test_gains_are_what_switching_a_rule_off_loses_on_the_blind_sets() -> None:
    def fake(settings: Settings, name: str, qs: Sequence[EvalQuestion]) -> list[Outcome]:
        # SAME_TERM wins the first question of every set; w_block costs the second of "b".
        same = answer_module.SAME_TERM
        block = settings.evidence.w_block > 0
        out = [("one" if same else "other", same, same)]
        out.append(("two", not (block and name == "b"), False))
        return out + [("x", False, False)] * (len(qs) - 2)

    sets = {"dev": _qs(3), "b": _qs(2), "c": _qs(4)}
    report = ablate(
        Settings(), sets, ["SAME_TERM", "w_block", "w_pointer"], blind=["b", "c"], answer=fake
    )
    assert report.questions == {"dev": 3, "b": 2, "c": 4}
    assert report.base["b"].correct == 1 and report.base["dev"].correct == 2
    same, block, pointer = report.rules
    assert (same.gain_correct, same.gain_first, same.changed_blind) == (2, 2, 2)
    assert same.sets["dev"].correct == 1 and same.sets["dev"].changed == 1
    assert (block.gain_correct, block.gain_first, block.changed_blind) == (-1, 0, 0)
    assert (pointer.gain_correct, pointer.changed_blind) == (0, 0)
    table = ablation_table(report)
    assert "| (all on) | | | | 2/3 | 1/2 | 2/4 |" in table
    assert "| `SAME_TERM` | +2 | +2 | 2 | 1 | 0 | 1 |" in table
    assert "b (blind)" in table and "| `w_block` | -1 | +0 | 0 |" in table
    assert answer_module.SAME_TERM is True


def test_an_unknown_rule_or_blind_set_is_refused_before_anything_runs() -> None:
    def never(*_: object) -> list[Outcome]:
        raise AssertionError("nothing runs")

    with pytest.raises(ValueError, match="unknown rules"):
        ablate(Settings(), {"a": _qs(1)}, ["SAME_TERM", "NOPE"], answer=never)
    with pytest.raises(ValueError, match="blind sets"):
        ablate(Settings(), {"a": _qs(1)}, ["SAME_TERM"], blind=["z"], answer=never)
