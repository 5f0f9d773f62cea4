"""SSE event ids of an answer stream: ``<request_id>:<position>``.

Every event of a streamed answer (``POST /v1/query`` and the OpenAI-compatible streams) carries
an ``id:`` naming the request and the event's position in the stream. Positions are ordered;
a client that reconnects with ``Last-Event-ID`` gets every event past its position, once:

=========  ===========================================  ============================
position   native stream (``POST /v1/query``)           OpenAI stream
=========  ===========================================  ============================
``a``      ``accepted``                                 the role chunk (chat)
``q``      ``queued``                                   -
``<n>``    ``evidence`` / ``token`` of ``seq`` n        the delta of the token ``seq`` n
``r``      ``replace``                                  the rest of the answer (delta)
``f``      ``answer`` / ``error``                       the finish chunk (or the error)
``u``      -                                            the usage chunk (``include_usage``)
``d``      -                                            ``[DONE]``
=========  ===========================================  ============================

``<n>`` is the token's ``seq`` on ``rag.tokens`` (``topics.tokens.AnswerToken``), so an id maps
to a position in the request's token stream. A ``timeout`` event (the wait ran out) repeats the
id of the event before it: it moves no position, and a client that resumes from it gets the
rest of the answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

#: Rank of each named position (tokens rank between ``q`` and ``r``, ordered by ``seq``).
_RANKS: Final = {"a": 0, "q": 1, "r": 3, "f": 4, "u": 5, "d": 6}
_NAMES: Final = {rank: name for name, rank in _RANKS.items()}
TOKEN_RANK: Final = 2
#: Longest id accepted (a 128-character request id, ``:`` and a position).
MAX_ID_CHARS: Final = 160


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A place in an answer stream: ``rank`` (0 ``a`` ... 6 ``d``), then ``seq`` for tokens."""

    rank: int
    seq: int = 0

    @classmethod
    def token(cls, seq: int) -> Position:
        """The position of the token ``seq``."""
        return cls(TOKEN_RANK, seq)

    @classmethod
    def named(cls, name: str) -> Position:
        """The position ``a``, ``q``, ``r``, ``f``, ``u`` or ``d``.

        Raises:
            KeyError: another name.
        """
        return cls(_RANKS[name])

    def code(self) -> str:
        """The position as written in an id (``a``, ``7``, ``f``)."""
        return str(self.seq) if self.rank == TOKEN_RANK else _NAMES[self.rank]


ACCEPTED: Final = Position.named("a")
QUEUED: Final = Position.named("q")
REPLACE: Final = Position.named("r")
FINAL: Final = Position.named("f")
USAGE: Final = Position.named("u")
DONE: Final = Position.named("d")


#: What an event id of this API looks like, for the OpenAPI spec of the parameters that take
#: one (:func:`parse_event_id` is the check): ``<request_id>:<position>``.
EVENT_ID_PATTERN: Final = r"^\s*[^:]+:(?:[0-9]+|[aqrfud])\s*$"


def event_id(request_id: str, position: Position) -> str:
    """``<request_id>:<position>``."""
    return f"{request_id}:{position.code()}"


def parse_event_id(value: str) -> tuple[str, Position]:
    """``(request_id, position)`` of an id written by :func:`event_id`.

    Raises:
        ValueError: not such an id (too long, no ``:``, an unknown position, a negative seq).
    """
    value = value.strip()
    if len(value) > MAX_ID_CHARS:
        raise ValueError(f"an event id has at most {MAX_ID_CHARS} characters")
    request_id, sep, code = value.rpartition(":")
    if not sep or not request_id:
        raise ValueError(f"not an event id of this API: {value[:40]!r} (<request_id>:<position>)")
    if code.isdigit():
        return request_id, Position.token(int(code))
    try:
        return request_id, Position.named(code)
    except KeyError:
        raise ValueError(f"unknown stream position {code!r} in event id {value[:40]!r}") from None
