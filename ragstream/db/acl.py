"""Document readers and key principals in SQL: a comma-delimited text column.

``None`` (NULL): a document readable by everyone of its tenant / a key that holds no
principal. Otherwise ``",group:eng,user:ada,"`` (sorted, with a comma at both ends), so "one
of these principals reads it" is a portable ``LIKE`` per principal (SQLite and PostgreSQL
alike), escaped: principals may hold ``_``. Principals never hold a comma
(:data:`topics.acl.PRINCIPAL_PATTERN`; the kernel does not import topics, the callers pass
validated values).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from sqlalchemy import ColumnElement, false, not_, or_, select, true
from sqlalchemy.orm import Session, sessionmaker

from ragstream.db.models import Document


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


def unreadable(
    session: Session, tenant: str, doc_ids: Collection[str], principals: Sequence[str] | None
) -> set[str]:
    """The ids among ``doc_ids`` of ``tenant`` that an asker with ``principals`` may not read
    now: their registry rows' readers (``documents.readers``) hold none of ``principals``
    (:func:`readable_by`, the rule of :func:`topics.acl.may_read`). One query in ``session``;
    none when there is nothing to check (no ids, or ``principals`` ``None``: a tenant-wide
    asker reads everything). An id without a row is not in the result.

    The check a stored answer passes before it is served again: the query log's
    (:func:`workers.query_log.read`) and the answer caches' (:class:`CurrentReaders`).
    """
    if not doc_ids or principals is None:
        return set()
    stmt = select(Document.doc_id).where(
        Document.tenant == tenant,
        Document.doc_id.in_(sorted(doc_ids)),
        not_(readable_by(Document.readers, principals)),
    )
    return set(session.scalars(stmt))


class CurrentReaders:
    """:func:`unreadable` in a session of its own, for a reader that holds no session (the
    answer caches, :class:`workers.caches.AnswerCache`).

    Args:
        sessions: SQL session factory of the document registry.
    """

    def __init__(self, sessions: sessionmaker[Session]) -> None:
        self._sessions = sessions

    def unreadable(
        self, tenant: str, doc_ids: Collection[str], principals: Sequence[str] | None
    ) -> set[str]:
        """:func:`unreadable`; no session is opened when there is nothing to check.

        Raises:
            sqlalchemy.exc.SQLAlchemyError: the store cannot be read.
        """
        if not doc_ids or principals is None:
            return set()
        with self._sessions() as session:
            return unreadable(session, tenant, doc_ids, principals)
