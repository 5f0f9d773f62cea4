"""``rag.tokens``: the answer's token stream, keyed by ``request_id`` so it stays in order."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from topics.base import Event
from topics.responses import EvidenceSpan


class AnswerToken(Event):
    """One streamed piece of an answer; ``seq`` counts from 0, ``final`` marks the last one.

    ``kind="evidence"`` is the evidence event that precedes every LLM token of a streamed answer
    (``seq`` 0, ``evidence`` set, ``text`` empty); ``kind="token"`` is a piece of answer text.
    """

    request_id: str = Field(min_length=1, max_length=128)
    seq: int = Field(ge=0)
    kind: Literal["token", "evidence"] = "token"
    text: str = ""
    evidence: tuple[EvidenceSpan, ...] = ()
    final: bool = False

    def key(self) -> bytes:
        """Keyed by ``request_id``."""
        return self.request_id.encode()


class TokenOrder:
    """Passes each streamed token of one answer once, in order.

    A replayed generation (the pool crashed before committing, and its input is consumed
    again) streams its tokens again from ``seq`` 0: a reader shows a token only when its
    ``seq`` is past every one it has shown. Used by every reader of ``rag.tokens`` (SSE,
    the OpenAI-compatible stream, the Python client).
    """

    def __init__(self) -> None:
        self.next_seq = 0

    def fresh(self, token: AnswerToken) -> bool:
        """True the first time a token at or past ``next_seq`` arrives (then moves past it)."""
        if token.seq < self.next_seq:
            return False
        self.next_seq = token.seq + 1
        return True
