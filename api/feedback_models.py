"""Bodies of the feedback route (``POST /v1/queries/{id}/feedback``) and of the query-log reads
that show feedback (``GET /v1/queries``, ``GET /v1/queries/{id}``)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from api.bodies import Body
from api.models import QueryResult, UtcDateTime

#: The longest ``comment`` kept, in characters.
MAX_COMMENT_CHARS = 1000


class FeedbackBody(Body):
    """``POST /v1/queries/{id}/feedback``: did the answer help, and which passage or evidence
    span answered (optional). Sending again replaces this key's earlier feedback."""

    helpful: bool = Field(description="Whether the answer helped.")
    passage: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="The citation number `n` (`[n]` in the answer) of the passage that answered "
        "(or, with `helpful: false`, that did not); one of the answer's `citations`.",
    )
    sentence: int | None = Field(
        default=None,
        ge=0,
        le=1000,
        description="The index in the answer's `evidence` list (0: the first span) of the "
        "span that answered; with `passage`, it must quote that passage.",
    )
    comment: str | None = Field(
        default=None, max_length=MAX_COMMENT_CHARS, pattern=r"^[^\x00]*$", description="Free text."
    )


class FeedbackOut(BaseModel):
    """One API key's feedback on a logged answer (the latest it sent)."""

    helpful: bool
    passage: int | None = None
    sentence: int | None = None
    comment: str | None = None
    mine: bool = Field(default=False, description="Given with the key of this request.")
    created_at: UtcDateTime
    updated_at: UtcDateTime


class FeedbackTally(BaseModel):
    """How many keys found a logged answer helpful and not."""

    helpful: int = 0
    not_helpful: int = 0


class LoggedQuery(QueryResult):
    """``GET /v1/queries/{id}``: the logged query result and the feedback given on it."""

    feedback: list[FeedbackOut] = Field(
        default_factory=list,
        description="Each key's latest feedback (`POST /v1/queries/{id}/feedback`), oldest first.",
    )
