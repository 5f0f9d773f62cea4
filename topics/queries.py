"""``rag.queries``: query requests, keyed by ``request_id``.

Filters are structured (term or range on known fields) so user text never reaches a query-string
parser; the retrieval stage turns them into Elasticsearch ``term``/``terms``/``range`` clauses.
"""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from topics.acl import Principals
from topics.base import Contract, Event, UtcDatetime, new_id
from topics.metadata import DATE_FORMS, metadata_range, metadata_terms

#: Fields a filter may name: top-level chunk fields or ``metadata.<key>``.
FilterField = Annotated[
    str, Field(pattern=r"^(doc_id|source|content_type|lang|metadata\.[A-Za-z0-9_]{1,64})$")
]


#: A value a term filter compares: text (exact), or, on ``metadata.<key>`` only, a boolean or a
#: number compared as its type (``topics/metadata.py``).
TermValue = Annotated[str, Field(max_length=512)] | StrictBool | StrictInt | StrictFloat


def _kind_required(schema: dict[str, Any]) -> None:
    """A filter's ``kind`` is its discriminator: every filter must send it (the server cannot
    tell a term from a range without it), so the JSON schema lists it as required although
    the Python model has a default for it."""
    required = schema.setdefault("required", [])
    if "kind" not in required:
        required.insert(0, "kind")


def _a_bound_required(schema: dict[str, Any]) -> None:
    """A range filter's schema: ``kind`` required (:func:`_kind_required`) and at least one
    bound that is not null, as the model's validator requires."""
    _kind_required(schema)
    schema["anyOf"] = [
        {"required": [bound], "properties": {bound: {"not": {"type": "null"}}}}
        for bound in ("gte", "lte")
    ]


class TermFilter(Contract):
    """Match chunks whose ``field`` equals one of ``values`` (1-100).

    Strings compare exactly with the text of the field (a ``metadata.<key>`` value's text: a
    number as written, a boolean as ``True``/``False``). On ``metadata.<key>``, booleans and
    numbers compare as their type: ``true`` matches the documents whose value is true (a
    JSON boolean, or the text ``true`` in any case), ``9`` those whose value is the number 9
    (``9``, ``9.0``, ``"9"``). The other fields are text: their values are strings.
    """

    model_config = ConfigDict(**Contract.model_config, json_schema_extra=_kind_required)

    kind: Literal["term"] = "term"
    field: FilterField
    values: tuple[TermValue, ...] = Field(
        min_length=1,
        max_length=100,
        description="Strings compare exactly; on metadata.<key>, booleans and numbers compare "
        "as their type.",
    )

    @model_validator(mode="after")
    def _typed_values(self) -> TermFilter:
        if self.field.startswith("metadata."):
            metadata_terms(self.field, self.values)  # raises on a non-finite number
        elif not all(isinstance(v, str) for v in self.values):
            raise ValueError(f"values of a term filter on {self.field} are strings")
        return self


class RangeFilter(Contract):
    """Match chunks whose ``field`` lies in ``[gte, lte]`` (one bound may be left out).

    On ``metadata.<key>`` the bounds are both numbers (JSON numbers or strings written as one)
    or both ISO 8601 dates, compared as numbers or dates with the documents' values of that
    type (``topics/metadata.py``); a bare date as ``lte`` takes in that whole day (UTC). Any
    other bound is refused. On ``doc_id``, ``source``, ``content_type`` and ``lang`` (text)
    the bounds compare as strings, character by character.
    """

    model_config = ConfigDict(**Contract.model_config, json_schema_extra=_a_bound_required)

    kind: Literal["range"] = "range"
    field: FilterField
    gte: StrictFloat | StrictStr | None = Field(
        default=None,
        description="Lower bound, inclusive. On metadata.<key>: a number or an ISO 8601 date "
        f"({DATE_FORMS}).",
    )
    lte: StrictFloat | StrictStr | None = Field(
        default=None,
        description="Upper bound, inclusive. On metadata.<key>: a number or an ISO 8601 date; "
        "a date without a time takes in that whole day (UTC).",
    )

    @model_validator(mode="after")
    def _one_bound(self) -> RangeFilter:
        if self.gte is None and self.lte is None:
            raise ValueError("a range filter needs gte or lte")
        if self.field.startswith("metadata."):
            metadata_range(self.field, self.gte, self.lte)  # raises with the reason
        return self


Filter = Annotated[TermFilter | RangeFilter, Field(discriminator="kind")]


class Turn(Contract):
    """One earlier turn of the conversation a question follows.

    ``question``: what the user asked then, as typed (1-4000 characters). ``answer``: the text
    the user was shown for it (at most 8000 characters), "" when the producer does not have it
    (a client that keeps only its own questions). Stages read the questions to make a follow-up
    standalone (:func:`workers.conversation.question_of`) and the last answer so that a
    follow-up is never answered with what the user has just read.
    """

    question: str = Field(min_length=1, max_length=4000)
    answer: str = Field(default="", max_length=8000)


#: Earlier turns an event may carry (the API keeps the last ones of a longer conversation).
MAX_TURNS = 20

#: The largest answer budget an event may ask for, in tokens (a pool caps it further at its
#: ``llm.max_tokens``).
MAX_ANSWER_TOKENS = 32_768


class QueryRequest(Event):
    """A question to answer from the tenant's knowledge base.

    ``deadline`` is absolute (UTC): a stage that receives the event after it answers
    ``DEADLINE_EXCEEDED`` instead of working. ``top_n`` candidates are retrieved, ``top_k``
    passages are kept after rerank. ``route`` forces an answer tier (``evidence``: the quoted
    evidence, no LLM; ``small``/``large``: an LLM over the evidence) or lets the router pick.
    ``exact_cache_checked``: the producer (the API) already looked the request up in the exact
    answer cache and missed, so the retrieval pool does not read it again (the exact cache is
    read once per request). ``max_tokens``: the answer budget in tokens of an LLM tier (the
    OpenAI routes' ``max_tokens``), at most the pool's own ``llm.max_tokens``; ``None``: the
    pool's. ``conversation``: the earlier turns of the conversation, oldest first (empty for a
    question on its own); ``query`` is always the last question as typed, never rewritten.
    """

    request_id: str = Field(
        default_factory=new_id,
        min_length=1,
        max_length=128,
        description="The id the answer (rag.responses, rag.tokens, the query log) is keyed "
        "by. A producer should set it; when it is absent the record key (UTF-8) is used, so a "
        "redelivered record is answered under the same id; without either a random id is "
        "generated when the event is consumed.",
    )
    query: str = Field(min_length=1, max_length=4000)
    conversation: tuple[Turn, ...] = Field(
        default=(),
        max_length=MAX_TURNS,
        description="Earlier turns of the conversation, oldest first: each the question asked "
        "and (optionally) the answer shown. A follow-up such as 'And how do I change it?' is "
        "answered as the standalone question the earlier questions make of it, and never "
        "with the last turn's answer again.",
    )
    deadline: UtcDatetime
    top_n: int = Field(default=30, ge=1, le=200)
    top_k: int = Field(default=5, ge=1, le=50)
    filters: tuple[Filter, ...] = Field(default=(), max_length=20)
    route: Literal["auto", "evidence", "small", "large"] = "auto"
    stream: bool = False
    callback_url: str | None = Field(default=None, max_length=2048)
    exact_cache_checked: bool = False
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_ANSWER_TOKENS)
    #: Who is asking (:mod:`topics.acl`): only documents without readers or with one of these
    #: among their readers are searched. ``None``: no permission filter (a tenant-wide key, or
    #: a producer trusted on the bus).
    principals: Principals | None = None

    @classmethod
    def record_defaults(
        cls, raw: dict[str, Any], key: bytes | None, timestamp_ms: int | None
    ) -> dict[str, Any]:
        """As :meth:`Event.record_defaults`, and a missing ``request_id`` is the record key
        (when it is 1-128 characters of UTF-8)."""
        raw = super().record_defaults(raw, key, timestamp_ms)
        if "request_id" in raw or not key:
            return raw
        try:
            text = key.decode("utf-8")
        except UnicodeDecodeError:
            return raw
        return {**raw, "request_id": text} if 0 < len(text) <= 128 else raw

    def key(self) -> bytes:
        """Keyed by ``request_id``."""
        return self.request_id.encode()

    def expired(self, now: dt.datetime | None = None) -> bool:
        """True once ``deadline`` has passed."""
        return (now or dt.datetime.now(dt.UTC)) >= self.deadline
