"""An OpenAI search filter as the index's filters (:data:`topics.queries.Filter` items, all of
which must match).

Attributes are the documents' metadata, so ``key`` is ``metadata.<key>`` and values compare as
issue 39's typed metadata does (:mod:`topics.metadata`): numbers as numbers, booleans as
booleans, ISO 8601 dates as dates, other text exactly.

- ``eq``: a term filter of one value; ``in``: of its list (1-100 values);
- ``gte``/``lte``: a range filter with that bound (a number or a date);
- ``gt``/``lt``: the same with the bound moved past the value: a number to the next double
  (:func:`math.nextafter`: the index stores doubles, so ``> v`` is exactly ``>= next(v)``), a
  date by one millisecond (the index's date resolution);
- ``and``: every child's filters;
- ``or``: only over ``eq``/``in`` on one key, as one term filter of every value.

What the index cannot apply is a :class:`FilterError` with the reason (a 400): ``ne`` and
``nin`` (the retrieval filters only include, never exclude), ``or`` across keys or over
ranges, a range over a boolean or over text that is neither a number nor a date, a list for
a one-value comparison.
"""

from __future__ import annotations

import datetime as dt
import math

from pydantic import ValidationError

from api.vector_stores.protocol import ComparisonFilter, CompoundFilter, SearchFilter
from topics.metadata import as_date, as_number, date_text
from topics.queries import Filter, RangeFilter, TermFilter

#: Most filter items one search sends (``POST /v1/query``'s limit, less the store's own).
MAX_FILTERS = 19


class FilterError(ValueError):
    """A filter the index cannot apply; ``str()`` is the reason."""


def to_filters(f: SearchFilter | None) -> list[Filter]:
    """``f`` as filter items that must all match (``[]`` for none).

    Raises:
        FilterError: a form the index cannot apply (see the module docstring), or more than
            :data:`MAX_FILTERS` items.
    """
    if f is None:
        return []
    out = _compound(f) if isinstance(f, CompoundFilter) else [_comparison(f)]
    if len(out) > MAX_FILTERS:
        raise FilterError(f"filters: at most {MAX_FILTERS} comparisons")
    return out


def _compound(f: CompoundFilter) -> list[Filter]:
    if f.type == "and":
        out: list[Filter] = []
        for child in f.filters:
            out.extend(
                _compound(child) if isinstance(child, CompoundFilter) else [_comparison(child)]
            )
        return out
    return [_any_of(f)]


def _any_of(f: CompoundFilter) -> Filter:
    """An ``or`` of ``eq``/``in`` comparisons of one key: one term filter of all values."""
    keys: set[str] = set()
    values: list[str | int | float | bool] = []
    for child in f.filters:
        if isinstance(child, CompoundFilter) or child.type not in ("eq", "in"):
            raise FilterError(
                "filters: an 'or' can only hold eq/in comparisons of one key (the index "
                "combines other filters with 'and' only)"
            )
        keys.add(child.key)
        values.extend(child.value if isinstance(child.value, list) else [child.value])
    if len(keys) != 1:
        raise FilterError(
            f"filters: an 'or' across keys ({', '.join(sorted(keys))}) cannot be applied: "
            "the index combines filters of different keys with 'and' only"
        )
    return _term(keys.pop(), values)


def _comparison(f: ComparisonFilter) -> Filter:
    if f.type in ("ne", "nin"):
        raise FilterError(
            f"filters: {f.type!r} on {f.key!r} is not supported: the index's filters include "
            "documents, they never exclude them (use eq, in or a range)"
        )
    if f.type in ("eq", "in"):
        values = f.value if isinstance(f.value, list) else [f.value]
        if f.type == "eq" and isinstance(f.value, list):
            raise FilterError(f"filters: 'eq' on {f.key!r} compares one value, not a list")
        return _term(f.key, values)
    if isinstance(f.value, list | bool):
        raise FilterError(f"filters: {f.type!r} on {f.key!r} needs a number or a date")
    bound = _bound(f.key, f.type, f.value)
    lower = f.type in ("gt", "gte")
    try:
        return RangeFilter(
            field=f"metadata.{f.key}", gte=bound if lower else None, lte=None if lower else bound
        )
    except ValidationError as exc:
        raise FilterError(f"filters: {f.type!r} on {f.key!r}: {_reason(exc)}") from exc


def _term(key: str, values: list[str | int | float | bool]) -> Filter:
    try:
        return TermFilter(field=f"metadata.{key}", values=tuple(values))
    except ValidationError as exc:
        raise FilterError(f"filters: {key!r}: {_reason(exc)}") from exc


def _bound(key: str, op: str, value: str | float) -> float | str:
    """The inclusive bound of ``op`` (``gt``, ``gte``, ``lt``, ``lte``) and ``value``."""
    number = as_number(value)
    if number is not None:
        if op == "gt":
            return math.nextafter(number, math.inf)
        if op == "lt":
            return math.nextafter(number, -math.inf)
        return number
    date = as_date(value) if isinstance(value, str) else None
    if date is None:
        raise FilterError(
            f"filters: {op!r} on {key!r} needs a number or an ISO 8601 date, not {value!r}"
        )
    moment, _ = date
    if op == "gt":
        return date_text(moment + dt.timedelta(milliseconds=1))
    if op == "lt":
        return date_text(moment - dt.timedelta(milliseconds=1))
    return str(value)


def _reason(exc: ValidationError) -> str:
    error = exc.errors(include_url=False)[0]
    return str(error["msg"]).removeprefix("Value error, ")
