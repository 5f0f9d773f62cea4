"""Which logged queries a replay answers again: a tenant's final queries in a time window of the
SQL query log, or a seeded random sample of them, oldest first.

The query log keeps the question and the whole answer (:class:`topics.answers.Answer`), not the
request's options (filters, ``top_n``/``top_k``, a forced route, ``max_tokens``): a replayed
query is asked with the defaults and the candidate's tier.
"""

from __future__ import annotations

import datetime as dt
import random
import re
from dataclasses import dataclass

from sqlalchemy.orm import Session, sessionmaker

from replay import ReplayError
from topics.answers import Answer
from workers import query_log

_AGO = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


@dataclass(frozen=True)
class Selection:
    """Logged queries to replay.

    Attributes:
        tenant: whose queries.
        since: created at or after (UTC); ``None``: from the first.
        until: created before (UTC); ``None``: up to now.
        sample: at most this many, drawn at random (seeded) when the window holds more.
        seed: seeds the draw, so a rerun replays the same queries.
    """

    tenant: str
    since: dt.datetime | None
    until: dt.datetime | None
    sample: int
    seed: int = 0

    def describe(self) -> dict[str, object]:
        """The selection as the report shows it."""
        return {
            "tenant": self.tenant,
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "sample": self.sample,
            "seed": self.seed,
        }


def parse_when(text: str, now: dt.datetime) -> dt.datetime:
    """A point in time: ISO 8601 (``2026-12-02T05:30``, ``2026-12-02``; without an offset it is
    UTC) or a duration before ``now`` (``90s``, ``30m``, ``2h``, ``1d``).

    Raises:
        ReplayError: neither.
    """
    ago = _AGO.match(text)
    if ago:
        return now - dt.timedelta(seconds=float(ago.group(1)) * _UNIT_S[ago.group(2)])
    try:
        when = dt.datetime.fromisoformat(text.strip())
    except ValueError as exc:
        raise ReplayError(
            f"{text!r} is no time: give ISO 8601 (2026-12-02T05:30) or a duration ago (2h)"
        ) from exc
    return when.replace(tzinfo=dt.UTC) if when.tzinfo is None else when.astimezone(dt.UTC)


def select_logged(
    sessions: sessionmaker[Session], selection: Selection
) -> tuple[list[Answer], int]:
    """``(answers, in_window)``: the logged answers chosen, oldest first, and how many final
    queries the window holds.

    Raises:
        ReplayError: the window holds none (the message says how many the tenant has at all).
    """
    if selection.sample < 1:
        raise ReplayError("--sample must be at least 1")
    ids = query_log.final_ids(
        sessions, selection.tenant, since=selection.since, until=selection.until
    )
    if not ids:
        total = len(query_log.final_ids(sessions, selection.tenant))
        window = (
            f"{selection.since.isoformat() if selection.since else 'the first'} to "
            f"{selection.until.isoformat() if selection.until else 'now'}"
        )
        raise ReplayError(
            f"no logged query of tenant {selection.tenant!r} from {window} "
            f"(the tenant has {total} in the query log); widen --since/--until or check --tenant"
        )
    chosen = ids
    if len(ids) > selection.sample:
        order = {rid: i for i, rid in enumerate(ids)}
        drawn = random.Random(selection.seed).sample(ids, selection.sample)
        chosen = sorted(drawn, key=order.__getitem__)
    return query_log.read_final(sessions, chosen), len(ids)
