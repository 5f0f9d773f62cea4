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
