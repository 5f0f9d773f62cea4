"""Training data of the learned answer-sentence selector (``ragstream selector data``, issue 50).

Per answerable question of every set of :data:`SETS`: every unit the evidence selector scored
(:meth:`workers.evidence.select.EvidenceSelector.features`: sentences, rows, code, terms ...)
with its feature vector (:data:`workers.evidence.select.FEATURES`, the exact terms the unit
score sums before weighting) and its label: 1 when the unit, rendered as the evidence tier
would quote it alone (:func:`workers.evidence.answer.render_span`), is a right answer by the
evaluation's own judge (:func:`bench.evaluation.metrics.is_correct`: one of the question's
``answer_patterns`` matches, case-insensitive), else 0.

The passages are those the evidence tier is given in ``ragstream eval`` (the default mode, the
served passages with their promoted candidates, the definition entries set aside), retrieved
once per set (:class:`SetRunner` keeps a :data:`bench.evaluation.run.RetrievalMemo` per set,
as ``ragstream ablate`` does): answering a set again under other weights retrieves nothing.

Only sets that ``bench/evaluation/judged.json`` allows are read (dev sets, and blind sets on or
after the day they were judged; :func:`bench.rerank.judged.check_trainable`).
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from bench.rerank.judged import check_trainable, load_registry
from ragstream.settings import PROJECT_ROOT

if TYPE_CHECKING:
    from bench.evaluation.questions import EvalQuestion
    from bench.evaluation.report import EvalReport
    from bench.evaluation.run import RetrievalMemo
    from ragstream.settings import Settings
    from topics.retrieved import Candidate

__all__ = [
    "DATA_PATH",
    "SETS",
    "QuestionUnits",
    "SetRunner",
    "label_units",
    "load_sets",
    "read_data",
    "write_data",
]

#: The labelled sets (registry keys of ``bench/evaluation/judged.json``) over the two manuals:
#: the reranker's training sets (:data:`bench.rerank.data.TRAINING_SETS`) but the tenant set,
#: whose small corpora are not in the manuals' index.
SETS: tuple[str, ...] = (
    "shared/eval/questions.jsonl",
    "bench/evaluation/questions.dev.jsonl",
    "bench/evaluation/questions.sample.jsonl",
    "bench/evaluation/questions.fresh.jsonl",
    "bench/evaluation/questions.newuser.jsonl",
    "bench/evaluation/questions.blind-2026-12-04.jsonl",
    "bench/evaluation/questions.blind-2026-12-04b.jsonl",
    "bench/evaluation/questions.blind-2026-12-04c.jsonl",
    "bench/evaluation/questions.blind-2026-12-05.jsonl",
    "bench/evaluation/questions.blind-2026-12-07.jsonl",
)
#: Where ``ragstream selector data`` writes its rows.
DATA_PATH = PROJECT_ROOT / ".local" / "selector" / "data.jsonl"


@dataclass(frozen=True, slots=True)
class QuestionUnits:
    """One answerable question's scored units.

    Attributes:
        set: the question's set (registry key).
        id: the question's id in its set.
        features: per unit, its features (:data:`workers.evidence.select.FEATURES` order).
        labels: per unit, 1 when its rendered quote is a right answer, else 0.
        texts: per unit, its rendered quote ("" for a unit that cannot be quoted alone).
    """

    set: str
    id: str
    features: list[list[float]]
    labels: list[int]
    texts: list[str]

    @property
    def positives(self) -> int:
        """Units whose quote is a right answer."""
        return sum(self.labels)


def set_path(key: str) -> Path:
    """The file of a set's registry key (``shared/...`` lies beside the checkout)."""
    return (PROJECT_ROOT.parent if key.startswith("shared/") else PROJECT_ROOT) / key


def load_sets(
    keys: Sequence[str] = SETS, *, on: dt.date | None = None
) -> dict[str, list[EvalQuestion]]:
    """The questions of every set of ``keys`` present here, by key, after checking each against
    the judged registry.

    Raises:
        ConfigurationError: a set is not a dev set nor judged blind by ``on`` (today).
    """
    from bench.evaluation.questions import load_questions

    check_trainable(list(keys), load_registry(), on=on)
    return {k: load_questions(set_path(k)) for k in keys if set_path(k).is_file()}


class SetRunner:
    """Answers question sets through the evidence tier over the default retrieval mode, each
    set retrieved once (one :data:`~bench.evaluation.run.RetrievalMemo` per set name).

    Args:
        tenant: the tenant whose chunks are searched.
        index_alias: the chunk index alias; ``None``: the settings'.
    """

    def __init__(self, tenant: str = "default", index_alias: str | None = None) -> None:
        from bench.evaluation.run import EvalOptions

        self.options = EvalOptions(
            modes=(), tiers=("evidence",), tenant=tenant, index_alias=index_alias, off_topic=None
        )
        self.memos: dict[str, RetrievalMemo] = {}

    def answer(self, settings: Settings, name: str, qs: Sequence[EvalQuestion]) -> EvalReport:
        """The evaluation report of ``qs`` answered by the evidence tier under ``settings``.

        Raises:
            As :func:`bench.evaluation.run.run_evaluation`.
        """
        from bench.evaluation.run import run_evaluation

        return run_evaluation(settings, qs, self.options, memo=self.memos.setdefault(name, {}))

    def selector_inputs(
        self, settings: Settings, name: str, qs: Sequence[EvalQuestion]
    ) -> tuple[list[tuple[str, Sequence[Candidate]]], list[str]]:
        """What the evidence selector reads for each question of ``qs`` when the set is
        answered under ``settings``: ``(question, passages)`` pairs and the text each asker was
        shown (:func:`workers.evidence.stage.selector_input`), rebuilt from the retrieval the
        evaluation kept.

        Raises:
            RuntimeError: the evaluation's requests could not be rebuilt (its memo key changed).
            As :func:`bench.evaluation.run.run_evaluation`.
        """
        from bench.evaluation.run import (
            conversation,
            default_mode,
            earlier_answers,
            memo_key,
            run_evaluation,
            served_passages,
        )
        from topics.queries import QueryRequest
        from workers.evidence.stage import selector_input

        memo = self.memos.setdefault(name, {})
        earlier = earlier_answers(settings, qs, self.options, lambda _m: None, memo)
        run_evaluation(settings, qs, self.options, earlier=earlier, memo=memo)
        top_n = self.options.top_n or settings.retrieval.top_n
        top_k = self.options.top_k or settings.rerank.top_k
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        requests = [
            QueryRequest(
                tenant=self.options.tenant,
                query=q.question,
                conversation=conversation(q, earlier),
                deadline=deadline,
                top_n=top_n,
                top_k=top_k,
            )
            for q in qs
        ]
        alias = self.options.index_alias or settings.elasticsearch.index_alias
        default = default_mode(settings)
        key = memo_key(alias, (default,), requests)
        if key not in memo:
            raise RuntimeError("the evaluation's retrieval memo has no entry for these requests")
        _, run, definitions = memo[key]
        served = served_passages(requests, run.lists[default], run.candidates, definitions, top_k)
        return selector_input(list(zip(requests, served, strict=True)))


def label_units(
    q: EvalQuestion, units: Iterable[tuple[Sequence[float], str]]
) -> QuestionUnits | None:
    """``q``'s units (``(features, rendered quote)`` each) labelled by the evaluation's judge;
    ``None`` for a question that is not answerable (its right answer is a refusal)."""
    from bench.evaluation.metrics import is_correct
    from bench.evaluation.questions import REFUSAL_KINDS

    if q.kind in REFUSAL_KINDS or not q.answerable:
        return None
    rows = list(units)
    return QuestionUnits(
        set="",
        id=q.id,
        features=[list(x) for x, _ in rows],
        labels=[int(bool(t) and is_correct(t, q.answer_patterns)) for _, t in rows],
        texts=[t for _, t in rows],
    )


def collect(
    settings: Settings,
    sets: dict[str, list[EvalQuestion]],
    runner: SetRunner,
    say: Callable[[str], None] = lambda _m: None,
) -> list[QuestionUnits]:
    """Every answerable question's labelled units, set by set (the selector under
    ``settings``' weights; ``dense_top`` is left at 0: the cosine is not learned).

    Raises:
        As :meth:`SetRunner.selector_inputs`.
    """
    from dataclasses import replace

    from ingest.factory import build_vocabulary
    from workers.evidence.answer import render_span
    from workers.evidence.stage import build_evidence_stage

    lexical = settings.evidence.model_copy(update={"dense_top": 0})
    selector = build_evidence_stage(lexical, None, build_vocabulary(settings)).selector
    out: list[QuestionUnits] = []
    for key, qs in sets.items():
        say(f"{key}: retrieving and scoring {len(qs)} questions")
        pairs, _ = runner.selector_inputs(settings, key, qs)
        found = selector.features(pairs)
        for q, rows in zip(qs, found, strict=True):
            units = [(r.features, render_span(r.span) if r.span else "") for r in rows]
            labelled = label_units(q, units)
            if labelled is not None:
                out.append(replace(labelled, set=key))
    return out


def write_data(rows: Iterable[QuestionUnits], path: Path = DATA_PATH) -> int:
    """Write ``rows`` as JSON lines (one question a line); returns the lines written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("w") as f:
        for row in rows:
            f.write(json.dumps(asdict(row)) + "\n")
            n += 1
    return n


def read_data(path: Path = DATA_PATH) -> list[QuestionUnits]:
    """The rows :func:`write_data` wrote."""
    with path.open() as f:
        return [QuestionUnits(**json.loads(line)) for line in f if line.strip()]
