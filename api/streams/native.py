"""The Server-Sent Events of ``POST /v1/query`` (and ``GET /v1/queries/{id}/events``), each
with its ``id:`` (:mod:`api.streams.ids`).

One renderer serves a first stream and a resumed one: :func:`positioned` turns the request's
items (its tokens, each ``seq`` once, then the final :class:`~topics.answers.Answer`) into
``(position, event, data)``; :func:`api.asking.numbered` writes the events past the client's
position with their ids. The ``replace`` decision compares the answer with *every* token text
from ``seq`` 0, so a resumed stream ends exactly as an unbroken one would.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from api.models import QueryResult
from api.streams.ids import ACCEPTED, FINAL, QUEUED, REPLACE, Position
from topics.answers import Answer
from topics.tokens import AnswerToken

#: ``(position, event)``: one event without its ``id:`` line; position ``None``: the event moves
#: no position (``timeout``).
Positioned = tuple[Position | None, bytes]
Item = AnswerToken | Answer


def sse(event: str, data: Any) -> bytes:
    """One Server-Sent Event (its ``id:`` line is added by :func:`api.asking.numbered`)."""
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def token_event(token: AnswerToken) -> tuple[str, dict[str, Any], str] | None:
    """``(event, data, text)`` of a token: ``evidence`` (no text) or ``token``; ``None`` for a
    token without text (the final marker)."""
    if token.kind == "evidence":
        spans = [e.model_dump(mode="json") for e in token.evidence]
        return "evidence", {"seq": token.seq, "evidence": spans}, ""
    if token.text:
        return "token", {"seq": token.seq, "text": token.text}, token.text
    return None


def final_events(
    answer: Answer, shown: str, latency_ms: float, links: dict[str, str]
) -> list[Positioned]:
    """The events that end a stream: ``answer`` (preceded by ``replace`` when the recorded
    answer is not ``shown``, the token texts concatenated), or ``error``."""
    result = QueryResult.render(answer, latency_ms=latency_ms, links=links)
    if result.status != "answered":
        return [(FINAL, sse("error", result.model_dump(mode="json")))]
    text = answer.answer or ""
    replace = [(REPLACE, sse("replace", {"text": text, "truncated": answer.truncated}))]
    final = (FINAL, sse("answer", result.model_dump(mode="json")))
    return [*(replace if text != shown else []), final]


async def positioned(
    request_id: str,
    items: AsyncIterator[Item],
    *,
    links: dict[str, str],
    started: float,
    backlog: Callable[[], Awaitable[tuple[int, str]]] | None,
) -> AsyncIterator[Positioned]:
    """Every event of the stream of ``request_id``: ``accepted``, ``queued`` (when ``backlog``
    is given: the request waits in the pools), the tokens, then the final events, or
    ``timeout`` when ``items`` ends without an answer."""
    yield ACCEPTED, sse("accepted", {"request_id": request_id, "links": links})
    if backlog is not None:
        lag, pool = await backlog()
        yield QUEUED, sse("queued", {"request_id": request_id, "backlog": lag, "pool": pool})
    shown = ""  # every token text so far, concatenated
    async for item in items:
        if isinstance(item, AnswerToken):
            event = token_event(item)
            if event is not None:
                kind, data, text = event
                shown += text
                yield Position.token(item.seq), sse(kind, data)
            continue
        ms = (time.monotonic() - started) * 1000
        for out in final_events(item, shown, ms, links):
            yield out
        return
    yield None, sse("timeout", {"request_id": request_id, "links": links})
