"""Document readers and key principals in SQL: a comma-delimited text column.

``None`` (NULL): a document readable by everyone of its tenant / a key that holds no
principal. Otherwise ``",group:eng,user:ada,"`` (sorted, with a comma at both ends), so "one
of these principals reads it" is a portable ``LIKE`` per principal (SQLite and PostgreSQL
alike), escaped: principals may hold ``_``. Principals never hold a comma
(:data:`topics.acl.PRINCIPAL_PATTERN`; the kernel does not import topics, the callers pass
validated values).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import ColumnElement, false, or_, true


def to_column(principals: Sequence[str] | None) -> str | None:
    """The column value of ``principals`` (``None`` stays NULL)."""
    if principals is None:
        return None
    return "," + ",".join(sorted(set(principals))) + ","


def from_column(value: str | None) -> tuple[str, ...] | None:
    """The principals of a column value (NULL is ``None``)."""
    if value is None:
        return None
    return tuple(p for p in value.split(",") if p)


def readable_by(column: Any, principals: Sequence[str] | None) -> ColumnElement[bool]:
    """A WHERE clause: rows whose readers ``column`` is NULL or holds one of ``principals``.

    Args:
        column: a readers column (``Document.readers``).
        principals: the asker's; ``None``: every row (a tenant-wide key).
    """
    if principals is None:
        return true()
    return or_(column.is_(None), *(column.contains(f",{p},", autoescape=True) for p in principals))


def asker_column(principals: Sequence[str] | None) -> str:
    """How a query log row records who asked: ``"*"`` for a tenant-wide asker (``None``),
    else the principals sorted and joined by commas (``""`` for none)."""
    return "*" if principals is None else ",".join(sorted(set(principals)))


def asked_by(column: Any, principals: Sequence[str] | None) -> ColumnElement[bool]:
    """A WHERE clause: query log rows an asker with ``principals`` may read: those asked with
    the same principal set (a row logged before permissions, NULL, counts as asked with none);
    every row for a tenant-wide asker (``None``). An answer holds what its asker could read,
    so it is shown only to askers who read the same documents."""
    if principals is None:
        return true()
    mine = asker_column(principals)
    return or_(column == mine, column.is_(None) if mine == "" else false())
