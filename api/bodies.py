"""How the API reads a JSON body: the strict bases every request body of the edge derives from.

:class:`JsonBody` reads values by JSON Schema's types, as the OpenAPI document states them;
:class:`Body` also refuses unknown fields. They stand apart from the bodies themselves
(:mod:`api.models`, :mod:`api.openai.protocol`, ...) so that a body's validation runs here and
the response models it shares a module with are built once, after the answer.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class JsonBody(BaseModel):
    """A JSON body read by JSON Schema's types, as the OpenAPI document states them: a value of
    another type is an error, not converted (``true`` is not the integer 1, ``"2"`` not a number,
    ``"true"`` not a boolean), while ``2.0`` is the integer 2 (pydantic's strict mode alone
    refuses it)."""

    model_config = ConfigDict(strict=True)

    @field_validator("*", mode="before")
    @classmethod
    def _integral_numbers(cls, value: Any) -> Any:
        if isinstance(value, float) and value.is_integer():
            return int(value)  # a float field takes an int back in strict mode too
        return value


class Body(JsonBody):
    """Strict bodies: unknown fields are an error, not silently ignored (see :class:`JsonBody`)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
