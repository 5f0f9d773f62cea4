"""``rag.tokens``: the answer's token stream, keyed by ``request_id`` so it stays in order."""

from __future__ import annotations

from pydantic import Field

from topics.base import Event


class AnswerToken(Event):
    """One streamed piece of an answer; ``seq`` counts from 0, ``final`` marks the last one."""

    request_id: str = Field(min_length=1, max_length=128)
    seq: int = Field(ge=0)
    text: str = ""
    final: bool = False

    def key(self) -> bytes:
        """Keyed by ``request_id``."""
        return self.request_id.encode()
