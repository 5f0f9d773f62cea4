"""The generation backend against the real llama.cpp server (``xllamacpp``) that infra starts.

The served model is Gemma 3 270M *base*: it gets a plain extractive question right with the
completion prompt (the secret-code case below), but nothing harder is asserted about quality.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

import infra
from infra.llm_service import LlmService
from ragstream.settings import Settings
from topics.retrieved import Candidate
from workers.errors import BackendUnavailableError
from workers.generation import (
    GenerationRequest,
    GenerationResult,
    OpenAICompatibleBackend,
    PromptBuilder,
    ServerTokenCounter,
    n_ctx_per_slot,
)
from workers.generation.backend import OnToken


@pytest.fixture(scope="module")
def llm() -> Settings:
    """Settings whose LLM server is up (started through infra when it is not running)."""
    settings = Settings()
    healthy, _ = LlmService(settings).probe(2.0)
    if not healthy:
        infra.up(settings, only=["llm"])
    return settings


@pytest.fixture(scope="module")
def counter(llm: Settings) -> Iterator[ServerTokenCounter]:
    tokens = ServerTokenCounter(llm.llm.base_url)
    yield tokens
    tokens.close()


@pytest.fixture(scope="module")
def slot_ctx(llm: Settings) -> int:
    return n_ctx_per_slot(llm.llm.base_url, llm.llm.n_ctx, llm.llm.n_parallel)


def backend(settings: Settings, base_url: str | None = None) -> OpenAICompatibleBackend:
    return OpenAICompatibleBackend(
        base_url or settings.llm.base_url,
        "gemma3-270m",
        "completion",
        settings.llm.stop,
        32,
        temperature=0.0,
        timeout_s=60.0,
    )


def passage(n: int, text: str, title: str = "Notes") -> Candidate:
    return Candidate(
        chunk_id=f"c{n}", doc_id=f"d{n}", text=text, title=title, source=f"doc{n}.md", score=1.0
    )


def run_one(
    settings: Settings,
    builder: PromptBuilder,
    question: str,
    passages: list[Candidate],
    on_token: OnToken | None = None,
) -> GenerationResult:
    async def go() -> GenerationResult:
        b = backend(settings)
        try:
            prompt = await asyncio.to_thread(builder.build, question, passages)
            return await b.generate(GenerationRequest("r1", prompt), on_token)
        finally:
            await b.aclose()

    return asyncio.run(go())


def test_slot_context_comes_from_the_server(llm: Settings, slot_ctx: int) -> None:
    assert slot_ctx == llm.llm.n_ctx // llm.llm.n_parallel


def test_extractive_answer(llm: Settings, counter: ServerTokenCounter, slot_ctx: int) -> None:
    builder = PromptBuilder(counter, slot_ctx, 32)
    result = run_one(
        llm, builder, "What is the secret code?", [passage(1, "The secret code is 4711.", "Vault")]
    )
    assert "4711" in result.text
    assert result.finish_reason == "stop"
    assert result.prompt_tokens > 0 and result.completion_tokens > 0
    assert result.ttft_ms is not None and 0 < result.ttft_ms <= result.total_ms


def test_streamed_tokens_concatenate_to_the_answer(
    llm: Settings, counter: ServerTokenCounter, slot_ctx: int
) -> None:
    pieces: list[tuple[float, str]] = []

    async def on_token(text: str) -> None:
        pieces.append((time.perf_counter(), text))

    builder = PromptBuilder(counter, slot_ctx, 32)
    text = "Alice lives in Paris. Bob lives in Rome. Carol lives in Oslo."
    result = run_one(llm, builder, "Where does Bob live?", [passage(1, text)], on_token)
    assert len(pieces) >= 2
    assert "".join(p for _, p in pieces) == result.text
    assert [t for t, _ in pieces] == sorted(t for t, _ in pieces)
    assert result.completion_tokens >= len(pieces)


def test_four_concurrent_requests_all_succeed(
    llm: Settings, counter: ServerTokenCounter, slot_ctx: int
) -> None:
    builder = PromptBuilder(counter, slot_ctx, 32)
    codes = [1234, 5678, 4711, 9001]
    prompts = [
        builder.build("What is the secret code?", [passage(1, f"The secret code is {c}.")])
        for c in codes
    ]
    streamed: dict[str, list[str]] = {f"r{i}": [] for i in range(4)}

    async def go() -> list[GenerationResult | Exception]:
        b = backend(llm)
        try:
            requests = [GenerationRequest(f"r{i}", p) for i, p in enumerate(prompts)]
            return await b.generate_many(requests, lambda rid: streamed[rid].append)
        finally:
            await b.aclose()

    results = asyncio.run(go())
    assert all(isinstance(r, GenerationResult) for r in results)
    for i, result in enumerate(results):
        assert isinstance(result, GenerationResult)
        assert result.request_id == f"r{i}"
        assert "".join(streamed[f"r{i}"]) == result.text
        assert str(codes[i]) in result.text


def test_overlong_context_is_budgeted_and_accepted(
    llm: Settings, counter: ServerTokenCounter, slot_ctx: int
) -> None:
    words = " ".join(f"word{i % 97} lorem" for i in range(150))  # 300 words
    passages = [passage(n, f"Passage {n}. {words}") for n in range(1, 51)]
    builder = PromptBuilder(counter, slot_ctx, 32)
    prompt = builder.build("What does passage 1 say?", passages)
    assert prompt.dropped > 0
    assert prompt.prompt_tokens + 32 <= slot_ctx
    result = run_one(llm, builder, "What does passage 1 say?", passages)
    assert result.prompt_tokens <= slot_ctx
    assert result.prompt_tokens + result.completion_tokens <= slot_ctx
    assert abs(result.prompt_tokens - prompt.prompt_tokens) <= 2  # the counter is the server's


def test_closed_port_is_backend_unavailable(llm: Settings, counter: ServerTokenCounter) -> None:
    prompt = PromptBuilder(counter, 2048, 32).build("Q?", [passage(1, "x")])

    async def go() -> None:
        b = backend(llm, base_url="http://127.0.0.1:9")  # discard port: nothing listens
        try:
            await b.generate(GenerationRequest("r1", prompt))
        finally:
            await b.aclose()

    started = time.monotonic()
    with pytest.raises(BackendUnavailableError):
        asyncio.run(go())
    assert time.monotonic() - started < 2.0
