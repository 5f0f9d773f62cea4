"""Document permissions: who may read a document (its readers) and who is asking (principals).

A principal is ``user:<id>`` or ``group:<id>`` (``<id>``: 1-128 characters of letters, digits
and ``. _ @ + = -``). A document's readers are a set of principals; a document without
readers (``None``) is readable by everyone of its tenant. A query carries the principals of
whoever asks (``QueryRequest.principals``); ``None`` there means no permission filter at all
(a tenant-wide key, :data:`ALL`, or a producer trusted on the bus). Anything else is refused
by the event models (so a malformed permission event goes to the dead-letter queue) and by
the API (422): there is no principal directory to look names up in, so "unknown" means "not
of this form". See ``docs/permissions.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Final

from pydantic import Field

#: The form of a principal.
PRINCIPAL_PATTERN: Final = r"^(user|group):[A-Za-z0-9._@+=\-]{1,128}$"
_PRINCIPAL = re.compile(PRINCIPAL_PATTERN)
#: On an API key only: the key reads every document of its tenant (no permission filter).
ALL: Final = "*"
#: The most readers a document, or principals a key, may carry.
MAX_PRINCIPALS: Final = 100

Principal = Annotated[str, Field(pattern=PRINCIPAL_PATTERN, max_length=134)]
#: Who is asking, as a query carries it (may be empty: only documents without readers).
Principals = Annotated[tuple[Principal, ...], Field(max_length=MAX_PRINCIPALS)]
#: A document's readers: at least one principal (``None``, not an empty set, says "everyone of
#: the tenant"; in Elasticsearch an empty field and a missing one are the same).
Readers = Annotated[tuple[Principal, ...], Field(min_length=1, max_length=MAX_PRINCIPALS)]


class PrincipalError(ValueError):
    """A principal that is not ``user:<id>`` or ``group:<id>``, or too many of them."""


def normalise(values: Iterable[str]) -> tuple[str, ...]:
    """``values`` stripped, de-duplicated and sorted (the one order caches and SQL use).

    Raises:
        PrincipalError: a value is not a principal (``docs/permissions.md``: there is no
            directory of principals, so "unknown" means "not ``user:`` or ``group:``"), or
            there are more than :data:`MAX_PRINCIPALS`.
    """
    out = sorted({v.strip() for v in values})
    bad = [v for v in out if not _PRINCIPAL.fullmatch(v)]
    if bad:
        raise PrincipalError(
            f"unknown principal {bad[0]!r}: a principal is 'user:<id>' or 'group:<id>'"
        )
    if len(out) > MAX_PRINCIPALS:
        raise PrincipalError(f"at most {MAX_PRINCIPALS} principals, got {len(out)}")
    return tuple(out)


def normalise_readers(values: Iterable[str] | None) -> tuple[str, ...] | None:
    """A document's readers: ``None`` stays ``None`` (everyone of the tenant); otherwise
    :func:`normalise`, and at least one.

    Raises:
        PrincipalError: as :func:`normalise`, or an empty set (say ``None`` for everyone).
    """
    if values is None:
        return None
    out = normalise(values)
    if not out:
        raise PrincipalError(
            "a document's readers need at least one principal (null: everyone of the tenant)"
        )
    return out


def may_read(principals: Iterable[str] | None, readers: Iterable[str] | None) -> bool:
    """Whether an asker with ``principals`` (``None``: a tenant-wide key) may read a document
    with ``readers`` (``None``: everyone of the tenant): the rule the Elasticsearch filter
    and the SQL filter apply, for one document in Python."""
    if principals is None or readers is None:
        return True
    return not set(principals).isdisjoint(readers)
