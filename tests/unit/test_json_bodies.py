"""Request bodies are read by the JSON Schema types the OpenAPI document states (no server)."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from api.models import QueryBody
from api.openai.protocol import ChatBody, CompletionBody

CHAT = {"messages": [{"role": "user", "content": "What is the default port?"}]}


@pytest.mark.parametrize("value", [True, False, "2", 2.5])
def test_an_integer_field_takes_no_other_json_type(value: object) -> None:
    with pytest.raises(ValidationError, match="valid integer"):
        QueryBody.model_validate_json(json.dumps({"query": "q", "top_n": value}))
    # The Schemathesis finding of the last CI: `false` was accepted as 0 and answered 504.
    with pytest.raises(ValidationError):
        ChatBody.model_validate_json(json.dumps({**CHAT, "top_logprobs": value}))
    with pytest.raises(ValidationError):
        CompletionBody.model_validate_json(json.dumps({"prompt": "q", "best_of": value}))


def test_an_integral_number_is_an_integer_as_json_schema_says() -> None:
    body = QueryBody.model_validate_json('{"query": "q", "top_n": 5.0, "timeout_s": 2}')
    assert body.top_n == 5 and isinstance(body.top_n, int)
    assert body.timeout_s == 2.0 and isinstance(body.timeout_s, float)
    chat = ChatBody.model_validate_json(json.dumps({**CHAT, "max_completion_tokens": 3.0}))
    assert chat.max_completion_tokens == 3


@pytest.mark.parametrize("value", ["true", 1, 0])
def test_a_boolean_field_takes_only_true_or_false(value: object) -> None:
    with pytest.raises(ValidationError, match="valid boolean"):
        QueryBody.model_validate_json(json.dumps({"query": "q", "stream": value}))
    with pytest.raises(ValidationError, match="valid boolean"):
        ChatBody.model_validate_json(json.dumps({**CHAT, "stream": value}))
