"""Keyset pagination of SQL rows, newest first (one definition for every list endpoint)."""

from __future__ import annotations

import datetime as dt
from typing import Any, TypeVar

from sqlalchemy import Select, and_, or_
from sqlalchemy.orm import InstrumentedAttribute

T = TypeVar("T", bound=Any)


def newest_first(
    stmt: Select[T],
    created: InstrumentedAttribute[dt.datetime],
    key: InstrumentedAttribute[str],
    *,
    limit: int,
    before: tuple[dt.datetime, str] | None = None,
) -> Select[T]:
    """``stmt`` ordered newest first by ``(created, key)``, at most ``limit`` rows, only those
    after ``before`` (the sort key of the previous page's last row) when given.

    Keyset ("seek") pagination: a page never repeats or skips a row while rows are added,
    unlike ``OFFSET``; ``key`` breaks ties between rows created in the same instant.
    """
    if before is not None:
        at, last = before
        stmt = stmt.where(or_(created < at, and_(created == at, key < last)))
    return stmt.order_by(created.desc(), key.desc()).limit(limit)
