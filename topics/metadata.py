"""Typed metadata: the type a document's metadata value filters as, shared by the write path
and the filter contract.

A document's ``metadata`` is indexed twice (``docs/http-api.md#filters``):

- as text, in ``metadata`` (an Elasticsearch ``flattened`` field: every value a keyword), for
  ``term`` filters on exact strings, whatever the key;
- by type, in one companion object per type, for ``range`` filters and typed ``term`` values:
  ``metadata_num.<key>`` (``double``), ``metadata_bool.<key>`` (``boolean``) and
  ``metadata_date.<key>`` (``date``, UTC, millisecond resolution).

A value's type is read from its text (what ``metadata`` keeps, so ``index rebuild`` derives the
same companions from an index's stored text, :func:`typed_fields`): a number (JSON number, or
a string written as one: ``9``, ``-2.5``, ``1e3``; not ``007`` or ``9 ``), a boolean (``true``
or ``false``, any case) or an ISO 8601 date or date-time (``2024-05-01``,
``2024-05-01T12:30:00Z``, ``2024-05-01 12:30+02:00``; no time zone: UTC). Anything else is text
only. Each type has a field of its own, so a key whose values differ in type across documents
(``year: 9`` here, ``year: "abc"`` there) never makes a mapping conflict: the number gets a
``metadata_num.year``, the text none, and both documents are indexed.

Only keys a filter may name (:data:`KEY`: 1-64 letters, digits and ``_``) get companions.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Mapping
from typing import Any, Literal

#: Metadata keys a filter may name (``metadata.<key>``), and the only ones typed.
KEY = re.compile(r"[A-Za-z0-9_]{1,64}")
#: The companion objects of the chunk mapping, one per type.
NUM_FIELD, BOOL_FIELD, DATE_FIELD = "metadata_num", "metadata_bool", "metadata_date"
#: A number written as text: JSON's number grammar (no leading zeros, no spaces, no ``+``).
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
#: ISO 8601 extended date, optionally with a time (``T`` or a space) and a zone.
_DATE = re.compile(
    r"(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2})"
    r"(?:[T ](?P<time>[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.(?P<frac>[0-9]{1,9}))?)?)"
    r"(?P<zone>Z|[+-][0-9]{2}(?::?[0-9]{2})?)?)?"
)
DATE_FORMS = "YYYY-MM-DD, optionally THH:MM[:SS[.fff]] and Z or ±HH:MM"

Scalar = str | int | float | bool | None


def as_number(value: Scalar) -> float | None:
    """``value`` as a finite double, or ``None``: an ``int``/``float`` (not a ``bool``) or a
    string in JSON's number grammar, within a double's range (an integer beyond 2**53 is
    rounded to the nearest double)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    if isinstance(value, str) and (len(value) > 64 or not _NUMBER.fullmatch(value)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def as_bool(value: Scalar) -> bool | None:
    """``value`` as a boolean, or ``None``: a ``bool``, or ``true``/``false`` in any case (the
    text ``True`` that documents indexed before typed metadata hold)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in {"true", "false"}:
        return value.lower() == "true"
    return None


def as_date(value: Scalar) -> tuple[dt.datetime, bool] | None:
    """``value`` as a UTC date-time and whether it had a time of day, or ``None`` (not a string
    of an ISO 8601 form of :data:`_DATE`, or not a real date: ``2024-02-30``). A date alone is
    its midnight, UTC; a time without a zone is UTC; fractions past microseconds are cut."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    m = _DATE.fullmatch(value)
    if m is None:
        return None
    text = m["date"]
    if m["time"]:
        time = m["time"] if not m["frac"] else m["time"][: -len(m["frac"])] + m["frac"][:6]
        zone = m["zone"] or "Z"
        if zone != "Z" and len(zone) == 5:  # +HHMM
            zone = f"{zone[:3]}:{zone[3:]}"
        elif zone != "Z" and len(zone) == 3:  # +HH
            zone = f"{zone}:00"
        text = f"{text}T{time}{zone}"
    try:
        parsed = dt.datetime.fromisoformat(text)
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=dt.UTC)
        return parsed.astimezone(dt.UTC), bool(m["time"])
    except (ValueError, OverflowError):
        return None


def date_text(value: dt.datetime) -> str:
    """``value`` (UTC) as Elasticsearch's ``strict_date_optional_time`` with milliseconds:
    ``2024-05-01T00:00:00.000Z``."""
    return value.astimezone(dt.UTC).replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"


def typed_fields(metadata: Mapping[str, Scalar]) -> dict[str, dict[str, Any]]:
    """The typed companions of a document's metadata, for its chunks' index documents.

    Args:
        metadata: the document's metadata (values as given, or their text as the ``metadata``
            field keeps it: both give the same companions).

    Returns:
        ``{"metadata_num": {key: float}, "metadata_bool": {key: bool}, "metadata_date": {key:
        "...Z"}}``, each left out when empty; keys outside :data:`KEY` and ``None`` values
        have none. A value may have several (``"20240501"`` is no date, but ``"2024-05-01"``
        is only a date; a number is never a boolean).
    """
    out: dict[str, dict[str, Any]] = {}
    for key, value in metadata.items():
        if value is None or not KEY.fullmatch(key):
            continue
        number, flag, date = as_number(value), as_bool(value), as_date(value)
        if number is not None:
            out.setdefault(NUM_FIELD, {})[key] = number
        if flag is not None:
            out.setdefault(BOOL_FIELD, {})[key] = flag
        if date is not None:
            out.setdefault(DATE_FIELD, {})[key] = date_text(date[0])
    return out


def metadata_range(
    field: str, gte: float | str | None, lte: float | str | None
) -> tuple[str, dict[str, float | str]]:
    """The typed field and bounds of a range filter on ``metadata.<key>``.

    Both bounds are numbers (a JSON number or a string :func:`as_number` reads) → the
    ``metadata_num.<key>`` range; both are ISO 8601 dates (:func:`as_date`) → the
    ``metadata_date.<key>`` range, a bare date as ``lte`` meaning the end of that day
    (``23:59:59.999Z``). Either bound may be ``None`` (open).

    Returns:
        ``(field, {"gte": ..., "lte": ...})`` with the given bounds only.

    Raises:
        ValueError: no bound, a bound neither a number nor a date, or one of each; the message
            says which and what is accepted.
    """
    bounds = {op: v for op, v in (("gte", gte), ("lte", lte)) if v is not None}
    if not bounds:
        raise ValueError("a range filter needs gte or lte")
    key = field.removeprefix("metadata.")
    kinds: set[Literal["number", "date"]] = set()
    typed: dict[str, float | str] = {}
    for op, bound in bounds.items():
        number = as_number(bound)
        date = None if number is not None else as_date(bound)
        if number is not None:
            kinds.add("number")
            typed[op] = number
        elif date is not None:
            kinds.add("date")
            moment, has_time = date
            if op == "lte" and not has_time:
                moment += dt.timedelta(days=1, milliseconds=-1)
            typed[op] = date_text(moment)
        else:
            raise ValueError(
                f"range on {field}: {op} {bound!r} is neither a number nor an ISO 8601 date "
                f"({DATE_FORMS}); metadata ranges compare numbers or dates, use a term filter "
                "for text"
            )
    if len(kinds) > 1:
        raise ValueError(f"range on {field}: gte and lte must both be numbers or both dates")
    return f"{NUM_FIELD if kinds == {'number'} else DATE_FIELD}.{key}", typed


def metadata_terms(field: str, values: tuple[str | bool | float, ...]) -> list[dict[str, Any]]:
    """The ``terms`` clauses of a term filter on ``metadata.<key>``: strings on the text
    (``metadata.<key>``, exact), booleans on ``metadata_bool.<key>``, numbers on
    ``metadata_num.<key>`` (``9`` matches ``9`` and ``9.0``), one clause per kind given.

    Raises:
        ValueError: a number that is no finite double.
    """
    key = field.removeprefix("metadata.")
    text = [v for v in values if isinstance(v, str)]
    flags = [v for v in values if isinstance(v, bool)]
    numbers: list[float] = []
    for v in values:
        if isinstance(v, (bool, str)):
            continue
        number = as_number(v)
        if number is None:
            raise ValueError(f"term on {field}: {v!r} is not a finite number")
        numbers.append(number)
    clauses: list[dict[str, Any]] = []
    if text:
        clauses.append({"terms": {field: text}})
    if flags:
        clauses.append({"terms": {f"{BOOL_FIELD}.{key}": flags}})
    if numbers:
        clauses.append({"terms": {f"{NUM_FIELD}.{key}": numbers}})
    return clauses
