"""Answers of the default configuration, generated exactly as the generation pools do.

Each tier's :class:`workers.generation.generator.Generator` is built by the pools' own composition
root (:func:`workers.pools.components.build_generator`): the same OpenAI-compatible backend
(the local llama.cpp server by default), the same :class:`PromptBuilder` budgeted in the
serving model's tokens, the same stop sequences and ``max_tokens``. Only the answer cache is
left out, so that evaluation answers never reach users. Questions are routed to a tier by the
retrieval pool's :class:`workers.routing.Router` and sent in batches of the tier pool's
``max_batch``, all of a batch concurrently (the server batches them).
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ragstream.settings import Settings
from topics.queries import QueryRequest
from topics.reranked import RerankedPassages
from topics.responses import QueryResponse
from topics.retrieved import Candidate
from workers.generation.generator import NOT_FOUND, Generator
from workers.runtime.handler import Emit

#: Time a question may take through the generator's retries (it retries an unreachable
#: server until the request's deadline).
DEADLINE_S = 600


@dataclass(frozen=True, slots=True)
class AnswerJob:
    """One question to answer: its request, its passages (best first) and its tier."""

    request: QueryRequest
    passages: Sequence[Candidate]
    tier: str


@dataclass(frozen=True, slots=True)
class Answer:
    """A generated answer.

    Attributes:
        text: the answer (an error response's message when ``error`` is set).
        error: the error code of an error response, else ``None``.
        prompt_tokens: prompt size in the serving model's tokens.
        completion_tokens: tokens generated.
        batch_s: wall time of the batch the answer was generated in, seconds.
    """

    text: str
    error: str | None
    prompt_tokens: int
    completion_tokens: int
    batch_s: float

    @property
    def empty(self) -> bool:
        """The model generated no text (at most the one token that hit a stop sequence), and
        the generation pool answered its not-in-the-documents sentence in its place."""
        return self.error is None and self.text == NOT_FOUND and self.completion_tokens <= 1


class Answerer:
    """Generates answers with the pools' generators (built lazily, one per tier).

    Args:
        settings: the settings tree (``generation``, ``llm``, ``pools``).
        max_tokens: answer budget in tokens; ``None`` keeps the tier's setting.
        instruction: replaces the prompt's instruction
            (:data:`workers.generation.prompt.INSTRUCTION`) to compare prompts; ``None`` keeps
            the pool's.
    """

    def __init__(
        self, settings: Settings, max_tokens: int | None = None, instruction: str | None = None
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
        self._generators: dict[str, Generator] = {}

    def _generator(self, tier: str) -> Generator:
        from workers.pools.components import build_generator

        if tier not in self._generators:
            generator = build_generator(self.settings, tier, None)
            generator.cache = None  # an evaluation must never answer users from its cache
            if self.instruction is not None:
                generator.builder.instruction = self.instruction
            self._generators[tier] = generator
        return self._generators[tier]

    def answer(self, jobs: Sequence[AnswerJob]) -> list[Answer]:
        """Answers in input order, batch by batch per tier.

        Raises:
            PromptTooLongError: the instruction alone exceeds the prompt budget.
            BackendUnavailableError: the token counter's server is unreachable.
        """
        out: dict[int, Answer] = {}
        for tier in sorted({j.tier for j in jobs}):
            generator = self._generator(tier)
            size = getattr(self.settings.pools, f"generation_{tier}").max_batch
            indices = [i for i, j in enumerate(jobs) if j.tier == tier]
            for start in range(0, len(indices), size):
                batch = indices[start : start + size]
                for i, answer in zip(batch, self._batch(generator, jobs, batch), strict=True):
                    out[i] = answer
        return [out[i] for i in range(len(jobs))]

    def _batch(
        self, generator: Generator, jobs: Sequence[AnswerJob], batch: list[int]
    ) -> list[Answer]:
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=DEADLINE_S)
        events = [
            RerankedPassages(
                tenant=jobs[i].request.tenant,
                request=jobs[i].request.model_copy(update={"deadline": deadline}),
                passages=tuple(jobs[i].passages),
                tier="large" if jobs[i].tier == "large" else "small",
            )
            for i in batch
        ]
        started = time.perf_counter()
        outcomes = generator.run(events)
        took = time.perf_counter() - started
        answers = []
        for outcome in outcomes:
            assert isinstance(outcome, Emit) and isinstance(outcome.event, QueryResponse)
            r = outcome.event
            error = r.error.code if r.error is not None else None
            text = r.answer if r.error is None else r.error.message
            answers.append(
                Answer(text, error, r.usage.prompt_tokens, r.usage.completion_tokens, took)
            )
        return answers

    def close(self) -> None:
        """Close every generator's backend, token counter and event loop."""
        for generator in self._generators.values():
            generator.close()
        self._generators.clear()
