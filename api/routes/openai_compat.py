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

import json
import math
import re
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field

from api.asking import (
    FAILED_STATUS,
    LAST_EVENT_ID,
    build_request,
    event_stream,
    nothing_left,
    query_body,
    query_service,
    reopen,
    resume_position,
    wait_seconds,
)
from api.auth import Principal
from api.deps import principal
from api.errors import ApiError, OpenAIError, OpenAIErrorEnvelope, openai_error_object
from api.models import HistoryTurn, JsonBody
from api.querying import QueryService
from api.routes.query import OPENAI_SSE_CONTENT
from api.streams.ids import ACCEPTED, DONE, FINAL, REPLACE, USAGE, Position
from api.streams.native import Positioned
from ragstream.settings import Settings
from topics.answers import Answer
from topics.queries import MAX_ANSWER_TOKENS, MAX_TURNS
from topics.tokens import AnswerToken

router = APIRouter(tags=["openai"])
#: The models of ``GET /v1/models``: the answer tiers, ``auto`` (the router decides) first.
MODELS = ("auto", "evidence", "small", "large")
#: The default model name of LangChain's ``ChatOpenAI`` (``model_name``) and of LlamaIndex's
#: ``OpenAI``/``OpenAILike`` (``llama_index.llms.openai.base.DEFAULT_OPENAI_MODEL``): ``auto``.
FRAMEWORK_DEFAULTS = {"gpt-3.5-turbo": "auto"}
#: Other accepted names: ``ragstream`` (the default of a body without ``model``), aliases and
#: the frameworks' default model names.
ALIASES = {
    "ragstream": "auto",
    "ragstream-small": "small",
    "ragstream-large": "large",
    **FRAMEWORK_DEFAULTS,
}
#: A model name ending in this asks for the sources block in the message (see the docstring).
SOURCES_SUFFIX = "+sources"
#: Seconds the route answers before the client's own timeout would fire.
CLIENT_MARGIN_S = 1.0
#: Request headers that carry the client's timeout in seconds, first match wins.
TIMEOUT_HEADERS = ("x-request-timeout", "x-stainless-read-timeout")
#: The official OpenAI clients retry 5xx twice unless told not to: a timed-out or failed
#: question would be asked three times.
NO_RETRY = {"x-should-retry": "false"}
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
Kind = Literal["chat", "text"]


#: Message text: no NUL (the question goes into a query event, which refuses it).
Text = Annotated[str, Field(pattern=r"^[^\x00]*$")]
#: Text with a character that is not white space (what ``str.strip()`` keeps), and no NUL.
NOT_BLANK = {"type": "string", "pattern": "^[^\\x00]*[^\\x00\\s][^\\x00]*$"}
#: Characters kept of an earlier ``assistant`` message (the conversation's answers).
MAX_TURN_ANSWER_CHARS = 8000
#: The JSON Schema of a message that carries a question: ``messages`` must contain one.
HAS_QUESTION: dict[str, Any] = {
    "type": "object",
    "required": ["role", "content"],
    "properties": {
        "role": {"const": "user"},
        "content": {
            "anyOf": [
                NOT_BLANK,
                {
                    "type": "array",
                    "contains": {
                        "type": "object",
                        "required": ["type", "text"],
                        "properties": {"type": {"const": "text"}, "text": NOT_BLANK},
                    },
                },
            ]
        },
    },
}
#: The JSON Schema of ``prompt`` (the server refuses other prompts with 400).
PROMPT_SCHEMA: dict[str, Any] = {
    "anyOf": [NOT_BLANK, {"type": "array", "items": NOT_BLANK, "minItems": 1, "maxItems": 1}]
}


#: ``tool_choice`` / ``function_call``: only ``"none"`` (or absent) is honoured.
NONE_OR_NULL: dict[str, Any] = {"enum": ["none", None]}
#: ``response_format``: only text.
TEXT_FORMAT: dict[str, Any] = {
    "anyOf": [
        {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"const": "text"}},
            "additionalProperties": False,
        },
        {"type": "null"},
    ]
}


def _only_with_none(tools: str, choice: str) -> dict[str, Any]:
    """``tools`` (non-empty) only with ``choice`` ``"none"``, as JSON Schema (``if``/``then``)."""
    return {
        "if": {"required": [tools], "properties": {tools: {"type": "array", "minItems": 1}}},
        "then": {"required": [choice], "properties": {choice: {"const": "none"}}},
    }


class TextPart(JsonBody):
    """A content part; only text parts carry the question."""

    model_config = ConfigDict(extra="ignore")
    type: str = Field(max_length=32)
    text: Text | None = None


class ChatMessage(JsonBody):
    """One chat message (OpenAI shape)."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = Field(default=None)


class Unsupported(JsonBody):
    """The request fields that change the contract (see the module docstring)."""

    model_config = ConfigDict(extra="ignore")
    n: int = Field(default=1, ge=1, json_schema_extra={"maximum": 1})
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class StreamOptions(JsonBody):
    """``stream_options`` (OpenAI shape); other fields are accepted and ignored."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool = Field(
        default=False,
        description="Send `usage` on one more chunk with `choices: []` after the finish chunk.",
    )


class Extensions(JsonBody):
    """Request fields of ragstream's own (clients pass them as ``extra_body``)."""

    sources: bool = Field(
        default=False,
        description="Append a `Sources:` block (one `[n] title (source)` line per citation) "
        "to the answer's text, for clients that drop the top-level `citations` (LangChain, "
        "LlamaIndex). The same as the model suffix `+sources`.",
    )


class ChatBody(Unsupported, Extensions):
    """The subset of the OpenAI request that applies; other fields are accepted and ignored."""

    model: str = Field(default="ragstream", max_length=128)
    messages: list[ChatMessage] = Field(
        min_length=1,
        max_length=100,
        description="The conversation; at least one `user` message with text (the last one "
        "is the question).",
        json_schema_extra={"contains": HAS_QUESTION},
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)
    # The schema says what the server refuses with 400 (see check_chat): tools only with
    # tool_choice "none", a text response_format, no log probabilities.
    model_config = ConfigDict(
        extra="ignore",
        json_schema_extra={"allOf": [_only_with_none("tools", "tool_choice"),
                                     _only_with_none("functions", "function_call")]},
    )  # fmt: skip
    tools: list[Any] | None = None
    tool_choice: Any = Field(default=None, json_schema_extra=NONE_OR_NULL)
    functions: list[Any] | None = None
    function_call: Any = Field(default=None, json_schema_extra=NONE_OR_NULL)
    response_format: Any = Field(default=None, json_schema_extra=TEXT_FORMAT)
    logprobs: bool | None = Field(default=None, json_schema_extra={"enum": [False, None]})
    top_logprobs: int | None = Field(default=None, json_schema_extra={"enum": [0, None]})


class CompletionBody(Unsupported, Extensions):
    """``POST /v1/completions``: the legacy text-completion request (OpenAI shape)."""

    model: str = Field(default="ragstream", max_length=128)
    prompt: str | list[Any] = Field(
        description="The question: one string with text (a list of one such string is "
        "accepted too; token ids and batches are a 400).",
        json_schema_extra=PROMPT_SCHEMA,
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(default=None, max_length=256)
    logprobs: int | None = Field(default=None, json_schema_extra={"enum": [0, None]})
    echo: bool = Field(default=False, json_schema_extra={"enum": [False]})
    suffix: str | None = Field(default=None, json_schema_extra={"enum": ["", None]})
    best_of: int | None = Field(
        default=None,
        json_schema_extra={"anyOf": [{"type": "integer", "maximum": 1}, {"type": "null"}]},
    )


def _unsupported(param: str, what: str) -> OpenAIError:
    return OpenAIError(400, "unsupported_parameter", f"{param}: {what}", param=param)


def check_chat(body: ChatBody) -> None:
    """Refuse the chat parameters no tier honours (see the module docstring).

    Raises:
        OpenAIError: 400 ``unsupported_parameter`` naming the ``param``.
    """
    for tools, choice, names in (
        (body.tools, body.tool_choice, ("tools", "tool_choice")),
        (body.functions, body.function_call, ("functions", "function_call")),
    ):
        if choice is not None and choice != "none":  # a dict names a function: also refused
            raise _unsupported(names[1], "tool calls are not supported; only 'none' is")
        if tools and choice is None:
            raise _unsupported(
                names[0], "tool calls are not supported (or send tool_choice 'none')"
            )
    fmt = body.response_format
    if fmt is not None and fmt != {"type": "text"}:
        raise _unsupported("response_format", "only {'type': 'text'} is supported")
    if body.logprobs:
        raise _unsupported("logprobs", "log probabilities are not returned")
    if body.top_logprobs:
        raise _unsupported("top_logprobs", "log probabilities are not returned")
    _check_common(body)


def _check_common(body: Unsupported) -> None:
    if body.n > 1:
        raise _unsupported("n", "one choice per request (n = 1)")


def check_completion(body: CompletionBody) -> str:
    """The question of a text-completion request: its ``prompt``.

    Raises:
        OpenAIError: 400 ``unsupported_parameter`` for ``echo``, ``suffix``, ``logprobs``,
            ``best_of > 1``, ``n > 1`` or a prompt that is not one string.
    """
    if body.echo:
        raise _unsupported("echo", "the prompt is not echoed")
    if body.suffix:
        raise _unsupported("suffix", "insertion is not supported")
    if body.logprobs:
        raise _unsupported("logprobs", "log probabilities are not returned")
    if body.best_of is not None and body.best_of > 1:
        raise _unsupported("best_of", "one candidate per request")
    _check_common(body)
    prompt = body.prompt
    if isinstance(prompt, list):
        if len(prompt) != 1 or not isinstance(prompt[0], str):
            raise _unsupported("prompt", "one string (token ids and batches are not supported)")
        prompt = prompt[0]
    if not prompt.strip():
        raise OpenAIError(400, "invalid_value", "prompt: must not be blank", param="prompt")
    return prompt


def answer_budget(body: Unsupported) -> int | None:
    """The answer's token budget: ``max_completion_tokens``, else ``max_tokens`` (at most
    :data:`~topics.queries.MAX_ANSWER_TOKENS`), else ``None`` (the pool's default)."""
    wanted = body.max_completion_tokens or body.max_tokens
    return None if wanted is None else min(wanted, MAX_ANSWER_TOKENS)


def _text(message: ChatMessage) -> str:
    if message.content is None:
        return ""
    if isinstance(message.content, str):
        return message.content
    return "\n".join(p.text for p in message.content if p.type == "text" and p.text)


def _last_question(messages: Sequence[ChatMessage], param: str) -> int:
    for i in range(len(messages) - 1, -1, -1):
        message = messages[i]
        if message.role == "user" and _text(message).strip():
            return i
    raise OpenAIError(
        400, "invalid_value", f"{param}: no user message with text content", param=param
    )


def too_long(param: str, chars: int, max_chars: int) -> OpenAIError:
    """400 ``context_length_exceeded``: the question is over ``api.max_query_chars``."""
    return OpenAIError(
        400,
        "context_length_exceeded",
        f"{param}: the question is {chars} characters; at most {max_chars} are answered "
        "(api.max_query_chars)",
        param=param,
    )


def question_and_history(
    messages: Sequence[ChatMessage], max_chars: int = 4000, param: str = "messages"
) -> tuple[str, tuple[HistoryTurn, ...]]:
    """``(question, history)``: the last user message, and the conversation before it as
    turns (each earlier user message with the text of the ``assistant`` message that answered
    it, cut to :data:`MAX_TURN_ANSWER_CHARS`; the last :data:`~topics.queries.MAX_TURNS`).
    ``param``: the request field the messages came from, named in errors.

    Raises:
        OpenAIError: 400 ``invalid_value`` when there is no user message with text; 400
            ``context_length_exceeded`` when the last user message is over ``max_chars``.
    """
    last = _last_question(messages, param)
    question = _text(messages[last]).strip()
    if len(question) > max_chars:
        raise too_long(param, len(question), max_chars)
    turns: list[HistoryTurn] = []
    for message in messages[:last]:
        text = _text(message).strip()
        if message.role == "user" and text:
            turns.append(HistoryTurn(question=text[:max_chars]))
        elif message.role == "assistant" and text and turns and not turns[-1].answer:
            answer = text[:MAX_TURN_ANSWER_CHARS]
            turns[-1] = HistoryTurn(question=turns[-1].question, answer=answer)
    return question, tuple(turns[-MAX_TURNS:])


#: The role words that open a turn of a role-prefixed transcript, and the chat role each is:
#: LlamaIndex's ``messages_to_prompt`` writes ``"<role>: <content>"`` per message with the
#: ``MessageRole`` values and ends with ``"assistant: "`` (what ``OpenAILike`` sends to
#: ``/v1/completions`` with its default ``is_chat_model=False``); LangChain's
#: ``get_buffer_string`` (a chat prompt given to its completion ``OpenAI``) writes ``Human:``,
#: ``AI:``, ``System:``.
TRANSCRIPT_ROLES: dict[str, Literal["system", "user", "assistant", "tool"]] = {
    "system": "system", "developer": "system", "user": "user", "assistant": "assistant",
    "chatbot": "assistant", "model": "assistant", "tool": "tool", "function": "tool",
    "System": "system", "Human": "user", "AI": "assistant", "Tool": "tool", "Function": "tool",
}  # fmt: skip
#: A turn's opening at the start of a line: its role word and ``:`` (one space after it
#: belongs to the prefix).
_TURN = re.compile(rf"^({'|'.join(TRANSCRIPT_ROLES)}):[ \t]?", re.MULTILINE)


def transcript(prompt: str) -> list[ChatMessage] | None:
    """The chat a role-prefixed transcript prompt writes out (``"user: Which port?\n
    assistant: 5432\nuser: And how do I change it?\nassistant: "``), or ``None`` for a plain
    prompt.

    A prompt is a transcript when it starts with a turn (a line opening with a role word of
    :data:`TRANSCRIPT_ROLES` and ``:``) and has a ``user`` turn; each turn runs to the next
    line that opens one, so a message of several lines stays whole. A role word anywhere but
    at the start of a line is text. The messages are then read as the chat route reads its
    ``messages`` (:func:`question_and_history`): the last ``user`` turn is the question, the
    earlier turns the conversation; the trailing empty ``assistant:`` turn is dropped.
    """
    text = prompt.strip()
    turns = list(_TURN.finditer(text))
    if not turns or turns[0].start() != 0:
        return None
    messages: list[ChatMessage] = []
    for turn, after in zip(turns, [*turns[1:], None], strict=True):
        content = text[turn.end() : after.start() if after else len(text)].strip()
        role = TRANSCRIPT_ROLES[turn.group(1)]
        if content:
            messages.append(ChatMessage(role=role, content=content))
    if not any(m.role == "user" for m in messages):
        return None
    return messages


def wants_sources(model: str) -> bool:
    """True when ``model`` ends in :data:`SOURCES_SUFFIX`."""
    return model.endswith(SOURCES_SUFFIX)


def route_of(model: str) -> Literal["auto", "evidence", "small", "large"]:
    """The answer tier a ``model`` name forces (``auto``: the router picks); a
    :data:`SOURCES_SUFFIX` is ignored here.

    Raises:
        OpenAIError: 404 ``model_not_found`` for a name that is neither a model of
            ``GET /v1/models`` nor an alias.
    """
    base = model.removesuffix(SOURCES_SUFFIX) if wants_sources(model) else model
    name = ALIASES.get(base, base)
    if name not in MODELS:
        raise OpenAIError(
            404,
            "model_not_found",
            f"The model {model!r} does not exist; the models are {', '.join(MODELS)} "
            f"(aliases: {', '.join(ALIASES)})",
            param="model",
        )
    return name  # type: ignore[return-value]


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


def _sources(r: Answer) -> dict[str, Any]:
    return {
        "citations": [c.model_dump(mode="json") for c in r.citations],
        "evidence": [e.model_dump(mode="json") for e in r.evidence],
        "truncated": r.truncated,
        "degraded": list(r.degraded),
        "refused": r.refused,
    }


def sources_block(r: Answer) -> str:
    """The sources block appended to the answer's text on request: ``"\\n\\nSources:\\n[1]
    <title or doc id> (<source>)\\n..."``, one line per citation in ``n`` order (the source
    in parentheses only when the passage has one); ``""`` when the answer cites nothing."""
    if not r.citations:
        return ""
    lines = []
    for c in sorted(r.citations, key=lambda c: c.n):
        name = c.title or c.doc_id
        lines.append(f"[{c.n}] {name} ({c.source})" if c.source else f"[{c.n}] {name}")
    return "\n\nSources:\n" + "\n".join(lines)


def finish_reason(r: Answer) -> Literal["stop", "length"]:
    """``length`` when the LLM's answer was cut at its token limit, else ``stop``."""
    return "length" if r.truncated else "stop"


def completion(r: Answer, model: str, kind: Kind = "chat", sources: bool = False) -> dict[str, Any]:
    """A ``chat.completion`` (``text_completion``) object for an answer (``answered``);
    ``sources``: the text ends with :func:`sources_block`."""
    text = (r.answer or "") + (sources_block(r) if sources else "")
    if kind == "chat":
        choice: dict[str, Any] = {"message": {"role": "assistant", "content": text}}
        head = {"id": f"chatcmpl-{r.request_id}", "object": "chat.completion"}
    else:
        choice = {"text": text, "logprobs": None}
        head = {"id": f"cmpl-{r.request_id}", "object": "text_completion"}
    return {
        **head,
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, **choice, "finish_reason": finish_reason(r)}],
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


@dataclass(frozen=True)
class Ask:
    """One question of an OpenAI route: the text, the model named, the answer budget,
    whether the text ends with the sources block, the conversation before it, and whether a
    stream ends with a usage chunk (``stream_options.include_usage``)."""

    question: str
    model: str
    stream: bool
    max_tokens: int | None
    kind: Kind
    sources: bool = False
    history: tuple[HistoryTurn, ...] = ()
    include_usage: bool = False


def wants_usage(body: ChatBody | CompletionBody) -> bool:
    """True when a stream is to end with the usage chunk (``stream_options.include_usage``)."""
    return body.stream_options is not None and body.stream_options.include_usage


@router.post(
    "/v1/chat/completions",
    responses={
        200: {
            "description": "A `chat.completion` (JSON); with `stream: true`, Server-Sent Events "
            "of `chat.completion.chunk` objects ending in `data: [DONE]`.",
            "content": OPENAI_SSE_CONTENT,
        },
        **ERRORS,
    },
)
async def chat_completions(
    body: ChatBody,
    request: Request,
    who: Principal = Depends(principal),
    last_event_id: str | None = LAST_EVENT_ID,
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
    },
)
async def completions(
    body: CompletionBody,
    request: Request,
    who: Principal = Depends(principal),
    last_event_id: str | None = LAST_EVENT_ID,
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
        raise _timeout(event.request_id)
    if result.status != "answered":
        raise _failure(result)
    return JSONResponse(completion(result, ask.model, ask.kind, ask.sources))


def _chunk(
    request_id: str,
    ask: Ask,
    text: str | None,
    finish: str | None,
    final: dict[str, Any] | None = None,
) -> bytes:
    """One streamed chunk: a ``chat.completion.chunk`` (``text`` ``None``: the role chunk) or
    a ``text_completion``; ``final``: the extra fields of the last chunk."""
    if ask.kind == "chat":
        delta = {"role": "assistant", "content": ""} if text is None else {"content": text}
        if finish is not None:
            delta = {}
        head = {"id": f"chatcmpl-{request_id}", "object": "chat.completion.chunk"}
        choice: dict[str, Any] = {"delta": delta}
    else:
        head = {"id": f"cmpl-{request_id}", "object": "text_completion"}
        choice = {"text": text or "", "logprobs": None}
    data: dict[str, Any] = {
        **head,
        "created": int(time.time()),
        "model": ask.model,
        "choices": [{"index": 0, **choice, "finish_reason": finish}],
    }
    if final is not None:
        data |= final
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def final_fields(answer: Answer, shown: str) -> dict[str, Any]:
    """The extra fields of a stream's finish chunk: ``citations``, ``evidence``,
    ``truncated``, ``degraded``, ``refused``, ``answer`` (the recorded answer) and ``replaced``
    (the deltas streamed so far are not a prefix of ``answer``: the client shows ``answer``)."""
    text = answer.answer or ""
    return {**_sources(answer), "answer": text, "replaced": not text.startswith(shown)}


def usage_chunk(request_id: str, ask: Ask, answer: Answer) -> bytes:
    """The chunk after the finish chunk with ``stream_options.include_usage``: ``choices: []``
    and ``usage`` (OpenAI's usage chunk,
    https://platform.openai.com/docs/api-reference/chat/create#chat-create-stream_options)."""
    kind = "chat.completion.chunk" if ask.kind == "chat" else "text_completion"
    prefix = "chatcmpl" if ask.kind == "chat" else "cmpl"
    data = {
        "id": f"{prefix}-{request_id}",
        "object": kind,
        "created": int(time.time()),
        "model": ask.model,
        "choices": [],
        "usage": _usage(answer),
    }
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _ending(rid: str, ask: Ask, final: Answer | None, shown: str) -> list[Positioned]:
    """The chunks after the streamed tokens: the rest of the answer and the last chunk, or the
    ``error`` object of a failure (``final`` ``None``: the wait ran out: no position)."""
    if final is None or final.status != "answered":
        err = _timeout(rid) if final is None else _failure(final)
        payload = {"error": openai_error_object(err.status, err.code, err.message)}
        return [(FINAL if final is not None else None, f"data: {json.dumps(payload)}\n\n".encode())]
    text = final.answer or ""
    rest = text[len(shown) :] if text.startswith(shown) else ""
    # The sources block (``+sources``) follows the answer in the same chunk as its rest, so
    # ``answer`` and ``replaced`` are as without it and every position is sent once.
    more = rest + (sources_block(final) if ask.sources else "")
    out: list[Positioned] = [(REPLACE, _chunk(rid, ask, more, None))] if more else []
    last = _chunk(rid, ask, None, finish_reason(final), final_fields(final, shown))
    usage = [(USAGE, usage_chunk(rid, ask, final))] if ask.include_usage else []
    return [*out, (FINAL, last), *usage]


async def positioned_chunks(
    rid: str, ask: Ask, items: AsyncIterator[AnswerToken | Answer]
) -> AsyncIterator[Positioned]:
    """The streamed completion of ``items`` (the tokens, each ``seq`` once, then the answer),
    each chunk with its position (:mod:`api.streams.ids`): a role chunk (chat), content
    chunks, the finish chunk (with the fields of :func:`final_fields`), the usage chunk
    (``ask.include_usage``), ``[DONE]``.

    When the final answer arrives and extends what was streamed, the rest is sent, so the
    concatenated deltas equal the recorded answer; when it does not (the answer check replaced
    or cut the text), the last chunk says ``replaced``. A failure or timeout mid-stream is sent
    as an ``error`` object (the OpenAI convention).
    """
    if ask.kind == "chat":
        yield ACCEPTED, _chunk(rid, ask, None, None)
    shown = ""  # every token text so far, concatenated
    final = None
    async for item in items:
        if isinstance(item, Answer):
            final = item
            break
        if item.kind == "token" and item.text:
            shown += item.text
            yield Position.token(item.seq), _chunk(rid, ask, item.text, None)
    for out in _ending(rid, ask, final, shown):
        yield out
    yield (DONE if final is not None else None), b"data: [DONE]\n\n"


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
