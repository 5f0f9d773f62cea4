"""An OpenAI-compatible HTTP server as generation backend (llama.cpp, vLLM's server, ...).

Streams Server-Sent Events from ``/v1/completions`` (completion style) or
``/v1/chat/completions`` (chat style) and asks for usage in the last chunk
(``stream_options.include_usage``). Errors are translated here: connection failures, timeouts,
408, 429 and 5xx (:func:`~ragstream.errors.transient_http_status`) are
:class:`BackendUnavailableError` (transient), a 400 about the context size is
:class:`PromptTooLongError`, other 4xx a :class:`PermanentError`, a chunk that is not the API's
shape a :class:`MalformedGenerationError`. Nothing is retried here.
Closing the stream (e.g. on cancellation) makes llama.cpp stop the request's slot.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import httpx
from opentelemetry.trace import SpanKind

from ragstream import tracing
from ragstream.errors import ConfigurationError, PermanentError, transient_http_status
from workers.errors import BackendUnavailableError, MalformedGenerationError, PromptTooLongError
from workers.generation.backend import (
    CancelFor,
    GenerationRequest,
    GenerationResult,
    OnToken,
    OnTokenFor,
    emit,
    generate_concurrently,
)
from workers.generation.prompt import PromptStyle

#: Phrases of a 400 that mean "prompt over the context window" (llama.cpp, vLLM, OpenAI).
_CONTEXT_ERRORS = ("exceed_context_size", "exceeds the available context", "context length")


def _raise_for_status(status: int, body: str, url: str) -> None:
    if status < httpx.codes.BAD_REQUEST:
        return
    message = f"POST {url}: HTTP {status} {body[:500]}"
    if transient_http_status(status):
        raise BackendUnavailableError(message)
    if any(phrase in body.lower() for phrase in _CONTEXT_ERRORS):
        raise PromptTooLongError(message)
    raise PermanentError(message)


def _stream_error(chunk: dict[str, Any]) -> int | None:
    """The HTTP status of an error sent inside a stream, or ``None`` for a normal chunk: OpenAI,
    llama.cpp and vLLM since 0.10 send ``{"error": {..., "code": 500}}``; vLLM before that sent
    its flat ``ErrorResponse`` (``{"object": "error", "message": ..., "code": 500}``)."""
    if isinstance(chunk.get("error"), dict):
        body = chunk["error"]
    elif chunk.get("object") == "error":
        body = chunk
    else:
        return None
    code = body.get("code")
    return code if isinstance(code, int) and code >= 400 else 500


class OpenAICompatibleBackend:
    """Streams answers from an OpenAI-compatible server.

    Args:
        base_url: ``http://host:port`` of the server (``/v1/...`` is appended).
        model: Model name sent in each request (llama.cpp ignores it).
        style: ``completion`` (``/v1/completions``) or ``chat`` (``/v1/chat/completions``).
        stop: Stop sequences (e.g. ``["\\n\\n", "Question:"]`` for a base model).
        max_tokens: Default answer budget in tokens.
        temperature: Sampling temperature; 0 is greedy.
        timeout_s: Limit on the time to first token (connect, queue in the server, prefill),
            in seconds.
        token_gap_s: Limit on the gap between two streamed chunks once text flows, in seconds.
            An answer that keeps streaming is never cut by a whole-request limit.
        cache_prompt: ``False`` adds llama.cpp's ``"cache_prompt": false`` to each request
            (no prompt prefix reuse); ``True`` adds nothing (the server's default).
        client: An ``httpx.AsyncClient`` to use (tests); by default one is created.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        style: PromptStyle,
        stop: Sequence[str],
        max_tokens: int,
        *,
        temperature: float = 0.0,
        timeout_s: float = 60.0,
        token_gap_s: float = 10.0,
        cache_prompt: bool = True,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        self.cache_prompt = cache_prompt
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.style = style
        self.stop = list(stop)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.timeout_s = timeout_s
        self.token_gap_s = token_gap_s
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=16),
        )

    @property
    def url(self) -> str:
        """The endpoint this backend posts to."""
        path = "/v1/chat/completions" if self.style == "chat" else "/v1/completions"
        return self.base_url + path

    def body(self, request: GenerationRequest) -> dict[str, Any]:
        """The JSON request body (streaming, usage in the last chunk).

        Raises:
            ConfigurationError: The prompt's style is not the backend's.
        """
        prompt = request.prompt
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens or self.max_tokens,
            "temperature": self.temperature,
            "stop": self.stop,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if not self.cache_prompt:
            body["cache_prompt"] = False
        if self.style == "chat" and prompt.messages is not None:
            body["messages"] = prompt.messages
        elif self.style == "completion" and prompt.text is not None:
            body["prompt"] = prompt.text
        else:
            raise ConfigurationError(f"a {prompt.style} prompt sent to a {self.style} backend")
        return body

    def _piece(self, data: str) -> tuple[str, str | None, dict[str, Any]]:
        """The text, finish reason and decoded object of one streamed chunk's ``data``.

        Raises:
            MalformedGenerationError: ``data`` is not JSON, or not an object with a list of
                choice objects (``delta.content`` / ``text`` strings) as the OpenAI API defines.
        """
        try:
            chunk = json.loads(data)
            if not isinstance(chunk, dict):
                raise TypeError(f"a {type(chunk).__name__}, not an object")
            if _stream_error(chunk) is not None:
                return "", None, chunk
            choice = (chunk.get("choices") or [{}])[0]
            if self.style == "chat":
                text = (choice.get("delta") or {}).get("content") or ""
            else:
                text = choice.get("text") or ""
            finish = choice.get("finish_reason")
            if not isinstance(text, str) or not isinstance(finish, str | None):
                raise TypeError("text and finish_reason must be strings")
            if not isinstance(chunk.get("usage"), dict | None):
                raise TypeError("usage must be an object")
        except (ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
            raise MalformedGenerationError(
                f"POST {self.url}: malformed stream chunk ({exc}): {data[:200]!r}"
            ) from exc
        return text, finish, chunk

    async def generate(
        self, request: GenerationRequest, on_token: OnToken | None = None
    ) -> GenerationResult:
        """Stream one answer; see :meth:`GenerationBackend.generate`.

        Raises:
            BackendUnavailableError: Connection error, no first token within ``timeout_s``, a gap
                of ``token_gap_s`` between chunks, 429 or 5xx.
            PromptTooLongError: HTTP 400 about the context size.
            PermanentError: Any other 4xx, or an error event in the stream.
            MalformedGenerationError: A stream chunk not in the OpenAI API's shape.
        """
        body = self.body(request)
        started = time.perf_counter()
        state = _StreamState()
        attributes = {
            "gen_ai.operation.name": "chat" if self.style == "chat" else "text_completion",
            "gen_ai.request.model": self.model,
            "gen_ai.request.max_tokens": int(body["max_tokens"]),
            "server.address": self.base_url,
            "ragstream.request_id": request.request_id,
        }
        name = f"{attributes['gen_ai.operation.name']} {self.model}"
        try:
            with tracing.span(
                name, key=request.request_id, kind=SpanKind.CLIENT, attributes=attributes
            ) as span:
                await self._stream(body, state, started, on_token)
                counted = state.usage or {}
                output_tokens = int(counted.get("completion_tokens", state.token_chunks))
                span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
                if "prompt_tokens" in counted:
                    span.set_attribute("gen_ai.usage.input_tokens", int(counted["prompt_tokens"]))
                if state.ttft_ms is not None:
                    span.set_attribute("ragstream.llm.time_to_first_token_ms", state.ttft_ms)
        except (TimeoutError, httpx.TimeoutException) as exc:
            what = (
                f"no first token within {self.timeout_s}s"
                if state.ttft_ms is None
                else f"no token for {self.token_gap_s}s after {len(state.parts)} tokens"
            )
            raise BackendUnavailableError(f"POST {self.url}: {what}") from exc
        except httpx.TransportError as exc:
            raise BackendUnavailableError(f"POST {self.url} failed: {exc!r}") from exc
        text = "".join(state.parts)
        usage = state.usage or {}
        return GenerationResult(
            request_id=request.request_id,
            text=text,
            prompt_tokens=int(usage.get("prompt_tokens", request.prompt.prompt_tokens)),
            completion_tokens=int(usage.get("completion_tokens", state.token_chunks)),
            finish_reason=state.finish_reason or "stop",
            ttft_ms=state.ttft_ms,
            total_ms=(time.perf_counter() - started) * 1000,
        )

    async def _stream(
        self,
        body: dict[str, Any],
        state: _StreamState,
        started: float,
        on_token: OnToken | None,
    ) -> None:
        first_by = started + self.timeout_s
        async with asyncio.timeout_at(_loop_time(first_by)) as limit:
            async with self._client.stream("POST", self.url, json=body) as response:
                if response.status_code >= httpx.codes.BAD_REQUEST:
                    raw = await response.aread()
                    _raise_for_status(response.status_code, raw.decode(errors="replace"), self.url)
                await self._read(response, state, started, on_token, limit)

    async def _read(
        self,
        response: httpx.Response,
        state: _StreamState,
        started: float,
        on_token: OnToken | None,
        limit: asyncio.Timeout,
    ) -> None:
        """Read the SSE lines; each chunk that carries text pushes the limit ``token_gap_s``
        further (until the first one, the time-to-first-token limit holds)."""
        async for line in response.aiter_lines():
            if state.ttft_ms is not None:
                limit.reschedule(asyncio.get_running_loop().time() + self.token_gap_s)
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            text, finish, chunk = self._piece(data)
            if (error := _stream_error(chunk)) is not None:
                _raise_for_status(error, data, self.url)
            state.usage = chunk.get("usage") or state.usage
            state.finish_reason = finish or state.finish_reason
            state.token_chunks += self._is_token(chunk, text, finish)
            if text:
                if state.ttft_ms is None:
                    state.ttft_ms = (time.perf_counter() - started) * 1000
                    limit.reschedule(asyncio.get_running_loop().time() + self.token_gap_s)
                state.parts.append(text)
                await emit(on_token, text)

    def _is_token(self, chunk: dict[str, Any], text: str, finish: str | None) -> bool:
        """Whether a streamed chunk stands for one generated token (the count of a stream
        without ``usage``). llama.cpp and vLLM send one chunk per token, and a token's text may
        be empty (recorded from vLLM 0.32, tests/fixtures/openai/vllm-recorded.json: 8 of Gemma
        3's 24 chunks, its detokenizer holding text back; counting chunks with text gave 15), so
        an empty chunk counts too. Not counted: the usage chunk (no choice), vLLM's first chat
        chunk (``delta`` with the ``role`` only) and a chunk with a finish reason and no text:
        llama.cpp closes its stream with one after the last token, while vLLM's last chunk is
        the last token's (a stop sequence's, its text cut), so a vLLM stream ended by a stop
        sequence or EOS is counted one token short; one cut by ``max_tokens`` is exact."""
        choices = chunk.get("choices")
        if not choices or (not text and finish is not None):
            return False
        delta = choices[0].get("delta") or {}
        return not (self.style == "chat" and "role" in delta and not text)

    async def generate_many(
        self,
        requests: Sequence[GenerationRequest],
        on_token_for: OnTokenFor | None = None,
        cancel_for: CancelFor | None = None,
    ) -> list[GenerationResult | Exception]:
        """Submit all requests concurrently so that the server batches them."""
        return await generate_concurrently(self, requests, on_token_for, cancel_for)

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self._client.aclose()


def _loop_time(perf_deadline: float) -> float:
    """The event loop's clock value at the ``time.perf_counter()`` instant ``perf_deadline``."""
    return asyncio.get_running_loop().time() + (perf_deadline - time.perf_counter())


class _StreamState:
    """What one stream has produced so far."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        #: Chunks that stand for one generated token (:meth:`OpenAICompatibleBackend._is_token`).
        self.token_chunks = 0
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.ttft_ms: float | None = None
