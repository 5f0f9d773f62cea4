"""Dify's External Knowledge API, the protocol: request, response, errors, and how a request
becomes a search (:mod:`api.routes.dify` serves it at ``POST /v1/dify/retrieval``).

Dify calls ``POST {endpoint}/retrieval`` with ``Authorization: Bearer <key>`` and
``{knowledge_id, query, retrieval_setting: {top_k, score_threshold}, metadata_condition?}``
and expects ``{"records": [{content, score, title, metadata}]}`` (``metadata`` an object, never
null), or an error ``{"error_code", "error_msg"}`` (https://docs.dify.ai/en/use-dify/knowledge/
external-knowledge-api). Codes: :data:`INVALID_AUTH_HEADER` 1001, :data:`AUTH_FAILED` 1002,
:data:`NO_SUCH_KNOWLEDGE` 2001 (Dify's); any other error keeps its HTTP status as its code (422
a request ragstream cannot run, 429 the key's rate limit, 503 Elasticsearch unreachable).

``knowledge_id`` is the tenant of the key: a ragstream key reads one tenant's knowledge base,
so a Dify knowledge base is registered with its tenant's name (``default`` on a fresh install)
as the External Knowledge ID, and any other id is 2001 rather than silently searching the key's
tenant under another name.

``score`` is the hybrid (RRF) score divided by the highest one the settings can give
(:func:`api.searching.max_rrf_score`), so it lies in ``(0, 1]`` as Dify's ``score_threshold``
(0-1) expects: 1.0 is a passage first in both the BM25 and the kNN list, about 0.56 one first
in the kNN list alone (weights 0.8 and 1.0). It orders passages as ``POST /v1/search`` does.

``metadata_condition``: each condition becomes a filter on ``metadata.<name>`` (typed as issue
39's metadata: numbers compare as numbers, dates as dates). :data:`TERM_OPERATORS` and
:data:`RANGE_OPERATORS` are mapped; ranges are inclusive (``<``, ``>`` and the strict
``before``/``after`` of Dify are read as ``≤``/``≥``, documented in docs/search.md). Negations
(``is not``, ``not in``, ``≠``, ``not contains``), substrings (``contains``, ``start with``,
``end with``) and ``empty``/``not empty`` have no filter here and are refused (422) rather than
ignored: ignoring one would widen what Dify is told matched. ``logical_operator: "or"`` is
kept only where it means one filter: a single condition, or ``is``/``in``/``=`` conditions on
one name (their values joined).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from api.errors import ApiError
from topics.queries import Filter, TermFilter

#: Dify's error codes (its documentation's conventions).
INVALID_AUTH_HEADER = 1001
AUTH_FAILED = 1002
NO_SUCH_KNOWLEDGE = 2001
#: The HTTP statuses of those codes (Dify's documented example answers 403 for the first).
STATUS_OF = {INVALID_AUTH_HEADER: 403, AUTH_FAILED: 403, NO_SUCH_KNOWLEDGE: 404}
#: Dify operators that match one of some values; the value is a string, a number or a list.
TERM_OPERATORS = frozenset({"is", "=", "in"})
#: Dify operators that bound a value (inclusive here), with the bound they set.
RANGE_OPERATORS = {
    "≥": "gte", ">=": "gte", ">": "gte", "after": "gte",
    "≤": "lte", "<=": "lte", "<": "lte", "before": "lte",
}  # fmt: skip

_FILTER: TypeAdapter[Filter] = TypeAdapter(Filter)


class DifyError(Exception):
    """An error answered in Dify's shape: ``error_code`` and ``error_msg``, with ``status``."""

    def __init__(
        self,
        code: int,
        message: str,
        status: int | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status if status is not None else STATUS_OF.get(code, code)
        self.headers = headers or {}


class DifyErrorBody(BaseModel):
    """Dify's error body."""

    error_code: int = Field(description="1001, 1002, 2001 (Dify's); else the HTTP status.")
    error_msg: str


class RetrievalSetting(BaseModel):
    """How many records Dify wants, and the lowest score it keeps."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    top_k: int = Field(ge=1, le=50, description="Records returned at most (1-50).")
    score_threshold: float = Field(
        default=0.0, ge=0, le=1, description="Lowest score kept, 0-1 (0: Dify's threshold off)."
    )


class Condition(BaseModel):
    """One of ``metadata_condition.conditions``."""

    model_config = ConfigDict(extra="ignore", allow_inf_nan=False)

    name: str | list[str] = Field(description="Metadata name (or names, each filtered).")
    comparison_operator: str = Field(max_length=32)
    value: str | float | list[str] | None = None


class MetadataCondition(BaseModel):
    """Dify's metadata filter: ``conditions`` joined by ``logical_operator``."""

    model_config = ConfigDict(extra="ignore")

    logical_operator: Literal["and", "or"] = "and"
    conditions: list[Condition] = Field(max_length=20)


class RetrievalBody(BaseModel):
    """The request Dify sends. Fields Dify may add later are ignored (its contract grows;
    the native routes refuse unknown fields instead)."""

    model_config = ConfigDict(extra="ignore")

    knowledge_id: str = Field(max_length=256, description="The tenant of the key.")
    query: str = Field(min_length=1, max_length=4000, pattern=r"^[^\x00]*$")
    retrieval_setting: RetrievalSetting
    metadata_condition: MetadataCondition | None = None


class Record(BaseModel):
    """One passage, as Dify reads it."""

    content: str
    score: float = Field(description="Hybrid (RRF) score over its maximum, in (0, 1].")
    title: str
    metadata: dict[str, Any] = Field(
        description="The document's metadata with `doc_id`, `chunk_id`, `source` and "
        "`rrf_score` (the raw hybrid score); an object, never null."
    )


class RetrievalResponse(BaseModel):
    """What Dify expects: the records, best first (``[]`` when nothing matched)."""

    records: list[Record]


def filters_of(condition: MetadataCondition | None) -> list[Filter]:
    """The ragstream filters of a ``metadata_condition`` (see the module docstring).

    Raises:
        ApiError: 422 for an operator or a value with no filter here, or an ``or`` over
            conditions that are not one filter.
    """
    if condition is None or not condition.conditions:
        return []
    found = [f for c in condition.conditions for f in _filters(c)]
    if condition.logical_operator == "and" or len(found) <= 1:
        return found
    fields = {f.field for f in found}
    if len(fields) == 1 and all(isinstance(f, TermFilter) for f in found):
        values = tuple(v for f in found if isinstance(f, TermFilter) for v in f.values)
        return [_filter({"kind": "term", "field": fields.pop(), "values": list(values)})]
    raise ApiError(
        422,
        "INVALID_REQUEST",
        "metadata_condition: 'or' is supported over is/in/= conditions on one name only",
    )


def _filters(c: Condition) -> list[Filter]:
    names = [c.name] if isinstance(c.name, str) else c.name
    op = c.comparison_operator.strip().lower()
    out: list[Filter] = []
    for name in names:
        field = f"metadata.{name}"
        if op in TERM_OPERATORS:
            if c.value is None or c.value == []:
                raise ApiError(422, "INVALID_REQUEST", f"metadata_condition {name} {op}: a value")
            values = c.value if isinstance(c.value, list) else [c.value]
            out.append(_filter({"kind": "term", "field": field, "values": values}))
        elif op in RANGE_OPERATORS:
            if c.value is None or isinstance(c.value, list):
                raise ApiError(
                    422, "INVALID_REQUEST", f"metadata_condition {name} {op}: one number or date"
                )
            bound = c.value if isinstance(c.value, str) else float(c.value)
            out.append(_filter({"kind": "range", "field": field, RANGE_OPERATORS[op]: bound}))
        else:
            raise ApiError(
                422,
                "INVALID_REQUEST",
                f"metadata_condition: operator {c.comparison_operator!r} has no filter here "
                f"(supported: {', '.join(sorted(TERM_OPERATORS | RANGE_OPERATORS.keys()))})",
            )
    return out


def _filter(raw: dict[str, Any]) -> Filter:
    try:
        return _FILTER.validate_python(raw)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise ApiError(
            422, "INVALID_REQUEST", f"metadata_condition: {where}: {error['msg']}"
        ) from exc
