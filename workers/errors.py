"""Typed error responses: every failure of a query becomes a response, never silence."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ragstream.errors import PermanentError, TransientError
from topics.base import Event
from topics.producer import RecordTooLargeError
from topics.queries import QueryRequest
from topics.registry import RESPONSES
from topics.responses import ErrorCode, ErrorInfo, QueryResponse
from topics.serde import encode
from workers.citations import citations_of
from workers.metrics import ERROR_RESPONSES
from workers.runtime.handler import Emit, derive_event_id

# An error response must always fit the broker (its max_request_size is 1 MiB by default):
# above this many encoded bytes its citations and evidence are left out.
MAX_ERROR_RESPONSE_BYTES = 64 * 1024


class BackendUnavailableError(TransientError):
    """A model backend (LLM server, reranker) cannot be reached."""

    code = "BACKEND_UNAVAILABLE"


class PromptTooLongError(PermanentError):
    """The prompt does not fit the serving model's context window."""

    code = "PROMPT_TOO_LONG"


class MalformedGenerationError(PermanentError):
    """The LLM server answered with something the OpenAI API does not define: a stream chunk that
    is not JSON, not an object, or whose ``choices`` are not a list of objects.

    Permanent (the same request would get the same answer, and tokens may already have been
    streamed, so it is never retried); the generator answers with the evidence answer when the
    event carries one, else a ``BACKEND_UNAVAILABLE`` error response: never an ``INTERNAL`` 500.
    """

    code = "BACKEND_UNAVAILABLE"


class RequestCancelledError(PermanentError):
    """The request was cancelled (its client disconnected) and its generation stopped."""

    code = "CANCELLED"


def request_of(event: Event) -> QueryRequest:
    """The :class:`QueryRequest` an event answers (the event itself or its ``request``)."""
    if isinstance(event, QueryRequest):
        return event
    request = getattr(event, "request", None)
    if not isinstance(request, QueryRequest):
        raise TypeError(f"{type(event).__name__} carries no QueryRequest")
    return request


def error_response(event: Event, code: ErrorCode, message: str, stage: str) -> QueryResponse:
    """A ``status="failed"`` response for the request of ``event`` (id derived, replay-stable),
    with the passages the event carries (reranked passages or retrieved candidates) as its
    citations and their evidence spans, when it has any.

    The response stays under :data:`MAX_ERROR_RESPONSE_BYTES` encoded, so it can always be
    published (even for an event dead-lettered because its own outputs were too large):
    citations and evidence that would exceed it are left out. Counted in
    ``ragstream_error_responses_total{stage,code}``."""
    request = request_of(event)
    ERROR_RESPONSES.labels(stage, ErrorCode(code).value).inc()
    passages = getattr(event, "passages", None) or getattr(event, "candidates", None) or ()
    response = QueryResponse(
        event_id=derive_event_id(request.request_id, f"error:{stage}"),
        tenant=request.tenant,
        request_id=request.request_id,
        status="failed",
        error=ErrorInfo(code=code, message=message[:2000], stage=stage),
        # What retrieval found is still shown: the passages it cited and their evidence.
        citations=citations_of(range(1, len(passages) + 1), passages),
        evidence=tuple(getattr(event, "evidence", ()) or ()),
        trace=event.trace,
        callback_url=request.callback_url,
    )
    if len(encode(response)) <= MAX_ERROR_RESPONSE_BYTES:
        return response
    return response.model_copy(update={"citations": (), "evidence": ()})


def code_of(error: BaseException) -> ErrorCode:
    """The :class:`ErrorCode` for an exception (by its ``code`` attribute, else INTERNAL).

    An output over the broker's size limit is INTERNAL: the limit is the deployment's, and
    the request itself was valid."""
    if isinstance(error, RecordTooLargeError):
        return ErrorCode.INTERNAL
    try:
        return ErrorCode(getattr(error, "code", "INTERNAL"))
    except ValueError:
        return (
            ErrorCode.INVALID_REQUEST if isinstance(error, PermanentError) else ErrorCode.INTERNAL
        )


def expired_hook(stage: str) -> Callable[[Any], Sequence[Emit]]:
    """``on_expired`` for query-path handlers: a ``DEADLINE_EXCEEDED`` response."""

    def hook(event: Any) -> Sequence[Emit]:
        msg = f"deadline {request_of(event).deadline.isoformat()} passed before {stage}"
        return [Emit(RESPONSES, error_response(event, ErrorCode.DEADLINE_EXCEEDED, msg, stage))]

    return hook


def dead_letter_hook(stage: str) -> Callable[[Any, BaseException], Sequence[Emit]]:
    """``on_dead_letter`` for query-path handlers: a typed error response for the caller."""

    def hook(event: Any, error: BaseException) -> Sequence[Emit]:
        message = f"{type(error).__name__}: {error}"
        return [Emit(RESPONSES, error_response(event, code_of(error), message, stage))]

    return hook


def llm_outcome(error: BaseException | None) -> str:
    """The ``outcome`` label of an LLM request: ``ok``, ``timeout`` (the request's own time
    limits: time to first token or the gap between tokens) or the error's code."""
    import httpx

    if error is None:
        return "ok"
    if isinstance(error.__cause__, TimeoutError | httpx.TimeoutException):
        return "timeout"
    return code_of(error).value
