"""OpenAI-compatible ``POST /v1/chat/completions`` answering from the knowledge base.

The last ``user`` message is the question; earlier messages are ignored (retrieval is per
question). ``model`` picks the generation tier: ``ragstream-small`` / ``ragstream-large``, any
other name lets the router decide. The answer is ``choices[0].message.content``; the cited
passages ride along as an extra top-level ``citations`` list (clients ignore unknown fields).
With ``stream: true`` the body is ``chat.completion.chunk`` events ending in ``data: [DONE]``,
as the OpenAI API streams (https://platform.openai.com/docs/api-reference/chat-streaming).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from api.auth import Principal
from api.deps import principal
from api.errors import ApiError, ErrorEnvelope
from api.models import QueryBody
from api.querying import QueryService, replies_until
from api.routes.query import FAILED_STATUS, build_request, query_service, wait_seconds
from topics.queries import QueryRequest
from topics.responses import QueryResponse
from topics.tokens import AnswerToken

router = APIRouter(tags=["openai"])
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


def question_of(body: ChatBody) -> str:
    """The text of the last user message.

    Raises:
        ApiError: 422 when there is no user message with text.
    """
    for message in reversed(body.messages):
        if message.role != "user" or message.content is None:
            continue
        if isinstance(message.content, str):
            text = message.content
        else:
            text = "\n".join(p.text for p in message.content if p.type == "text" and p.text)
        if text.strip():
            return text
    raise ApiError(422, "INVALID_REQUEST", "messages: no user message with text content")


def _route(model: str) -> Literal["auto", "small", "large"]:
    return {"ragstream-small": "small", "ragstream-large": "large"}.get(model, "auto")  # type: ignore[return-value]


def _citations(r: QueryResponse) -> list[dict[str, Any]]:
    return [c.model_dump(mode="json") for c in r.citations]


def completion(r: QueryResponse, model: str) -> dict[str, Any]:
    """A ``chat.completion`` object for an answered response."""
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
        "usage": {
            "prompt_tokens": r.usage.prompt_tokens,
            "completion_tokens": r.usage.completion_tokens,
            "total_tokens": r.usage.prompt_tokens + r.usage.completion_tokens,
        },
        "citations": _citations(r),
    }


def _failure(r: QueryResponse) -> ApiError:
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


@router.post(
    "/v1/chat/completions",
    responses={s: {"model": ErrorEnvelope} for s in (401, 413, 422, 429, 503, 504)},
)
async def chat_completions(
    body: ChatBody, request: Request, who: Principal = Depends(principal)
) -> Any:
    """Answer the last user message from the caller's knowledge base (OpenAI shape)."""
    started = time.monotonic()
    svc = query_service(request)
    question = question_of(body)
    if len(question) > svc.settings.api.max_query_chars:
        question = question[-svc.settings.api.max_query_chars :]
    try:
        query = QueryBody(query=question, route=_route(body.model), stream=body.stream)
    except ValidationError as exc:
        raise ApiError(422, "INVALID_REQUEST", f"messages: {exc.errors()[0]['msg']}") from exc
    event = build_request(svc.settings, who, query)
    wait_s = wait_seconds(svc.settings, None)
    hit, queue = await svc.ask(event, wait_s=wait_s, tokens=body.stream)
    if body.stream:
        return StreamingResponse(
            chunks(svc, event, body.model, hit, queue, started + wait_s),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Request-Id": event.request_id},
        )
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
    if response.status != "answered":
        raise _failure(response)
    return JSONResponse(completion(response, body.model))


def _chunk(request_id: str, model: str, delta: dict[str, Any], finish: str | None) -> bytes:
    data = {
        "id": f"chatcmpl-{request_id}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def chunks(  # noqa: PLR0917 - one call site
    svc: QueryService,
    event: QueryRequest,
    model: str,
    hit: QueryResponse | None,
    queue: Any,
    until: float,
) -> AsyncIterator[bytes]:
    """The streamed completion: a role chunk, content chunks, a final chunk, ``[DONE]``.

    Tokens are streamed as they come; when the final answer arrives, any part of it the token
    stream has not shown yet is sent, so the concatenated deltas equal the recorded answer.
    A failure or timeout mid-stream is sent as an ``error`` object (the OpenAI convention).
    """
    rid = event.request_id
    yield _chunk(rid, model, {"role": "assistant", "content": ""}, None)
    shown = ""
    next_seq = 0
    try:
        final = hit
        if final is None:
            async for reply in replies_until(queue, until):
                if isinstance(reply, AnswerToken):
                    if reply.seq < next_seq:
                        continue  # a replayed generation re-sends tokens: show each once
                    next_seq = reply.seq + 1
                    if reply.text:
                        shown += reply.text
                        yield _chunk(rid, model, {"content": reply.text}, None)
                else:
                    final = reply
        if final is None or final.status != "answered":
            err = _timeout(rid) if final is None else _failure(final)
            payload = {"error": {"code": err.code, "message": err.message}}
            yield f"data: {json.dumps(payload)}\n\n".encode()
        else:
            rest = final.answer[len(shown) :] if final.answer.startswith(shown) else ""
            if rest:
                yield _chunk(rid, model, {"content": rest}, None)
            yield _chunk(rid, model, {}, "stop")
        yield b"data: [DONE]\n\n"
    finally:
        svc.unsubscribe(rid)
