"""Rule ablation of the evidence selector (``ragstream ablate``): every selection rule switched
off in turn over question sets, and what that changes.

A rule is either a switch (a module-level upper-case ``bool`` constant of ``workers/evidence/``,
such as ``SAME_TERM``; :func:`rule_switches`) or a weight of the unit score (``evidence.w_*`` of
:class:`ragstream.settings.EvidenceSettings`, off at 0.0). Each set is answered by the evidence
tier over the default retrieval mode (``hybrid+none`` unless ``rerank.backend`` says otherwise)
with every rule as configured (the base), then once per rule with that
rule off alone. Retrieval is done once per set (:data:`bench.evaluation.run.RetrievalMemo`): the
rules act after it.

A rule's *gain* on a set is what switching it off loses there: right answers and answers that
state what was asked first (base minus off; negative when the rule costs answers). ``changed``
counts the answers whose text differs from the base's. The gain that keeps a rule is its gain
summed over the *blind* sets (``--blind``): sets written by someone who read only the manuals
and never saw the system's answers (docs/evaluation.md, "The selector's rules"). Only counts
are reported, never a question or an answer, so a blind set's first run stays blind.

This is the leave-one-out ablation of feature studies (e.g. Kohavi and John 1997, "Wrappers for
feature subset selection"): it measures each rule given all the others, not their interactions.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import fields
from types import ModuleType

from pydantic import BaseModel, ConfigDict

from bench.evaluation.questions import EvalQuestion
from ragstream.settings import Settings

#: The modules whose upper-case ``bool`` constants are rule switches.
EVIDENCE_MODULES = (
    "workers.evidence.answer",
    "workers.evidence.lexical",
    "workers.evidence.segment",
    "workers.evidence.select",
    "workers.evidence.stage",
)
#: The answer tier an ablation measures: the evidence selector alone.
TIER = "evidence"


class SetCounts(BaseModel):
    """One set's answers under one configuration.

    Attributes:
        correct: right answers.
        answer_first: answers whose first sentence states what was asked.
        changed: answers whose text differs from the base configuration's (0 for the base).
    """

    model_config = ConfigDict(frozen=True)

    correct: int
    answer_first: int
    changed: int = 0


class RuleEffect(BaseModel):
    """What switching one rule off does.

    Attributes:
        rule: the switch's name or the weight's setting (``w_*``).
        kind: ``switch`` or ``weight``.
        sets: each set's counts with the rule off.
        gain_correct: right answers the rule wins on the blind sets (base minus off, summed).
        gain_first: answers first it wins on the blind sets.
        changed_blind: blind-set answers whose text it changes.
    """

    model_config = ConfigDict(frozen=True)

    rule: str
    kind: str
    sets: dict[str, SetCounts]
    gain_correct: int
    gain_first: int
    changed_blind: int


class AblationReport(BaseModel):
    """Every rule's effect (:class:`RuleEffect`) beside the base counts of every set.

    Attributes:
        sets: the set names, in the order given (blind ones included).
        blind: the names of the blind sets.
        questions: questions per set.
        base: each set's counts with every rule as configured.
        rules: one effect per rule, in the order asked.
    """

    model_config = ConfigDict(frozen=True)

    sets: list[str]
    blind: list[str]
    questions: dict[str, int]
    base: dict[str, SetCounts]
    rules: list[RuleEffect]


#: One answered question: its answer text, whether it is right, whether it answers first.
Outcome = tuple[str, bool, bool]
#: Answers a set under settings (the evidence tier over a memoised retrieval, :func:`answerer`).
AnswerSet = Callable[[Settings, str, Sequence[EvalQuestion]], list[Outcome]]


def rule_switches() -> dict[str, ModuleType]:
    """Every rule switch of :data:`EVIDENCE_MODULES` by name, with the module that holds it."""
    out: dict[str, ModuleType] = {}
    for name in EVIDENCE_MODULES:
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr.isupper() and isinstance(value, bool):
                out[attr] = module
    return out


def weight_rules() -> list[str]:
    """The weight settings of the unit score (``w_<field>`` of every
    :class:`workers.evidence.select.Weights` field)."""
    from workers.evidence.select import Weights

    return [f"w_{f.name}" for f in fields(Weights)]


def all_rules() -> list[str]:
    """Every rule: the switches by name, then the weights in their order."""
    return sorted(rule_switches()) + weight_rules()


@contextmanager
def switched_off(settings: Settings, rule: str) -> Iterator[Settings]:
    """``settings`` with ``rule`` off while the block runs: a weight at 0.0 in the settings
    yielded, a switch set to False in its module (restored after, also on an error).

    Raises:
        ValueError: ``rule`` is neither a switch nor a weight.
    """
    if rule in weight_rules():
        evidence = settings.evidence.model_copy(update={rule: 0.0})
        yield settings.model_copy(update={"evidence": evidence})
        return
    module = rule_switches().get(rule)
    if module is None:
        raise ValueError(f"unknown rule {rule!r}; rules: {', '.join(all_rules())}")
    before = getattr(module, rule)
    setattr(module, rule, False)
    try:
        yield settings
    finally:
        setattr(module, rule, before)


def answerer(tenant: str = "default", index_alias: str | None = None) -> AnswerSet:
    """The evidence tier over the default mode and the live index, retrieval kept per set.

    Raises (from the returned callable):
        As :func:`bench.evaluation.run.run_evaluation`.
    """
    from bench.evaluation.run import EvalOptions, RetrievalMemo, run_evaluation

    memos: dict[str, RetrievalMemo] = {}
    options = EvalOptions(
        modes=(), tiers=(TIER,), tenant=tenant, index_alias=index_alias, off_topic=None
    )

    def answer(settings: Settings, name: str, qs: Sequence[EvalQuestion]) -> list[Outcome]:
        report = run_evaluation(settings, qs, options, memo=memos.setdefault(name, {}))
        return [(q.answer or "", bool(q.correct), bool(q.answer_first)) for q in report.questions]

    return answer


def ablate(
    settings: Settings,
    sets: Mapping[str, Sequence[EvalQuestion]],
    rules: Sequence[str],
    *,
    blind: Sequence[str] = (),
    answer: AnswerSet,
    progress: Callable[[str], None] | None = None,
) -> AblationReport:
    """The effect of switching each of ``rules`` off alone, over every set of ``sets``.

    Args:
        settings: the configuration measured.
        sets: set name -> its questions.
        rules: rule names (:func:`all_rules`).
        blind: the names of the blind sets among ``sets``; the gains are summed over them.
        answer: answers a set (:func:`answerer`).

    Raises:
        ValueError: an unknown rule, or a blind set that is not in ``sets``.
    """
    say = progress or (lambda _msg: None)
    known = set(all_rules())
    unknown = [r for r in rules if r not in known]
    if unknown:
        raise ValueError(f"unknown rules {unknown}; rules: {', '.join(sorted(known))}")
    if missing := [b for b in blind if b not in sets]:
        raise ValueError(f"blind sets {missing} are not among the sets {list(sets)}")
    say(f"base: {', '.join(sets)}")
    base = {name: answer(settings, name, qs) for name, qs in sets.items()}
    effects = []
    for n, rule in enumerate(rules, start=1):
        say(f"rule {n}/{len(rules)}: {rule} off")
        with switched_off(settings, rule) as off_settings:
            off = {name: answer(off_settings, name, qs) for name, qs in sets.items()}
        counts = {name: _counts(off[name], base[name]) for name in sets}
        base_counts = {name: _counts(base[name], base[name]) for name in sets}
        effects.append(
            RuleEffect(
                rule=rule,
                kind="weight" if rule.startswith("w_") else "switch",
                sets=counts,
                gain_correct=sum(base_counts[b].correct - counts[b].correct for b in blind),
                gain_first=sum(base_counts[b].answer_first - counts[b].answer_first for b in blind),
                changed_blind=sum(counts[b].changed for b in blind),
            )
        )
    return AblationReport(
        sets=list(sets),
        blind=list(blind),
        questions={name: len(qs) for name, qs in sets.items()},
        base={name: _counts(base[name], base[name]) for name in sets},
        rules=effects,
    )


def _counts(outcomes: Sequence[Outcome], base: Sequence[Outcome]) -> SetCounts:
    return SetCounts(
        correct=sum(1 for _, right, _ in outcomes if right),
        answer_first=sum(1 for _, _, first in outcomes if first),
        changed=sum(1 for o, b in zip(outcomes, base, strict=True) if o[0] != b[0]),
    )


def ablation_table(report: AblationReport) -> str:
    """The report as a Markdown table: one row per rule, its blind gains (right / first), the
    blind answers it changes, then each set's right answers with the rule off (the base row
    first)."""
    head = ["rule", "blind gain right", "blind gain first", "blind changed"]
    head += [f"{s}{' (blind)' if s in report.blind else ''}" for s in report.sets]
    rows = [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        "| (all on) | | | | "
        + " | ".join(f"{report.base[s].correct}/{report.questions[s]}" for s in report.sets)
        + " |",
    ]
    for e in report.rules:
        cells = [
            f"`{e.rule}`",
            f"{e.gain_correct:+d}",
            f"{e.gain_first:+d}",
            str(e.changed_blind),
        ]
        cells += [str(e.sets[s].correct) for s in report.sets]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows) + "\n"
