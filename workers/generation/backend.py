"""What the generation stage asks of a model backend, whatever serves the model.

One implementation serves: :class:`~workers.generation.openai_compat.OpenAICompatibleBackend`
(an HTTP server: llama.cpp, ``vllm serve``, ...); tests give fakes of the protocol. Backends do
not retry: the caller retries :class:`~ragstream.errors.TransientError` until its deadline.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from workers.errors import RequestCancelledError
from workers.generation.prompt import Prompt

#: Called with each new piece of answer text, in order; may be sync or async.
OnToken = Callable[[str], Awaitable[None] | None]

#: Gives the token callback of a request (by ``request_id``), or ``None`` for none.
OnTokenFor = Callable[[str], OnToken | None]

#: Gives the cancellation event of a request (by ``request_id``; once set, its generation is
#: stopped), or ``None`` when it cannot be cancelled.
CancelFor = Callable[[str], asyncio.Event | None]


@dataclass(frozen=True)
class GenerationRequest:
    """One answer to generate.

    Attributes:
        request_id: The query's id (also the streaming key).
        prompt: The budgeted prompt; its style must match the backend's.
        max_tokens: Answer budget in tokens; ``None`` uses the backend's default. Must not
            exceed what the prompt was budgeted for.
    """

    request_id: str
    prompt: Prompt
    max_tokens: int | None = None


@dataclass(frozen=True)
class GenerationResult:
    """A generated answer and how it went.

    Attributes:
        request_id: As in the request.
        text: The answer (stop sequence excluded).
        prompt_tokens: Prompt size as the server counted it.
        completion_tokens: Tokens generated.
        finish_reason: ``stop`` (EOS or a stop sequence) or ``length`` (hit ``max_tokens``).
        ttft_ms: Time to first token, in ms from sending; ``None`` if no text came.
        total_ms: Time to the end of the response, in ms from sending.
    """

    request_id: str
    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str
    ttft_ms: float | None
    total_ms: float


class GenerationBackend(Protocol):
    """A model that turns prompts into streamed answers."""

    async def generate(
        self, request: GenerationRequest, on_token: OnToken | None = None
    ) -> GenerationResult:
        """Generate one answer, calling ``on_token`` with each piece of text as it arrives.

        Raises:
            BackendUnavailableError: Unreachable, overloaded, 5xx or timed out (transient).
            PromptTooLongError: The server rejected the prompt as over its context.
            PermanentError: Any other rejected request.
        """
        ...

    async def generate_many(
        self,
        requests: Sequence[GenerationRequest],
        on_token_for: OnTokenFor | None = None,
        cancel_for: CancelFor | None = None,
    ) -> list[GenerationResult | Exception]:
        """Submit all requests at once (the server batches them); one outcome per request.
        A request whose ``cancel_for`` event is set is stopped: its outcome is a
        :class:`~workers.errors.RequestCancelledError`."""
        ...

    async def aclose(self) -> None:
        """Release connections or the engine."""
        ...


async def emit(on_token: OnToken | None, text: str) -> None:
    """Call a sync or async token callback."""
    if on_token is None:
        return
    result = on_token(text)
    if inspect.isawaitable(result):
        await result


async def until_cancelled(
    work: Awaitable[GenerationResult], cancel: asyncio.Event, request_id: str
) -> GenerationResult:
    """Await ``work`` unless ``cancel`` is set first; then cancel it (which closes its HTTP
    stream, and the server stops generating) and raise.

    Raises:
        RequestCancelledError: ``cancel`` was set before ``work`` finished.
    """
    task = asyncio.ensure_future(work)
    waiter = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        waiter.cancel()
    if task.done():
        return task.result()
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    raise RequestCancelledError(f"request {request_id} cancelled: generation stopped")


async def generate_concurrently(
    backend: GenerationBackend,
    requests: Sequence[GenerationRequest],
    on_token_for: OnTokenFor | None = None,
    cancel_for: CancelFor | None = None,
) -> list[GenerationResult | Exception]:
    """Run ``backend.generate`` for every request concurrently (``asyncio.gather``); a
    request whose ``cancel_for`` event is set is stopped (:func:`until_cancelled`).

    Returns:
        Per request, in order, its result or the :class:`Exception` it raised; cancellation
        and other ``BaseException`` propagate.
    """

    def one(r: GenerationRequest) -> Awaitable[GenerationResult]:
        work = backend.generate(r, on_token_for(r.request_id) if on_token_for else None)
        cancel = cancel_for(r.request_id) if cancel_for else None
        return work if cancel is None else until_cancelled(work, cancel, r.request_id)

    outcomes = await asyncio.gather(*(one(r) for r in requests), return_exceptions=True)
    results: list[GenerationResult | Exception] = []
    for outcome in outcomes:
        if isinstance(outcome, BaseException) and not isinstance(outcome, Exception):
            raise outcome
        results.append(outcome)
    return results
