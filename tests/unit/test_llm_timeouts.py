"""The LLM backend's limits: time to first token and the gap between tokens, not a whole-request
limit (an answer that keeps streaming is never cut)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import httpx
import pytest

from workers.errors import BackendUnavailableError, MalformedGenerationError, code_of
from workers.generation.backend import GenerationRequest
from workers.generation.llamacpp_tokens import ServerTokenCounter
from workers.generation.openai_compat import OpenAICompatibleBackend
from workers.generation.prompt import Prompt


def _backend(first_delay: float, gap: float, n: int) -> OpenAICompatibleBackend:
    async def stream() -> AsyncIterator[bytes]:
        await asyncio.sleep(first_delay)
        for i in range(n):
            if i:
                await asyncio.sleep(gap)
            chunk = {"choices": [{"text": f"w{i} ", "finish_reason": None}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        yield b'data: {"choices": [{"text": "", "finish_reason": "stop"}]}\n\n'
        yield b"data: [DONE]\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return OpenAICompatibleBackend(
        "http://llm", "m", "completion", [], 64, timeout_s=1.0, token_gap_s=1.0, client=client
    )


def _request() -> GenerationRequest:
    return GenerationRequest(
        "r1", Prompt(style="completion", passages_used=[], prompt_tokens=3, text="Q")
    )


def test_a_slow_but_streaming_answer_is_not_cut() -> None:
    backend = _backend(first_delay=0.3, gap=0.25, n=8)  # 2 s in all, twice the TTFT limit
    result = asyncio.run(backend.generate(_request()))
    assert result.text.split() == [f"w{i}" for i in range(8)]
    assert result.total_ms > 1500


def test_no_first_token_in_time_is_a_transient_error() -> None:
    backend = _backend(first_delay=3.0, gap=0.0, n=1)
    with pytest.raises(BackendUnavailableError, match=r"no first token within 1\.0s"):
        asyncio.run(backend.generate(_request()))


def test_a_stalled_stream_is_a_transient_error() -> None:
    backend = _backend(first_delay=0.0, gap=3.0, n=3)
    with pytest.raises(BackendUnavailableError, match=r"no token for 1\.0s after 1 tokens"):
        asyncio.run(backend.generate(_request()))


def _backend_sending(*chunks: bytes) -> OpenAICompatibleBackend:
    async def stream() -> AsyncIterator[bytes]:
        yield b'data: {"choices": [{"text": "w0 ", "finish_reason": null}]}\n\n'
        for chunk in chunks:
            yield chunk
        yield b"data: [DONE]\n\n"

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=stream(), headers={"content-type": "text/event-stream"})

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return OpenAICompatibleBackend("http://llm", "m", "completion", [], 64, client=client)


@pytest.mark.parametrize(
    "chunk",
    [
        b'data: {"choices": [{"text": "w1"\n\n',  # cut JSON
        b"data: [1, 2]\n\n",  # not an object
        b'data: {"choices": "w1"}\n\n',  # choices not a list of objects
        b'data: {"choices": [{"text": 7}]}\n\n',  # text not a string
        b'data: {"choices": [{"text": ""}], "usage": [3]}\n\n',  # usage not an object
    ],
)
def test_a_chunk_not_in_the_apis_shape_is_a_typed_malformed_error(chunk: bytes) -> None:
    backend = _backend_sending(chunk)
    with pytest.raises(MalformedGenerationError, match="malformed stream chunk") as raised:
        asyncio.run(backend.generate(_request()))
    assert code_of(raised.value) == "BACKEND_UNAVAILABLE"


def test_a_well_formed_stream_after_the_checks_still_reads() -> None:
    backend = _backend_sending(
        b'data: {"choices": [{"text": "w1", "finish_reason": "length"}]}\n\n'
    )
    result = asyncio.run(backend.generate(_request()))
    assert result.text == "w0 w1" and result.finish_reason == "length"


@pytest.mark.parametrize(
    "body",
    [b"<html>busy</html>", b'{"error": "no model"}', b'{"tokens": 7}', b"[1, 2]"],
    ids=["not-json", "no-tokens", "tokens-not-a-list", "not-an-object"],
)
def test_a_tokenize_answer_without_a_token_list_is_a_typed_malformed_error(body: bytes) -> None:
    counter = ServerTokenCounter("http://llm")
    counter._client = httpx.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(200, content=body))
    )
    with pytest.raises(MalformedGenerationError, match="no token list") as caught:
        counter.count(["How do I change it?"])
    assert code_of(caught.value) == "BACKEND_UNAVAILABLE"


def test_a_tokenize_answer_with_a_token_list_is_counted() -> None:
    counter = ServerTokenCounter("http://llm")
    counter._client = httpx.Client(
        transport=httpx.MockTransport(
            lambda request: httpx.Response(200, json={"tokens": [1, 2, 3]})
        )
    )
    assert counter.count(["a b", "c"]) == [3, 3]
