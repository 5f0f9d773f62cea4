"""OpenAI-compatible ``GET /v1/models`` (and ``/v1/models/{model}``),
``POST /v1/chat/completions`` and ``POST /v1/completions`` over the knowledge base.

Models: the answer tiers. ``evidence`` (the quoted evidence, no LLM), ``small`` and ``large``
(an LLM over the evidence) force that tier; ``auto`` (listed first) and ``ragstream`` (the
default when a body names none) let the router pick. ``ragstream-small`` / ``ragstream-large``
are accepted as aliases, and so is ``gpt-3.5-turbo`` (= ``auto``): the default model name of
LangChain's ``ChatOpenAI`` and LlamaIndex's ``OpenAI``/``OpenAILike``, so that a framework used
with its defaults answers (:data:`FRAMEWORK_DEFAULTS`; why: the frameworks send their default
without asking the user for a model, and their first documented call would otherwise be a 404;
it is one fixed name, so a typo still gets a 404). Any other name is a 404 ``model_not_found``
(as OpenAI answers). A bad request is a 400 with a lower-case ``code`` (:data:`BAD_REQUEST`),
never a 422.

Sources in the message: the frameworks drop fields they do not know (LangChain's
``ChatOpenAI`` keeps only ``id``, ``model_name``, ``finish_reason``, ``logprobs``, usage and
``system_fingerprint`` in ``response_metadata``; LlamaIndex keeps the body only in ``raw``), so
``citations`` never reach their messages. A model name with the suffix ``+sources``
(``auto+sources``, ``ragstream+sources``, ``small+sources``...) or the body field ``"sources":
true`` appends a sources block to the answer's text (:func:`sources_block`)::

    <answer>

    Sources:
    [1] <title or doc id> (<source>)
    [2] ...

It is part of ``content`` (``text``) and, in a stream, the last content delta; the top-level
``citations`` and the last chunk's ``answer`` stay as without it.

The question: the last ``user`` message (``/v1/completions``: the ``prompt``, as a chat with
that one user message, or a role-prefixed transcript read as the chat it writes out, see
:func:`transcript`). The messages before it travel with it as the conversation
(:attr:`topics.queries.QueryRequest.conversation`): each earlier ``user`` message with the
``assistant`` message that answered it. The earlier questions make a follow-up standalone
(:func:`workers.conversation.question_of`: "And how do I change it?" after "Which TCP port
does the server listen on?" is answered as "How do I change the TCP port? | context: ..."),
and the last answer is never given again. A question longer than ``api.max_query_chars`` is
refused with 400 ``context_length_exceeded`` (never cut).
``system``, ``developer`` and ``tool`` messages are ignored.

Parameters: ``max_tokens`` / ``max_completion_tokens`` bound the answer of the LLM tiers (at
most the pool's ``llm.max_tokens``, which the prompt was budgeted for; a completion that hits
it is cut at its last whole sentence, ``finish_reason: "length"``); the evidence tier
generates nothing and ignores it. Parameters that would change what the client gets back and
that no tier can honour are refused with 400 naming the ``param`` (code
``unsupported_parameter``): ``tools`` / ``functions`` unless ``tool_choice`` /
``function_call`` is ``"none"``, a ``response_format`` other than ``{"type": "text"}``,
``n > 1``, ``logprobs: true`` or ``top_logprobs > 0`` (``/v1/completions``: ``logprobs``,
``echo``, ``suffix``, ``best_of > 1``, token-id prompts). Sampling parameters (``temperature``,
``top_p``, ``stop``, penalties, ``seed``, ``user``) are accepted and ignored: the tiers answer
from the evidence with their own settings. Every error has OpenAI's shape
(:mod:`api.errors`): ``{"error": {"message", "type", "param", "code"}}``.

The answer is ``choices[0].message.content`` (``choices[0].text``); the cited passages and the
quoted evidence ride along as extra top-level ``citations`` and ``evidence`` lists (clients
ignore unknown fields), with ``truncated`` (the LLM's answer was cut at its token limit;
``finish_reason`` is then ``"length"``), ``degraded`` (steps left out under load,
docs/http-api.md) and ``refused`` (the answer is "The documents do not
contain the answer."). ``usage`` counts the tokens the LLM tier processed
for this answer (the prompt it read, the tokens it generated); it is 0 where no model ran on
tokens: the evidence tier (the answer is quoted evidence) and the "not in the documents"
answer when retrieval found no passage.

With ``stream: true`` the body is ``chat.completion.chunk`` (``text_completion``) events ending
in ``data: [DONE]``, as the OpenAI API streams
(https://platform.openai.com/docs/api-reference/chat-streaming); the finish chunk, with
``finish_reason`` ``"stop"`` or ``"length"``, also carries ``citations``, ``evidence``,
``truncated``, ``degraded``, ``refused``, ``answer`` (the recorded answer) and ``replaced``.
With ``stream_options: {"include_usage": true}`` one more chunk follows it before ``[DONE]``:
``choices: []`` and ``usage`` (OpenAI's documented usage chunk); without it no chunk carries
``usage``. Deltas are the LLM's tokens as they come; when the answer check changes the
text after it was streamed (an empty or looping completion replaced by the evidence answer,
or a ``length`` completion cut at its last whole sentence) the deltas cannot be taken back, so
the last chunk says ``replaced: true`` and a client shows ``answer`` instead of the
concatenated deltas. With ``replaced: false`` the concatenated deltas equal ``answer``.
Every chunk carries an SSE ``id:`` (:mod:`api.streams.ids`); the same request sent again with
``Last-Event-ID`` resumes the stream after that chunk, on any API process, as ``POST /v1/query``
does (:mod:`api.streams.resume`). A streaming client that disconnects before the answer cancels
the request's generation unless it resumes within ``api.resume_grace_s`` (see
:mod:`api.routes.query`).

How long the route waits: the client's own timeout when it sends one (``X-Request-Timeout``,
or ``X-Stainless-Read-Timeout``, which the official ``openai`` clients send with their read
timeout), less :data:`CLIENT_MARGIN_S` so the 504 reaches the client before it gives up;
otherwise ``api.wait_timeout_s``; capped by ``api.max_wait_s``.
"""

from __future__ import annotations

import math
import time
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from api.asking import (
    OPENAI_LAST_EVENT_ID,
    build_request,
    event_stream,
    nothing_left,
    query_body,
    reopen,
    resume_position,
    wait_seconds,
)
from api.auth import Principal
from api.deps import principal, query_service
from api.errors import ApiError, OpenAIError, OpenAIErrorEnvelope
from api.models import HistoryTurn
from api.openai.protocol import (
    MODELS,
    Ask,
    ChatBody,
    CompletionBody,
    ModelList,
    ModelOut,
    answer_budget,
    check_chat,
    check_completion,
    question_and_history,
    route_of,
    too_long,
    transcript,
    wants_sources,
    wants_usage,
)
from api.openai.rendering import completion, failure, positioned_chunks, timed_out
from api.querying import QueryService
from api.streams.ids import DONE
from ragstream.settings import Settings

router = APIRouter(tags=["openai"])

#: One event of an OpenAI stream: ``data`` only, a chunk object or ``[DONE]``.
OPENAI_SSE_EVENT: dict[str, Any] = {
    "type": "object",
    "required": ["data"],
    "properties": {
        "data": {
            "type": "string",
            "description": "A `chat.completion.chunk` (`text_completion`) JSON object, an "
            '`{"error": {...}}` object, or `[DONE]` (the last event).',
        },
        "id": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
OPENAI_SSE_CONTENT = {"text/event-stream": {"schema": OPENAI_SSE_EVENT}}


#: Seconds the route answers before the client's own timeout would fire.
CLIENT_MARGIN_S = 1.0


#: Request headers that carry the client's timeout in seconds, first match wins.
TIMEOUT_HEADERS = ("x-request-timeout", "x-stainless-read-timeout")


#: The 400 of the OpenAI routes: every bad request (never a 422), as OpenAI answers.
BAD_REQUEST: dict[str, Any] = {
    "model": OpenAIErrorEnvelope,
    "description": "A bad request, as OpenAI answers it: `type` `invalid_request_error`, "
    "`param` the request field at fault, and a lower-case `code`: "
    "`missing_required_parameter`, `invalid_type`, `invalid_value`, `empty_array`, "
    "`string_above_max_length`, `integer_below_min_value`, ... for a body the schema refuses; "
    "`invalid_json` for a body that is not JSON; `unsupported_parameter` for a parameter no "
    "tier honours; `context_length_exceeded` for a question over `api.max_query_chars`.",
}


#: The error statuses of the OpenAI routes, in OpenAI's error shape (no 422: see
#: :data:`BAD_REQUEST`).
ERRORS: dict[int | str, dict[str, Any]] = {
    400: BAD_REQUEST,
    **{s: {"model": OpenAIErrorEnvelope} for s in (401, 404, 413, 415, 429, 503, 504)},
}
#: The statuses of a stream resumed with ``Last-Event-ID`` (``stream: true``).
RESUME_ERRORS: dict[int | str, dict[str, Any]] = {
    204: {"description": "`Last-Event-ID` is its stream's last event: nothing is left."},
    403: {
        "model": OpenAIErrorEnvelope,
        "description": "`Last-Event-ID` names a query whose answer cites a document this key "
        "may no longer read.",
    },
    410: {
        "model": OpenAIErrorEnvelope,
        "description": "`Last-Event-ID` names a stream past the token topic's retention.",
    },
}


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


@router.get(
    "/v1/models",
    response_model=ModelList,
    responses={401: {"model": OpenAIErrorEnvelope}},
    dependencies=[Depends(principal)],
)
async def list_models() -> ModelList:
    """The answer tiers as models: ``auto`` (default), ``evidence``, ``small``, ``large``."""
    return ModelList(data=[ModelOut(id=m) for m in MODELS])


@router.get(
    "/v1/models/{model}",
    response_model=ModelOut,
    responses={401: {"model": OpenAIErrorEnvelope}, 404: {"model": OpenAIErrorEnvelope}},
    dependencies=[Depends(principal)],
)
async def get_model(model: str) -> ModelOut:
    """One model of ``GET /v1/models`` (an alias answers as itself); 404 ``model_not_found``
    for any other name."""
    route_of(model)
    return ModelOut(id=model)


@router.post(
    "/v1/chat/completions",
    responses={
        200: {
            "description": "A `chat.completion` (JSON); with `stream: true`, Server-Sent Events "
            "of `chat.completion.chunk` objects ending in `data: [DONE]`.",
            "content": OPENAI_SSE_CONTENT,
        },
        **ERRORS,
        **RESUME_ERRORS,
    },
)
async def chat_completions(
    body: ChatBody,
    request: Request,
    who: Principal = Depends(principal),
    last_event_id: str | None = OPENAI_LAST_EVENT_ID,
) -> Any:
    """Answer the last user message from the caller's knowledge base (OpenAI shape)."""
    route_of(body.model)
    check_chat(body)
    svc = query_service(request)
    question, history = question_and_history(body.messages, svc.settings.api.max_query_chars)
    sources = body.sources or wants_sources(body.model)
    ask = Ask(
        question, body.model, body.stream, answer_budget(body), "chat", sources, history,
        wants_usage(body),
    )  # fmt: skip
    return await answer(svc, request, who, ask, last_event_id)


@router.post(
    "/v1/completions",
    responses={
        200: {
            "description": "A `text_completion` (JSON); with `stream: true`, Server-Sent Events "
            "of `text_completion` objects ending in `data: [DONE]`.",
            "content": OPENAI_SSE_CONTENT,
        },
        **ERRORS,
        **RESUME_ERRORS,
    },
)
async def completions(
    body: CompletionBody,
    request: Request,
    who: Principal = Depends(principal),
    last_event_id: str | None = OPENAI_LAST_EVENT_ID,
) -> Any:
    """Answer the ``prompt`` as a chat with one user message, or a role-prefixed transcript
    (``"user: ...\nassistant:"``, LlamaIndex's ``OpenAILike`` default) as the chat it writes
    out (:func:`transcript`), in OpenAI's text-completion shape."""
    route_of(body.model)
    prompt = check_completion(body).strip()
    svc = query_service(request)
    max_chars = svc.settings.api.max_query_chars
    chat = transcript(prompt)
    history: tuple[HistoryTurn, ...] = ()
    if chat is not None:
        prompt, history = question_and_history(chat, max_chars, param="prompt")
    elif len(prompt) > max_chars:
        raise too_long("prompt", len(prompt), max_chars)
    sources = body.sources or wants_sources(body.model)
    ask = Ask(
        prompt, body.model, body.stream, answer_budget(body), "text", sources, history,
        wants_usage(body),
    )  # fmt: skip
    return await answer(svc, request, who, ask, last_event_id)


async def answer(
    svc: QueryService, request: Request, who: Principal, ask: Ask, last_event_id: str | None
) -> Any:
    """Ask the pools and answer in the OpenAI shape of ``ask.kind`` (JSON or a stream).

    Raises:
        OpenAIError: 400 ``invalid_value`` for a question the query contract refuses.
        ApiError: the failed query's status, or 504 when no answer came within the wait.
    """
    started = time.monotonic()
    if ask.stream and last_event_id:
        return await resumed_chunks(svc, request, who, ask, last_event_id)
    param = "messages" if ask.kind == "chat" else "prompt"
    try:
        fields = {"route": route_of(ask.model), "stream": ask.stream, "history": list(ask.history)}
        query = query_body(svc.settings, query=ask.question, **fields)
    except ApiError as exc:
        raise OpenAIError(400, "invalid_value", f"{param}: {exc.message}", param=param) from exc
    event = build_request(svc.settings, who, query, max_tokens=ask.max_tokens)
    wait_s = client_wait_s(svc.settings, request)
    until = started + wait_s
    asked = await svc.ask(event, wait_s=wait_s, tokens=ask.stream)
    if ask.stream:
        return event_stream(
            svc, asked, positioned_chunks(event.request_id, ask, asked.items(until))
        )
    async with asked:
        result = await asked.final(until)
    if result is None:
        raise timed_out(event.request_id)
    if result.status != "answered":
        raise failure(result)
    return JSONResponse(completion(result, ask.model, ask.kind, ask.sources))


async def resumed_chunks(
    svc: QueryService, request: Request, who: Principal, ask: Ask, last_event_id: str
) -> Response:
    """The rest of a streamed completion after ``last_event_id``, from the log and then live
    (:mod:`api.streams.resume`); 204 when it is the stream's last event.

    Raises:
        ApiError: 400 (not an id of this API), 404, 410 ``STREAM_EXPIRED``, 503.
    """
    rid, after = resume_position(None, last_event_id)
    if after >= DONE:
        return nothing_left(rid)
    until = time.monotonic() + client_wait_s(svc.settings, request)
    asked = await reopen(svc, who, rid, until=until)
    return event_stream(svc, asked, positioned_chunks(rid, ask, asked.items(until)), after)
