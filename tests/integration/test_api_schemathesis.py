"""Property-based fuzzing of the whole OpenAPI spec (schemathesis): no 5xx for any input.

Real Kafka, Redis and SQL; no pools run, so a valid query waits (a very short wait here) and
is answered 202 ``pending``; the OpenAI endpoint answers 504 ``TIMEOUT`` for a valid question
nobody answers, which is the only 5xx allowed (it is not a malformed input).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode, openapi
from schemathesis.checks import not_a_server_error

from api.app import create_app
from tests.integration.stack import Stack, make_stack


@pytest.fixture(scope="module")
def fuzz_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    tmp: Path = tmp_path_factory.mktemp("fuzz")
    stack = make_stack(
        tmp,
        "fuzz",
        RAGSTREAM_API__WAIT_TIMEOUT_S="0.2",
        RAGSTREAM_API__MAX_WAIT_S="0.3",
        RAGSTREAM_API__MAX_BODY_BYTES="65536",
        # Uploads (multipart documents and archives) land in the test's folder.
        RAGSTREAM_INGEST__ALLOWED_ROOTS=json.dumps([str(tmp / "roots")]),
        RAGSTREAM_INGEST__UPLOAD_ROOT=str(tmp / "roots"),
    )
    stack.keys["t"] = stack.key(stack.name + "-fuzz", rate_per_minute=100_000)
    yield stack
    stack.close()


@pytest.fixture(scope="module")
def api_schema(fuzz_stack: Stack) -> Any:
    app = create_app(fuzz_stack.settings)
    return openapi.from_asgi("/openapi.json", app)


def no_server_error_but_timeout(ctx: Any, response: Any, case: Any) -> bool | None:
    """Like ``not_a_server_error``, except a 504 ``TIMEOUT`` for a valid unanswered question."""
    if response.status_code == 504:
        body = response.json()
        assert body["error"]["code"] == "TIMEOUT", body
        return True
    return not_a_server_error(ctx, response, case)  # type: ignore[no-any-return]


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_input_makes_a_server_error(api_schema: Any, fuzz_stack: Stack, mode: Any) -> None:
    """Every operation, valid (positive) and invalid (negative) inputs, 25 examples each.

    (Driven with hypothesis directly: schemathesis's pytest plugin does not support pytest 9.)
    """
    headers = {"Authorization": f"Bearer {fuzz_stack.keys['t']}"}
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    ran: list[str] = []
    for operation in operations:
        if mode == GenerationMode.NEGATIVE and not (
            len(operation.body) or len(operation.path_parameters) or len(operation.query)
        ):
            continue  # nothing to make invalid

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=25,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def run(case: Any) -> None:
            case.call_and_validate(
                headers=headers,
                checks=[no_server_error_but_timeout],
                excluded_checks=[not_a_server_error],
            )

        try:
            run()
            ran.append(operation.label)
        except Unsatisfiable:
            # e.g. a lone string path parameter: every value is valid, none can be negative.
            assert mode == GenerationMode.NEGATIVE, operation.label
    assert len(ran) >= 8, ran
