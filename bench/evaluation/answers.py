"""Answers of the answer tiers, produced exactly as the pools produce them.

The evidence comes from the rerank pool's evidence stage (:func:`workers.evidence.stage.
build_evidence_stage`, the same settings, selection and refusal), in batches of the rerank pool's
``max_batch``; the tier of each question is chosen by the same :func:`~workers.routing.
choose_tier`; the LLM tiers' answers come from each tier's :class:`~workers.generation.generator.
Generator` built by the pools' composition root (:func:`workers.pools.components.
build_generator`: the same backend, compressed evidence prompt budgeted in the serving model's
tokens, stop sequences, judging of completions and fallback to evidence), in batches of the tier
pool's ``max_batch``, all of a batch concurrently. Only the answer cache is left out, so that
evaluation answers never reach users.

A *tier configuration* (:class:`TierConfig`) says how questions are answered: ``routed`` is the
system's default router (``settings.evidence.tier_mode``); ``evidence`` answers every question
from its evidence; ``small``/``large`` send every question with usable evidence to that LLM tier;
``llm:<model>`` sends them to the small tier pointed at another llama.cpp server (a catalog model,
``--llm MODEL=URL``). Weak evidence is refused without an LLM in every configuration.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ragstream.settings import LLM_PROMPT_STYLES, Settings
from topics.queries import QueryRequest
from topics.reranked import RerankedPassages
from topics.responses import QueryResponse
from topics.retrieved import Candidate
from workers.evidence.select import Embeds, Evidence
from workers.evidence.stage import (
    EvidenceStage,
    build_evidence_stage,
    fallback_answer,
    to_contract,
)
from workers.generation.generator import Generator
from workers.routing import AnswerTier, TierPolicy, choose_tier
from workers.runtime.handler import Emit

#: Time a question may take through the generator's retries (it retries an unreachable
#: server until the request's deadline).
DEADLINE_S = 600
#: A citation mark of an answer: ``[3]``, or each number of ``[1, 3]``.
_CITE_RUN = re.compile(r"\[(\d+(?:\s*,\s*\d+)*)\]")


def cited_locations(text: str, by_number: Mapping[int, str]) -> tuple[str, ...]:
    """The locations (``source``, else ``doc_id``) of the passages ``text`` cites, in the order
    of their first citation mark; numbers not in ``by_number`` are skipped.

    Args:
        text: an answer with ``[n]`` marks.
        by_number: citation number -> the cited passage's location.
    """
    out: list[str] = []
    for m in _CITE_RUN.finditer(text):
        for part in m[1].split(","):
            where = by_number.get(int(part))
            if where is not None and where not in out:
                out.append(where)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class AnswerJob:
    """One question to answer: its request, its passages (best first) and the LLM tier the
    retrieval pool's router suggests for it."""

    request: QueryRequest
    passages: Sequence[Candidate]
    tier: str


@dataclass(frozen=True, slots=True)
class TierConfig:
    """How one evaluated configuration answers (see the module docstring).

    Attributes:
        name: ``routed``, ``evidence``, ``small``, ``large`` or ``llm:<model>``.
        policy: how the tier is chosen once the evidence is known.
        llm_tier: the generation tier LLM questions go to; ``None``: the router's suggestion.
        base_url: another OpenAI-compatible server for that tier (``llm:<model>``).
        prompt_style: its prompt style.
    """

    name: str
    policy: TierPolicy
    llm_tier: AnswerTier | None = None
    base_url: str | None = None
    prompt_style: str | None = None


def tier_configs(
    settings: Settings, names: Sequence[str], llms: Sequence[tuple[str, str]] = ()
) -> list[TierConfig]:
    """The configurations ``names`` (and one ``llm:<model>`` per ``(model, url)`` of ``llms``).

    Raises:
        ValueError: an unknown name, or a model that is not in the catalog.
    """
    ev = settings.evidence
    out = []
    for name in names:
        if name == "routed":
            out.append(TierConfig(name, TierPolicy(ev.tier_mode, ev.evidence_min_confidence)))
        elif name == "evidence":
            out.append(TierConfig(name, TierPolicy("evidence")))
        elif name in ("small", "large"):
            out.append(TierConfig(name, TierPolicy("llm"), llm_tier=name))  # type: ignore[arg-type]
        else:
            raise ValueError(f"unknown answer tier {name!r} (routed, evidence, small, large)")
    for model, url in llms:
        if model not in LLM_PROMPT_STYLES:
            raise ValueError(
                f"unknown model {model!r}; the catalog has {sorted(LLM_PROMPT_STYLES)}"
            )
        out.append(
            TierConfig(
                f"llm:{model}",
                TierPolicy("llm"),
                llm_tier="small",
                base_url=url.rstrip("/"),
                prompt_style=LLM_PROMPT_STYLES[model],
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class Answer:
    """One answer of one configuration.

    Attributes:
        text: the answer (an error response's message when ``error`` is set).
        error: the error code of an error response, else ``None``.
        tier: the tier that answered (``evidence``, ``small``, ``large``).
        outcome: ``evidence`` (quoted evidence), ``refusal``, ``llm`` (the model's text),
            ``fallback`` (an unusable completion replaced by the evidence answer) or ``error``.
        judged: why a completion was cut or replaced ("" when it was used as is).
        truncated: the LLM's answer hit its token limit and was cut at a sentence.
        prompt_tokens: prompt size in the serving model's tokens (0 for the evidence tier).
        completion_tokens: tokens generated.
        latency_ms: evidence stage plus generation, as the question's batches took them.
        cited: locations of the cited passages, first cited first (:func:`cited_locations`).
    """

    text: str
    error: str | None
    tier: str
    outcome: str
    judged: str = ""
    truncated: bool = False
    prompt_tokens: int = 0
    completion_tokens: int = 0
    latency_ms: float = 0.0
    cited: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        """The model produced no usable text (empty, stop-only or repeating)."""
        return self.judged in ("empty", "repeated", "length_no_sentence")


@dataclass
class _Evidence:
    evidence: list[Evidence] = field(default_factory=list)
    ms: list[float] = field(default_factory=list)


class Answerer:
    """Answers questions in any :class:`TierConfig` (generators built lazily, one per config).

    Args:
        settings: the settings tree (``evidence``, ``generation``, ``llm``, ``pools``).
        embedder: the query-side embedder of the evidence stage (``None``: lexical only).
        max_tokens: answer budget in tokens; ``None`` keeps the tier's setting.
        instruction: replaces the evidence prompt's instruction to compare prompts.
    """

    def __init__(
        self,
        settings: Settings,
        embedder: Embeds | None,
        max_tokens: int | None = None,
        instruction: str | None = None,
    ) -> None:
        self.instruction = instruction
        if max_tokens is not None:
            llm = settings.llm.model_copy(update={"max_tokens": max_tokens})
            tiers = {
                t: getattr(settings.generation, t).model_copy(update={"max_tokens": max_tokens})
                for t in ("small", "large")
            }
            generation = settings.generation.model_copy(update=tiers)
            settings = settings.model_copy(update={"llm": llm, "generation": generation})
        self.settings = settings
        dense = settings.evidence.dense_top > 0
        from ingest.factory import build_vocabulary

        self.stage: EvidenceStage = build_evidence_stage(
            settings.evidence,
            embedder if dense else None,
            build_vocabulary(settings),
            settings.rerank,
        )
        self._generators: dict[tuple[str, str], Generator] = {}
        self._evidence: dict[int, _Evidence] = {}

    def evidence(self, jobs: Sequence[AnswerJob]) -> _Evidence:
        """Every job's evidence, selected in batches of the rerank pool's ``max_batch`` (one
        embedding call a batch); each question's time is its batch's."""
        key = id(jobs)
        if key not in self._evidence:
            found = _Evidence()
            size = self.settings.pools.rerank.max_batch
            for start in range(0, len(jobs), size):
                batch = jobs[start : start + size]
                t = time.perf_counter()
                found.evidence.extend(self.stage.select([(j.request, j.passages) for j in batch]))
                found.ms.extend([(time.perf_counter() - t) * 1000] * len(batch))
            self._evidence[key] = found
        return self._evidence[key]

    def answer(self, jobs: Sequence[AnswerJob], config: TierConfig) -> list[Answer]:
        """Answers of ``config`` in input order.

        Raises:
            PromptTooLongError: the instruction alone exceeds the prompt budget.
            BackendUnavailableError: the token counter's server is unreachable.
        """
        found = self.evidence(jobs)
        out: dict[int, Answer] = {}
        llm: dict[str, list[int]] = {}
        for i, (job, evidence) in enumerate(zip(jobs, found.evidence, strict=True)):
            suggested: AnswerTier = config.llm_tier or ("large" if job.tier == "large" else "small")
            tier, _ = choose_tier(
                job.request, suggested, evidence, self.stage.policy_for(job.request), config.policy
            )
            if tier == "evidence":
                composed, _ = self.stage.compose_answer(job.request, job.passages, evidence)
                outcome = "refusal" if composed.refused else "evidence"
                where = {n: c.source or c.doc_id for n, c in enumerate(job.passages, start=1)}
                out[i] = Answer(
                    composed.text,
                    None,
                    "evidence",
                    outcome,
                    latency_ms=found.ms[i],
                    cited=cited_locations(composed.text, where),
                )
            else:
                llm.setdefault(tier, []).append(i)
        for llm_tier, indices in sorted(llm.items()):
            generator = self._generator(config, llm_tier)
            size = getattr(self.settings.pools, f"generation_{llm_tier}").max_batch
            for start in range(0, len(indices), size):
                batch = indices[start : start + size]
                answers = self._batch(generator, jobs, found, batch, llm_tier)
                out.update(zip(batch, answers, strict=True))
        return [out[i] for i in range(len(jobs))]

    def _generator(self, config: TierConfig, tier: str) -> Generator:
        from workers.pools.components import build_generator

        key = (config.name, tier)
        if key not in self._generators:
            settings = self.settings
            if config.base_url is not None:
                cfg = getattr(settings.generation, tier).model_copy(
                    update={"base_url": config.base_url, "prompt_style": config.prompt_style}
                )
                generation = settings.generation.model_copy(update={tier: cfg})
                settings = settings.model_copy(update={"generation": generation})
            generator = build_generator(settings, tier, None)
            generator.cache_keys = None  # an evaluation never leaves answers for a cache
            if self.instruction is not None:
                generator.builder.instruction = self.instruction
            self._generators[key] = generator
        return self._generators[key]

    def _batch(
        self,
        generator: Generator,
        jobs: Sequence[AnswerJob],
        found: _Evidence,
        batch: list[int],
        tier: str,
    ) -> list[Answer]:
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=DEADLINE_S)
        events = [
            RerankedPassages(
                tenant=jobs[i].request.tenant,
                request=jobs[i].request.model_copy(update={"deadline": deadline}),
                passages=tuple(jobs[i].passages),
                tier="large" if tier == "large" else "small",
                evidence=tuple(to_contract(s, jobs[i].passages) for s in spans),
                fallback=fallback_answer(composed),
            )
            for i in batch
            for composed, spans in [
                self.stage.compose_answer(jobs[i].request, jobs[i].passages, found.evidence[i])
            ]
        ]
        started = time.perf_counter()
        outcomes = generator.run(events)
        took_ms = (time.perf_counter() - started) * 1000
        answers = []
        for i, outcome in zip(batch, outcomes, strict=True):
            assert isinstance(outcome, Emit) and isinstance(outcome.event, QueryResponse)
            answers.append(_from_response(outcome.event, tier, found.ms[i] + took_ms))
        return answers

    def close(self) -> None:
        """Close every generator's backend, token counter and event loop."""
        for generator in self._generators.values():
            generator.close()
        self._generators.clear()


def _from_response(r: QueryResponse, tier: str, latency_ms: float) -> Answer:
    if r.error is not None:
        return Answer(r.error.message, r.error.code, tier, "error", latency_ms=latency_ms)
    detail = r.trace[-1].detail if r.trace else {}
    outcome = str(detail.get("outcome", "llm"))
    where = {c.n: c.source or c.doc_id for c in r.citations}
    return Answer(
        r.answer,
        None,
        tier,
        "fallback" if outcome == "evidence" else outcome,
        judged=str(detail.get("judged", "")),
        truncated=r.truncated,
        prompt_tokens=r.usage.prompt_tokens,
        completion_tokens=r.usage.completion_tokens,
        latency_ms=latency_ms,
        cited=cited_locations(r.answer, where),
    )
