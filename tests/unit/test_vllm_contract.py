"""Contract test: vLLM's OpenAI-compatible server (``vllm serve``, the supported vLLM path)
replayed through :class:`~workers.generation.openai_compat.OpenAICompatibleBackend`.

The responses are vLLM's documented shapes (``tests/fixtures/openai/vllm-server.json`` names
where they come from): a stream cut by ``max_tokens`` (``finish_reason: "length"``) ending with
the ``stream_options.include_usage`` usage chunk (``choices: []``), the 400 ``ErrorResponse`` of
a prompt over the context window in both of vLLM's error layouts, and errors inside a stream.
An ``httpx.MockTransport`` plays the server and records what the backend sent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstream.errors import PermanentError
from workers.errors import BackendUnavailableError, PromptTooLongError
from workers.generation.backend import GenerationRequest
from workers.generation.openai_compat import OpenAICompatibleBackend
from workers.generation.prompt import Prompt, PromptStyle

VLLM: dict[str, Any] = json.loads(
    (Path(__file__).parents[1] / "fixtures" / "openai" / "vllm-server.json").read_text("utf-8")
)
SSE = {"content-type": "text/event-stream"}


def _replay(
    style: PromptStyle, response: httpx.Response
) -> tuple[OpenAICompatibleBackend, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append({"path": request.url.path, "body": json.loads(request.content)})
        return response

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    backend = OpenAICompatibleBackend(
        "http://vllm:8000", "Qwen/Qwen2.5-7B-Instruct", style, [], 4, client=client
    )
    return backend, sent


def _request(style: PromptStyle) -> GenerationRequest:
    if style == "chat":
        prompt = Prompt(
            style="chat", passages_used=[], prompt_tokens=812,
            messages=[{"role": "user", "content": "Q"}],
        )  # fmt: skip
    else:
        prompt = Prompt(style="completion", passages_used=[], prompt_tokens=812, text="Q")
    return GenerationRequest("r1", prompt)


def _stream(name: str) -> httpx.Response:
    return httpx.Response(200, content=VLLM[name].encode(), headers=SSE)


@pytest.mark.parametrize(
    ("style", "stream", "path"),
    [
        ("completion", "completion_length_stream", "/v1/completions"),
        ("chat", "chat_length_stream", "/v1/chat/completions"),
    ],
)
def test_a_length_cut_stream_with_its_usage_chunk(
    style: PromptStyle, stream: str, path: str
) -> None:
    backend, sent = _replay(style, _stream(stream))
    tokens: list[str] = []
    result = asyncio.run(backend.generate(_request(style), tokens.append))
    assert result.text == " The answer is cut"
    assert tokens == [" The", " answer", " is", " cut"]
    assert result.finish_reason == "length"  # the generator falls back on a truncated answer
    # The counts are vLLM's usage chunk (choices: []), not the client's estimate.
    assert (result.prompt_tokens, result.completion_tokens) == (812, 4)
    [call] = sent
    assert call["path"] == path
    assert call["body"]["stream"] is True
    assert call["body"]["stream_options"] == {"include_usage": True}
    assert call["body"]["model"] == "Qwen/Qwen2.5-7B-Instruct"


def test_a_stream_without_usage_counts_its_chunks() -> None:
    backend, _ = _replay("completion", _stream("completion_stop_stream_no_usage"))
    result = asyncio.run(backend.generate(_request("completion")))
    assert (result.text, result.finish_reason) == (" Paris.", "stop")
    assert (result.prompt_tokens, result.completion_tokens) == (812, 2)


@pytest.mark.parametrize("layout", ["context_length_400_flat", "context_length_400_nested"])
def test_vllms_context_length_400_is_prompt_too_long(layout: str) -> None:
    backend, _ = _replay("completion", httpx.Response(400, json=VLLM[layout]))
    with pytest.raises(PromptTooLongError, match="maximum context length is 4096 tokens"):
        asyncio.run(backend.generate(_request("completion")))


def test_another_vllm_400_is_permanent_and_a_503_transient() -> None:
    backend, _ = _replay("completion", httpx.Response(400, json=VLLM["bad_request_400"]))
    with pytest.raises(PermanentError, match="temperature must be non-negative") as info:
        asyncio.run(backend.generate(_request("completion")))
    assert not isinstance(info.value, PromptTooLongError)
    backend, _ = _replay("completion", httpx.Response(503, json=VLLM["overloaded_503"]))
    with pytest.raises(BackendUnavailableError, match="HTTP 503"):
        asyncio.run(backend.generate(_request("completion")))


@pytest.mark.parametrize("layout", ["error_in_stream_flat", "error_in_stream_nested"])
def test_an_error_inside_the_stream_is_raised_not_dropped(layout: str) -> None:
    backend, _ = _replay("completion", _stream(layout))
    with pytest.raises(BackendUnavailableError, match="Engine loop is not running"):
        asyncio.run(backend.generate(_request("completion")))
