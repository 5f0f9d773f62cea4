"""Pointwise LLM reranking through an OpenAI-compatible ``/v1/completions`` server.

Each pair becomes a yes/no prompt; the score is ``p("yes")`` of the one generated token from
its log-probabilities (the pointwise "relevance generation" of Liang et al. 2022, HELM; the
yes-probability scoring of Nogueira et al. 2020, monoT5), or 1.0/0.0 from the text when the
server returns no log-probabilities. All pairs of a call are sent concurrently.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from ragstream.errors import PermanentError, TransientError, transient_http_status

PROMPT = (
    "Passage: {passage}\nQuestion: {question}\n"
    "Is the passage relevant to the question? Answer yes or no.\nAnswer:"
)


class LlmReranker:
    """Relevance of each pair as ``p(yes)`` from a completions server.

    Args:
        base_url: server root, e.g. ``http://127.0.0.1:8001`` (``/v1/completions`` is added).
        model: model name sent in the request; ``None`` lets the server choose.
        timeout_s: per-request timeout in seconds.
        max_concurrency: requests in flight at once.
        max_passage_chars: passages are cut to this many characters before prompting.
        transport: an ``httpx`` async transport (tests pass ``httpx.MockTransport``).

    Attributes:
        requests_sent: completion requests made.
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        timeout_s: float = 30.0,
        max_concurrency: int = 32,
        max_passage_chars: int = 4000,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout_s = timeout_s
        self.max_concurrency = max_concurrency
        self.max_passage_chars = max_passage_chars
        self.transport = transport
        self.requests_sent = 0

    def warm_up(self) -> None:
        """Nothing to load (the server holds the model)."""

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """Score all pairs concurrently; blocks (runs its own event loop: call from a thread
        without a running loop, as pool handlers are).

        Returns:
            ``p(yes)`` in ``[0, 1]`` per pair, input order.

        Raises:
            TransientError: connection failure, timeout, 408/429/5xx.
            PermanentError: any other HTTP error or an unreadable reply.
        """
        if not pairs:
            return []
        return asyncio.run(self._score_all(pairs))

    async def _score_all(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        limit = asyncio.Semaphore(self.max_concurrency)
        async with httpx.AsyncClient(
            base_url=self.base_url, timeout=self.timeout_s, transport=self.transport
        ) as client:

            async def one(question: str, passage: str) -> float:
                async with limit:
                    return await self._score_one(client, question, passage)

            return list(await asyncio.gather(*(one(q, p) for q, p in pairs)))

    async def _score_one(self, client: httpx.AsyncClient, question: str, passage: str) -> float:
        body: dict[str, Any] = {
            "prompt": PROMPT.format(passage=passage[: self.max_passage_chars], question=question),
            "max_tokens": 1,
            "temperature": 0.0,
            "logprobs": 5,
        }
        if self.model:
            body["model"] = self.model
        self.requests_sent += 1
        try:
            resp = await client.post("/v1/completions", json=body)
        except httpx.TransportError as exc:
            raise TransientError(f"llm rerank request failed: {exc!r}") from exc
        if transient_http_status(resp.status_code):
            raise TransientError(f"llm rerank server answered {resp.status_code}")
        if resp.is_error:
            raise PermanentError(
                f"llm rerank server answered {resp.status_code}: {resp.text[:300]}"
            )
        try:
            return yes_probability(resp.json()["choices"][0])
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise PermanentError(f"unreadable llm rerank reply: {resp.text[:300]}") from exc


def yes_probability(choice: Mapping[str, Any]) -> float:
    """``p(yes)`` of a completion choice: summed over ``yes`` tokens of its top log-probs.

    Reads the OpenAI legacy layout (``logprobs.top_logprobs[0]``: ``{token: logprob}``) and the
    llama.cpp/chat layout (``logprobs.content[0].top_logprobs``: ``[{token, logprob}]``). Falls
    back to 1.0/0.0 from the generated text when the choice has no log-probabilities.
    """
    top = _first_top_logprobs(choice.get("logprobs") or {})
    if top:
        return min(1.0, sum(math.exp(lp) for t, lp in top.items() if _is_yes(t)))
    return 1.0 if _is_yes(str(choice.get("text", ""))) else 0.0


def _first_top_logprobs(logprobs: Mapping[str, Any]) -> dict[str, float]:
    legacy = (logprobs.get("top_logprobs") or [None])[0]
    if isinstance(legacy, Mapping):
        return {str(t): float(lp) for t, lp in legacy.items()}
    content = (logprobs.get("content") or [None])[0]
    if isinstance(content, Mapping):
        return {str(e["token"]): float(e["logprob"]) for e in content.get("top_logprobs") or []}
    return {}


def _is_yes(token: str) -> bool:
    return token.strip().lower().startswith("yes")
