"""Events of the bus benchmark's echo pipeline (``ragstream bench bus``)."""

from __future__ import annotations

from pydantic import Field

from topics.base import Event


class EchoEvent(Event):
    """A numbered probe; ``sent_at_ns`` is the producer's ``time.time_ns()``."""

    seq: int = Field(ge=0)
    sent_at_ns: int
    payload: str = ""
    hops: int = 0

    def key(self) -> bytes:
        """Keyed by ``event_id`` (spreads over partitions)."""
        return self.event_id.encode()
