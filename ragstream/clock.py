"""UTC time helpers, in a module of their own so that the API's models and the CLI use them
without loading SQLAlchemy (:mod:`ragstream.db.models` re-exports both)."""

from __future__ import annotations

import datetime as dt


def utcnow() -> dt.datetime:
    """Return the current time as a timezone-aware UTC datetime."""
    return dt.datetime.now(dt.UTC)


def as_utc(value: dt.datetime) -> dt.datetime:
    """``value`` as a timezone-aware UTC datetime: a naive one (SQLite returns them) is read as
    UTC; an aware one is converted to UTC."""
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)
