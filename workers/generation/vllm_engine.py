"""vLLM in-process (``AsyncLLMEngine``) as generation backend: the GPU path.

``vllm`` is an optional extra (``pip install ragstream[vllm]``); this module imports without
it and only :class:`VllmEngineBackend`'s constructor needs it. vLLM batches concurrent
``generate`` calls itself (continuous batching, PagedAttention; Kwon et al. 2023).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from ragstream.errors import ConfigurationError
from workers.errors import PromptTooLongError
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


class VllmEngineBackend:
    """Streams answers from a vLLM engine in this process.

    Args:
        model: Hugging Face model id or local directory.
        style: ``completion`` or ``chat`` (chat prompts go through the tokenizer's template).
        stop: Stop sequences.
        max_tokens: Default answer budget in tokens.
        temperature: Sampling temperature; 0 is greedy.
        engine_args: Extra ``AsyncEngineArgs`` (``max_model_len``, ``gpu_memory_utilization``).

    Raises:
        ConfigurationError: ``vllm`` is not installed.
    """

    def __init__(
        self,
        model: str,
        style: PromptStyle,
        stop: Sequence[str],
        max_tokens: int,
        *,
        temperature: float = 0.0,
        engine_args: Mapping[str, Any] | None = None,
    ) -> None:
        try:
            from vllm import (  # type: ignore[import-not-found,unused-ignore]
                AsyncEngineArgs,
                AsyncLLMEngine,
                SamplingParams,
            )
        except ImportError as exc:
            raise ConfigurationError(
                "the vllm backend needs the vllm extra: install the vllm extra "
                "(pip install 'ragstream[vllm]')"
            ) from exc
        self.style = style
        self.stop = list(stop)
        self.max_tokens = max_tokens
        self.temperature = temperature
        self._sampling_params = SamplingParams
        args = AsyncEngineArgs(model=model, **dict(engine_args or {}))
        self._engine: Any = AsyncLLMEngine.from_engine_args(args)

    async def _prompt_text(self, request: GenerationRequest) -> str:
        prompt = request.prompt
        if self.style == "completion" and prompt.text is not None:
            return prompt.text
        if self.style == "chat" and prompt.messages is not None:
            tokenizer = await self._engine.get_tokenizer()
            return str(
                tokenizer.apply_chat_template(
                    prompt.messages, tokenize=False, add_generation_prompt=True
                )
            )
        raise ConfigurationError(f"a {prompt.style} prompt sent to a {self.style} backend")

    async def generate(
        self, request: GenerationRequest, on_token: OnToken | None = None
    ) -> GenerationResult:
        """Stream one answer (vLLM yields cumulative text; deltas go to ``on_token``).

        Raises:
            PromptTooLongError: vLLM rejected the prompt as longer than ``max_model_len``.
        """
        params = self._sampling_params(
            max_tokens=request.max_tokens or self.max_tokens,
            temperature=self.temperature,
            stop=self.stop,
        )
        started = time.perf_counter()
        ttft_ms: float | None = None
        text, final = "", None
        stream = self._engine.generate(
            await self._prompt_text(request), params, f"{request.request_id}-{uuid.uuid4().hex}"
        )
        try:
            async for output in stream:
                final = output
                new_text = output.outputs[0].text
                if len(new_text) > len(text):
                    ttft_ms = ttft_ms or (time.perf_counter() - started) * 1000
                    await emit(on_token, new_text[len(text) :])
                    text = new_text
        except ValueError as exc:  # vLLM: "prompt ... is longer than the maximum model length"
            raise PromptTooLongError(str(exc)) from exc
        completion = final.outputs[0] if final is not None else None
        return GenerationResult(
            request_id=request.request_id,
            text=text,
            prompt_tokens=len(final.prompt_token_ids or []) if final is not None else 0,
            completion_tokens=len(completion.token_ids) if completion is not None else 0,
            finish_reason=(completion.finish_reason if completion is not None else None) or "stop",
            ttft_ms=ttft_ms,
            total_ms=(time.perf_counter() - started) * 1000,
        )

    async def generate_many(
        self,
        requests: Sequence[GenerationRequest],
        on_token_for: OnTokenFor | None = None,
        cancel_for: CancelFor | None = None,
    ) -> list[GenerationResult | Exception]:
        """Submit all requests at once; vLLM's scheduler batches them."""
        return await generate_concurrently(self, requests, on_token_for, cancel_for)

    async def aclose(self) -> None:
        """Shut the engine down (frees GPU memory)."""
        shutdown = getattr(self._engine, "shutdown", None)
        if callable(shutdown):
            shutdown()
