"""The OpenAI edge's protocol: the request and response models of ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions`` and their validation (what no tier honours is a
400 naming the ``param``), the model names (the answer tiers and their aliases) and the question
and conversation a request carries. See :mod:`api.routes.openai_compat` for the contract."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from api.bodies import JsonBody
from api.errors import OpenAIError
from api.models import HistoryTurn
from topics.queries import MAX_ANSWER_TOKENS, MAX_TURNS

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
