"""The OpenAI edge's rendering: an :class:`~topics.answers.Answer` as a ``chat.completion``
(``text_completion``), a stream of items as positioned chunks (role, deltas, the rest, the
finish chunk, usage, ``[DONE]``), the sources block, and a failure or timeout as OpenAI's error.
See :mod:`api.routes.openai_compat` for the contract."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any, Literal

from api.errors import FAILED_STATUS, ApiError, openai_error_object
from api.openai.protocol import Ask, Kind
from api.streams.ids import ACCEPTED, DONE, FINAL, REPLACE, USAGE, Position
from api.streams.native import Positioned
from topics.answers import Answer
from topics.tokens import AnswerToken

#: The official OpenAI clients retry 5xx twice unless told not to: a timed-out or failed
#: question would be asked three times.
NO_RETRY = {"x-should-retry": "false"}


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


def failure(r: Answer) -> ApiError:
    """The error of a failed answer: its status (:data:`~api.errors.FAILED_STATUS`), code and
    message, with the request id and stage in ``details``; the clients told not to retry."""
    assert r.error is not None
    return ApiError(
        FAILED_STATUS.get(r.error.code, 500),
        r.error.code.value,
        r.error.message,
        details=[{"request_id": r.request_id, "stage": r.error.stage}],
        headers=NO_RETRY,
    )


def timed_out(request_id: str) -> ApiError:
    """504 ``TIMEOUT``: no answer within the wait (the client polls the query's link)."""
    return ApiError(
        504,
        "TIMEOUT",
        f"no answer within the wait; poll /v1/queries/{request_id}",
        details=[{"request_id": request_id}],
        headers=NO_RETRY,
    )


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
        err = timed_out(rid) if final is None else failure(final)
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
