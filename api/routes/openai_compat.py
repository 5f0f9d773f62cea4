"""OpenAI-compatible ``GET /v1/models`` and ``POST /v1/chat/completions`` over the knowledge base.

Models: the answer tiers. ``evidence`` (the quoted evidence, no LLM), ``small`` and ``large``
(an LLM over the evidence) force that tier; ``auto`` (listed first, the default) and any other
name let the router pick. ``ragstream-small`` / ``ragstream-large`` are accepted as aliases.

The question: the last ``user`` message. Earlier ``user`` messages make a follow-up standalone
(:func:`workers.conversation.standalone_question`: "And how do I change it?" after "Which TCP port
does the server listen on?" becomes "How do I change the TCP port? | context: Which TCP port does
the server listen on?"); earlier ``assistant`` messages are not used: quoting an answer's text
makes retrieval find the same passages again. The context is dropped (never the question) when
the whole would exceed ``api.max_query_chars``.
``system``, ``developer`` and ``tool`` messages are ignored.

The answer is ``choices[0].message.content``; the cited passages and the quoted evidence ride
along as extra top-level ``citations`` and ``evidence`` lists (clients ignore unknown fields).
With ``stream: true`` the body is ``chat.completion.chunk`` events ending in ``data: [DONE]``,
as the OpenAI API streams (https://platform.openai.com/docs/api-reference/chat-streaming); the
chunk with ``finish_reason: "stop"`` also carries ``usage``, ``citations`` and ``evidence``.
A streaming client that disconnects before the answer cancels the request's generation (as
``POST /v1/query`` does, see :mod:`api.routes.query`).

How long the route waits: the client's own timeout when it sends one (``X-Request-Timeout``,
or ``X-Stainless-Read-Timeout``, which the official ``openai`` clients send with their read
timeout), less :data:`CLIENT_MARGIN_S` so the 504 reaches the client before it gives up;
otherwise ``api.wait_timeout_s``; capped by ``api.max_wait_s``.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.auth import Principal
from api.deps import principal
from api.errors import ApiError, ErrorEnvelope
from api.models import QueryBody
from api.querying import QueryService, replies_until
from api.routes.query import (
    ERRORS,
    FAILED_STATUS,
    SSE_CONTENT,
    build_request,
    event_stream,
    query_service,
    wait_seconds,
)
from ragstream.settings import Settings
from topics.answers import Answer
from topics.queries import QueryRequest
from topics.responses import QueryResponse
from topics.tokens import AnswerToken, TokenOrder
from workers.conversation import standalone_question

router = APIRouter(tags=["openai"])
#: The models of ``GET /v1/models``: the answer tiers, ``auto`` (the router decides) first.
MODELS = ("auto", "evidence", "small", "large")
ALIASES = {"ragstream-small": "small", "ragstream-large": "large"}
#: Seconds the route answers before the client's own timeout would fire.
CLIENT_MARGIN_S = 1.0
#: Request headers that carry the client's timeout in seconds, first match wins.
TIMEOUT_HEADERS = ("x-request-timeout", "x-stainless-read-timeout")
#: The official OpenAI clients retry 5xx twice unless told not to: a timed-out or failed
#: question would be asked three times.
NO_RETRY = {"x-should-retry": "false"}


class TextPart(BaseModel):
    """A content part; only text parts carry the question."""

    model_config = ConfigDict(extra="ignore")
    type: str = Field(max_length=32)
    text: str | None = Field(default=None, max_length=16_000)


class ChatMessage(BaseModel):
    """One chat message (OpenAI shape)."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = Field(default=None)


class ChatBody(BaseModel):
    """The subset of the OpenAI request that applies; other fields are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(default="ragstream", max_length=128)
    messages: list[ChatMessage] = Field(min_length=1, max_length=100)
    stream: bool = False
    n: int = Field(default=1, ge=1, le=1)
    user: str | None = Field(default=None, max_length=256)


def _text(message: ChatMessage) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    return "\n".join(p.text for p in message.content if p.type == "text" and p.text)


def _last_question(body: ChatBody) -> int:
    for i in range(len(body.messages) - 1, -1, -1):
        message = body.messages[i]
        if message.role == "user" and _text(message).strip():
            return i
    raise ApiError(422, "INVALID_REQUEST", "messages: no user message with text content")


def question_of(body: ChatBody, max_chars: int = 4000) -> str:
    """The question sent down the pipeline: the last user message, made standalone from the
    earlier user messages (see the module docstring), at most ``max_chars`` characters.

    Raises:
        ApiError: 422 when there is no user message with text.
    """
    last = _last_question(body)
    question = _text(body.messages[last]).strip()
    earlier = [_text(m) for m in body.messages[:last] if m.role == "user" and _text(m).strip()]
    rewritten = standalone_question(earlier, question)
    if len(rewritten) <= max_chars:
        return rewritten
    return question[-max_chars:]


def route_of(model: str) -> Literal["auto", "evidence", "small", "large"]:
    """The answer tier a ``model`` name forces (``auto``: the router picks)."""
    name = ALIASES.get(model, model)
    return name if name in {"evidence", "small", "large"} else "auto"  # type: ignore[return-value]


def client_wait_s(settings: Settings, request: Request) -> float:
    """Seconds to wait for the answer: the client's timeout header less
    :data:`CLIENT_MARGIN_S` (at least 1 s), else ``api.wait_timeout_s``; at most
    ``api.max_wait_s``."""
    for name in TIMEOUT_HEADERS:
        raw = request.headers.get(name)
        if raw is None:
            continue
        try:
            value = float(raw)
        except ValueError:
            continue
        if math.isfinite(value) and value > 0:
            return min(max(1.0, value - CLIENT_MARGIN_S), settings.api.max_wait_s)
    return wait_seconds(settings, None)


def _usage(r: Answer) -> dict[str, int]:
    return {
        "prompt_tokens": r.usage.prompt_tokens,
        "completion_tokens": r.usage.completion_tokens,
        "total_tokens": r.usage.prompt_tokens + r.usage.completion_tokens,
    }


def _sources(r: Answer) -> dict[str, list[dict[str, Any]]]:
    return {
        "citations": [c.model_dump(mode="json") for c in r.citations],
        "evidence": [e.model_dump(mode="json") for e in r.evidence],
    }


def completion(r: Answer, model: str) -> dict[str, Any]:
    """A ``chat.completion`` object for an answer (``status="answered"``)."""
    return {
        "id": f"chatcmpl-{r.request_id}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": r.answer},
                "finish_reason": "stop",
            }
        ],
        "usage": _usage(r),
        **_sources(r),
    }


def _failure(r: Answer) -> ApiError:
    assert r.error is not None
    return ApiError(
        FAILED_STATUS.get(r.error.code, 500),
        r.error.code.value,
        r.error.message,
        details=[{"request_id": r.request_id, "stage": r.error.stage}],
        headers=NO_RETRY,
    )


def _timeout(request_id: str) -> ApiError:
    return ApiError(
        504,
        "TIMEOUT",
        f"no answer within the wait; poll /v1/queries/{request_id}",
        details=[{"request_id": request_id}],
        headers=NO_RETRY,
    )


class ModelOut(BaseModel):
    """One model of ``GET /v1/models`` (OpenAI shape)."""

    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "ragstream"


class ModelList(BaseModel):
    """``GET /v1/models`` (OpenAI's list shape)."""

    object: Literal["list"] = "list"
    data: list[ModelOut]


@router.get(
    "/v1/models",
    response_model=ModelList,
    responses={401: {"model": ErrorEnvelope}},
    dependencies=[Depends(principal)],
)
async def list_models() -> ModelList:
    """The answer tiers as models: ``auto`` (default), ``evidence``, ``small``, ``large``."""
    return ModelList(data=[ModelOut(id=m) for m in MODELS])


@router.post(
    "/v1/chat/completions",
    responses={
        200: {
            "description": "A `chat.completion` (JSON); with `stream: true`, Server-Sent Events "
            "of `chat.completion.chunk` objects ending in `data: [DONE]`.",
            "content": SSE_CONTENT,
        },
        **ERRORS,
    },
)
async def chat_completions(
    body: ChatBody, request: Request, who: Principal = Depends(principal)
) -> Any:
    """Answer the last user message from the caller's knowledge base (OpenAI shape)."""
    started = time.monotonic()
    svc = query_service(request)
    question = question_of(body, svc.settings.api.max_query_chars)
    try:
        query = QueryBody(query=question, route=route_of(body.model), stream=body.stream)
    except ValidationError as exc:
        raise ApiError(422, "INVALID_REQUEST", f"messages: {exc.errors()[0]['msg']}") from exc
    event = build_request(svc.settings, who, query)
    wait_s = client_wait_s(svc.settings, request)
    hit, queue = await svc.ask(event, wait_s=wait_s, tokens=body.stream)
    if body.stream:
        stream = chunks(svc, event, body.model, hit, queue, started + wait_s)
        return event_stream(svc.settings, stream, event.request_id)
    response = hit
    if response is None:
        assert queue is not None
        try:
            async for reply in replies_until(queue, started + wait_s):
                if isinstance(reply, QueryResponse):
                    response = reply
        finally:
            svc.unsubscribe(event.request_id)
    if response is None:
        raise _timeout(event.request_id)
    answer = Answer.of(response, query=question)
    if answer.status != "answered":
        raise _failure(answer)
    return JSONResponse(completion(answer, body.model))


def _chunk(
    request_id: str,
    model: str,
    delta: dict[str, Any],
    finish: str | None,
    final: Answer | None = None,
) -> bytes:
    data: dict[str, Any] = {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    if final is not None:
        data |= {"usage": _usage(final), **_sources(final)}
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def chunks(  # noqa: PLR0917 - one call site
    svc: QueryService,
    event: QueryRequest,
    model: str,
    hit: QueryResponse | None,
    queue: Any,
    until: float,
) -> AsyncIterator[bytes]:
    """The streamed completion: a role chunk, content chunks, a final chunk (with ``usage``,
    ``citations`` and ``evidence``), ``[DONE]``.

    Tokens are streamed as they come; when the final answer arrives, any part of it the token
    stream has not shown yet is sent, so the concatenated deltas equal the recorded answer.
    A failure or timeout mid-stream is sent as an ``error`` object (the OpenAI convention).
    """
    rid = event.request_id
    yield _chunk(rid, model, {"role": "assistant", "content": ""}, None)
    shown = ""
    order = TokenOrder()
    try:
        response = hit
        if response is None:
            async for reply in replies_until(queue, until):
                if isinstance(reply, AnswerToken):
                    if not order.fresh(reply):
                        continue  # a replayed generation re-sends tokens: show each once
                    if reply.text:
                        shown += reply.text
                        yield _chunk(rid, model, {"content": reply.text}, None)
                else:
                    response = reply
        final = None if response is None else Answer.of(response, query=event.query)
        if final is None or final.status != "answered":
            err = _timeout(rid) if final is None else _failure(final)
            payload = {"error": {"code": err.code, "message": err.message}}
            yield f"data: {json.dumps(payload)}\n\n".encode()
        else:
            text = final.answer or ""
            rest = text[len(shown) :] if text.startswith(shown) else ""
            if rest:
                yield _chunk(rid, model, {"content": rest}, None)
            yield _chunk(rid, model, {}, "stop", final)
        yield b"data: [DONE]\n\n"
    except (asyncio.CancelledError, GeneratorExit):
        if hit is None:  # the client left before its answer: stop the pools' work on it
            svc.cancel(rid)
        raise
    finally:
        svc.unsubscribe(rid)
