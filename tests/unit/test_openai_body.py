"""The request body the OpenAI-compatible backend sends (no server needed)."""

from __future__ import annotations

import asyncio

from workers.generation.backend import GenerationRequest
from workers.generation.openai_compat import OpenAICompatibleBackend
from workers.generation.prompt import Prompt


def _request() -> GenerationRequest:
    prompt = Prompt(
        style="completion", passages_used=[], prompt_tokens=9,
        text="Context: x\nQuestion: y\nAnswer:",
    )  # fmt: skip
    return GenerationRequest(request_id="r1", prompt=prompt)


def test_prompt_caching_is_the_servers_default_unless_turned_off() -> None:
    on = OpenAICompatibleBackend("http://127.0.0.1:1", "m", "completion", ["\n\n"], 16)
    off = OpenAICompatibleBackend(
        "http://127.0.0.1:1", "m", "completion", ["\n\n"], 16, cache_prompt=False
    )
    try:
        assert "cache_prompt" not in on.body(_request())  # vLLM and others: nothing extra
        body = off.body(_request())
        assert body["cache_prompt"] is False and body["prompt"].endswith("Answer:")
        assert body["stream"] is True and body["max_tokens"] == 16
    finally:
        asyncio.run(on.aclose())
        asyncio.run(off.aclose())
