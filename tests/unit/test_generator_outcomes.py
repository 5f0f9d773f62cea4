"""The generator never publishes garbage (issue 13): an empty completion falls back to the
evidence answer, a completion cut at its token limit is kept to its last whole sentence and
marked, a question over the prompt budget is a typed PROMPT_TOO_LONG error with citations, and the
LLM sees the evidence, not whole chunks."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import pytest

from ragstream.retry import RetryPolicy
from topics.queries import QueryRequest
from topics.reranked import FallbackAnswer, RerankedPassages
from topics.responses import EvidenceSpan, QueryResponse
from topics.retrieved import Candidate
from workers.errors import MalformedGenerationError
from workers.evidence.answer import AnswerPolicy, quote
from workers.generation.backend import GenerationRequest, GenerationResult, OnTokenFor
from workers.generation.generator import Generator
from workers.generation.prompt import PromptBuilder
from workers.runtime.handler import Emit

TEXT = (
    "Sets the amount of memory the database server uses for shared memory buffers. "
    "The default is typically 128 megabytes (128MB), but might be less if your kernel "
    "settings will not support it."
)


class Words:
    def count(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) for t in texts]


class Backend:
    """Answers every request with one fixed completion; remembers the prompts."""

    def __init__(self, text: str, finish: str = "stop") -> None:
        self.text, self.finish = text, finish
        self.prompts: list[str] = []
        self.budgets: list[int | None] = []

    async def generate_many(
        self,
        requests: Sequence[GenerationRequest],
        on_token_for: OnTokenFor | None = None,
        cancel_for: object = None,
    ) -> list[GenerationResult | Exception]:
        self.prompts.extend(str(r.prompt.messages or r.prompt.text) for r in requests)
        self.budgets.extend(r.max_tokens for r in requests)
        return [
            GenerationResult(r.request_id, self.text, 50, 7, self.finish, 12.0, 30.0)
            for r in requests
        ]

    async def aclose(self) -> None:
        return None


def _generator(backend: Backend, budget: int = 400) -> Generator:
    builder = PromptBuilder(Words(), budget + 64 + 8, 64, "chat")
    return Generator(
        backend,  # type: ignore[arg-type]
        builder,
        tokens=None,
        cache_keys=None,
        tier="small",
        backoff=RetryPolicy(max_attempts=1),
        stop=["\n\n"],
    )


def _event(question: str = "What is the default of shared_buffers?") -> RerankedPassages:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    request = QueryRequest(tenant="t", query=question, deadline=deadline)
    passage = Candidate(chunk_id="c1", doc_id="d1", text=TEXT, title="shared_buffers", score=1.0)
    start = TEXT.index("The default")
    end = TEXT.index("(128MB)") + len("(128MB),") - 1
    span = EvidenceSpan(
        n=1, chunk_id="c1", doc_id="d1", start=start, end=end, text=TEXT[start:end], score=1.2
    )
    # The evidence answer the evidence stage composed: what an unusable completion falls back on.
    text, quoted = quote((span,), AnswerPolicy())
    fallback = FallbackAnswer(text=text, cited=tuple(s.n for s in quoted))
    return RerankedPassages(
        tenant="t", request=request, passages=(passage,), evidence=(span,), fallback=fallback
    )


def _answer(generator: Generator, event: RerankedPassages) -> QueryResponse:
    try:
        [out] = generator.run([event])
    finally:
        generator.close()
    assert isinstance(out, Emit) and isinstance(out.event, QueryResponse)
    return out.event


def test_the_llm_sees_the_evidence_not_the_whole_chunk() -> None:
    backend = Backend("It is 128MB [1].")
    response = _answer(_generator(backend), _event())
    assert "128 megabytes" in backend.prompts[0] and "kernel settings" not in backend.prompts[0]
    assert response.answer == "It is 128MB [1]." and not response.truncated
    assert [c.chunk_id for c in response.citations] == ["c1"] and response.evidence


def test_an_empty_completion_falls_back_to_the_evidence_answer() -> None:
    for text in ("", "  ", "\n\n"):
        response = _answer(_generator(Backend(text)), _event())
        assert response.status == "answered"
        assert "128MB" in response.answer and response.answer.endswith("[1]")
        assert response.trace[-1].detail["outcome"] == "evidence"


def test_a_cut_completion_is_kept_to_its_last_sentence_and_marked() -> None:
    response = _answer(
        _generator(Backend("It is 128MB [1]. It can be raised when", "length")), _event()
    )
    assert response.answer == "It is 128MB [1]." and response.truncated
    no_sentence = _answer(_generator(Backend("It is 128MB and then", "length")), _event())
    assert not no_sentence.truncated and "(128MB)" in no_sentence.answer  # the evidence answer


def test_a_question_over_the_budget_is_prompt_too_long_with_citations() -> None:
    long_question = "why " * 500 + "?"
    response = _answer(_generator(Backend("x"), budget=120), _event(long_question))
    assert response.status == "failed" and response.error is not None
    assert response.error.code == "PROMPT_TOO_LONG"
    assert [c.chunk_id for c in response.citations] == ["c1"] and response.evidence


def test_the_fallback_is_the_composed_evidence_answer_and_evidence_is_compressed_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An unusable completion publishes the evidence answer the event carries (composed once,
    by the evidence stage), and the evidence is compressed once per generated answer."""
    import workers.generation.generator as generator_module

    calls: list[int] = []
    real = generator_module.compress

    def counting(*args: Any) -> Any:
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(generator_module, "compress", counting)
    carried = FallbackAnswer(text="Composed by the evidence stage [1].", cited=(1,))
    event = _event().model_copy(update={"fallback": carried})
    response = _answer(_generator(Backend("")), event)
    assert response.answer == carried.text and [c.n for c in response.citations] == [1]
    assert response.trace[-1].detail["outcome"] == "evidence"
    assert len(calls) == 1
    calls.clear()
    _answer(_generator(Backend("It is 128MB [1].")), _event())
    assert len(calls) == 1


@pytest.mark.parametrize(("asked", "sent"), [(None, None), (12, 12), (64, 64), (5000, 64)])
def test_the_requests_max_tokens_is_the_llms_budget_capped_by_the_pools(
    asked: int | None, sent: int | None
) -> None:
    backend = Backend("It is 128MB [1].")
    event = _event()
    event = event.model_copy(
        update={"request": event.request.model_copy(update={"max_tokens": asked})}
    )
    _answer(_generator(backend), event)  # the pool reserved 64 answer tokens
    assert backend.budgets == [sent]


def test_white_space_before_the_first_character_is_not_streamed() -> None:
    """A model that opens with a newline must not make every stream end with ``replace``: the
    recorded answer is stripped, so the streamed tokens start at its first character."""
    from topics.queries import QueryRequest
    from workers.generation.generator import TokenSink

    sent: list[tuple[int, str, bool]] = []
    sink = TokenSink(lambda emit: sent.append((emit.event.seq, emit.event.text, emit.event.final)))
    request = QueryRequest(
        tenant="t", query="q", deadline=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    )
    on_token, finish = sink.stream(request, first_seq=1)
    for text in ("\n", " ", "\nThe", " answer", " is 42.", " It is", " even."):
        on_token(text)
    finish("The answer is 42. It is even.")
    # A whole sentence at a time; the last one, held until the answer was judged, at the end.
    assert sent == [(1, "The answer is 42.", False), (2, " It is even.", False), (3, "", True)]
    assert "".join(t for _, t, _ in sent) == "The answer is 42. It is even."


def test_a_looping_completion_never_streams_its_loop() -> None:
    """What a stream shows is never more than what the judge keeps: no repeat of a line, and
    nothing of a completion the evidence answer replaces."""
    from topics.queries import QueryRequest
    from workers.generation.compress import judge
    from workers.generation.generator import TokenSink

    sent: list[str] = []
    sink = TokenSink(lambda emit: sent.append(emit.event.text))
    request = QueryRequest(
        tenant="t", query="q", deadline=dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    )
    loop = "Use venv [1]. Then activate it [1]." + " Use venv [1]." * 6 + " Use ve"
    on_token, finish = sink.stream(request)
    for i in range(0, len(loop), 3):
        on_token(loop[i : i + 3])
    judged = judge(loop, "length")
    assert judged.text == "Use venv [1]. Then activate it [1]." and judged.truncated
    finish(judged.text)
    assert "".join(sent) == judged.text and sent[-1] == ""
    assert sum("Use venv" in t for t in sent) == 1

    sent.clear()
    on_token, finish = sink.stream(request)
    for text in ("\\gset\nAnswer: ", "\\gset\nAnswer: ", "\\gset\nAnswer:"):
        on_token(text)
    assert judge("\\gset\nAnswer: \\gset\nAnswer: \\gset\nAnswer:", "length").fallback
    finish(None)  # replaced by the evidence answer: it showed nothing
    assert sent == [""]


class MalformedBackend(Backend):
    """Fails every request as the OpenAI-compatible backend does on an undecodable chunk."""

    async def generate_many(
        self,
        requests: Sequence[GenerationRequest],
        on_token_for: OnTokenFor | None = None,
        cancel_for: object = None,
    ) -> list[GenerationResult | Exception]:
        return [MalformedGenerationError("malformed stream chunk: 'data: {'") for _ in requests]


def test_a_malformed_generation_response_is_the_evidence_answer_not_a_500() -> None:
    response = _answer(_generator(MalformedBackend("")), _event())
    assert response.status == "answered" and response.error is None
    assert "128MB" in response.answer and response.answer.endswith("[1]")
    detail = response.trace[-1].detail
    assert detail["outcome"] == "evidence" and detail["finish"] == "malformed"


def test_a_malformed_generation_response_without_evidence_is_a_typed_error() -> None:
    event = _event().model_copy(update={"evidence": (), "fallback": None})
    response = _answer(_generator(MalformedBackend("")), event)
    assert response.status == "failed" and response.error is not None
    assert response.error.code == "BACKEND_UNAVAILABLE"
    assert "malformed" in response.error.message
