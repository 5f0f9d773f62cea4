"""The OpenAI-compatible routes, driven by the official ``openai`` client over ASGI; the pools
are faked by answering on the reply path (:mod:`tests.unit.apikit`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from fastapi import FastAPI
from openai import AsyncOpenAI

from api.openai.protocol import MAX_TURN_ANSWER_CHARS
from tests.unit.apikit import CHECKED, FakeQueries, answered, checked, make_app
from topics.queries import QueryRequest
from topics.responses import QueryResponse
from workers.conversation import CONTEXT_MARKER, question_of


def _client(app: FastAPI, **kwargs: Any) -> AsyncOpenAI:
    transport = httpx2.ASGITransport(app=app)
    http = httpx2.AsyncClient(transport=transport, base_url="http://api")
    return AsyncOpenAI(base_url="http://api/v1", api_key="rsk_x", http_client=http, **kwargs)


def _run(app: FastAPI, call: Callable[[AsyncOpenAI], Any], **kwargs: Any) -> Any:
    async def go() -> Any:
        async with _client(app, **kwargs) as client:
            return await call(client)

    return asyncio.run(go())


@pytest.fixture
def app(tmp_path: Path) -> tuple[FastAPI, FakeQueries]:
    return make_app(tmp_path, answered)


def test_models_lists_the_answer_tiers_in_openais_list_format(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    async def call(c: AsyncOpenAI) -> list[str]:
        return [m.id async for m in c.models.list()]

    assert _run(app[0], call) == ["auto", "evidence", "small", "large"]


@pytest.mark.parametrize(
    ("model", "route"),
    [
        ("evidence", "evidence"),
        ("small", "small"),
        ("large", "large"),
        ("auto", "auto"),
        ("ragstream", "auto"),
        ("ragstream-large", "large"),
    ],
)
def test_the_model_picks_the_route(
    app: tuple[FastAPI, FakeQueries], model: str, route: str
) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "What does VACUUM do?"}]
        )

    completion = _run(app[0], call)
    assert completion.choices[0].message.content == "VACUUM reclaims storage [1]."
    assert app[1].asked[-1].route == route


def test_a_follow_up_carries_the_earlier_turns_with_their_answers(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    long_answer = "x" * 9000 + " autovacuum runs every minute."
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is VACUUM?"},
        {"role": "assistant", "content": "It reclaims storage."},
        {"role": "user", "content": "What is the autovacuum launcher?"},
        {"role": "assistant", "content": long_answer},
        {"role": "user", "content": "How often does it run?"},
    ]

    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(model="auto", messages=messages)

    _run(app[0], call)
    asked = app[1].asked[-1]
    assert asked.query == "How often does it run?"
    assert [t.question for t in asked.conversation] == [
        "What is VACUUM?",
        "What is the autovacuum launcher?",
    ]
    assert asked.conversation[0].answer == "It reclaims storage."
    assert asked.conversation[1].answer == long_answer[:MAX_TURN_ANSWER_CHARS]
    assert question_of(asked) == (
        "How often does the autovacuum launcher run?"
        f"{CONTEXT_MARKER}What is VACUUM? What is the autovacuum launcher?"
    )
    assert "Be brief" not in question_of(asked)


def test_a_single_question_is_sent_unchanged(app: tuple[FastAPI, FakeQueries]) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "What does VACUUM do?"}]
        )

    completion = _run(app[0], call)
    assert app[1].asked[-1].query == "What does VACUUM do?"
    extra = completion.model_extra or {}
    assert extra["citations"][0]["doc_id"] == "vacuum" and extra["evidence"][0]["n"] == 1


def test_the_stream_ends_with_citations_and_evidence_then_usage_on_request(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    async def call(c: AsyncOpenAI) -> list[Any]:
        stream = await c.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": "What does VACUUM do?"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        return [chunk async for chunk in stream]

    chunks = _run(app[0], call)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "VACUUM reclaims storage [1]."
    finish, last = chunks[-2:]
    assert finish.choices[0].finish_reason == "stop"
    extra = finish.model_extra or {}
    assert extra["citations"][0]["doc_id"] == "vacuum"
    assert extra["evidence"][0]["text"] == "VACUUM reclaims"
    assert last.choices == [] and last.usage is not None and last.usage.total_tokens == 47
    assert all(ch.usage is None for ch in chunks[:-1])


def test_the_wait_is_the_clients_timeout(app: tuple[FastAPI, FakeQueries]) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "What does VACUUM do?"}]
        )

    _run(app[0], call, timeout=42.0)
    assert app[1].waits[-1] == pytest.approx(41.0)  # answered 1 s before the client gives up
    _run(app[0], call, timeout=10_000.0)
    assert app[1].waits[-1] == app[1].settings.api.max_wait_s


def test_without_a_client_timeout_the_wait_is_the_default(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    app, fake = make_app(tmp_path, answered, wait_timeout_s=7.0)
    body = {"model": "auto", "messages": [{"role": "user", "content": "What does VACUUM do?"}]}
    with TestClient(app) as client:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 200, r.text
        r = client.post("/v1/chat/completions", json=body, headers={"X-Request-Timeout": "20"})
        assert r.status_code == 200, r.text
    assert fake.waits == [7.0, 19.0]


def test_a_timed_out_question_is_a_504_within_the_clients_timeout(tmp_path: Path) -> None:
    def silent(_: QueryRequest) -> list[Any]:
        return []

    app, _ = make_app(tmp_path, silent)
    from openai import APITimeoutError, InternalServerError

    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "What does VACUUM do?"}]
        )

    with pytest.raises(InternalServerError) as caught:
        _run(app, call, timeout=2.0, max_retries=0)
    assert not isinstance(caught.value, APITimeoutError)
    assert caught.value.status_code == 504


USER = [{"role": "user", "content": "What does VACUUM do?"}]


def _status_error(app: FastAPI, call: Callable[[AsyncOpenAI], Any]) -> Any:
    from openai import APIStatusError

    with pytest.raises(APIStatusError) as caught:
        _run(app, call, max_retries=0)
    return caught.value


def test_an_unknown_model_is_a_404_model_not_found(app: tuple[FastAPI, FakeQueries]) -> None:
    from openai import NotFoundError

    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(model="gpt-4o-does-not-exist", messages=USER)

    err = _status_error(app[0], call)
    assert isinstance(err, NotFoundError)
    assert err.code == "model_not_found" and err.param == "model"
    assert err.type == "invalid_request_error"
    assert "auto" in err.message and app[1].asked == []


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}], "tool_choice": "required"},
         "tool_choice"),
        ({"tools": [{"type": "function", "function": {"name": "f"}}],
          "tool_choice": {"type": "function", "function": {"name": "f"}}}, "tool_choice"),
        ({"functions": [{"name": "f"}]}, "functions"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
    ],
)  # fmt: skip
def test_parameters_that_change_the_contract_are_a_400_naming_them(
    app: tuple[FastAPI, FakeQueries], extra: dict[str, Any], param: str
) -> None:
    from openai import BadRequestError

    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(model="auto", messages=USER, **extra)

    err = _status_error(app[0], call)
    assert isinstance(err, BadRequestError)
    assert err.param == param and err.code == "unsupported_parameter"
    assert err.type == "invalid_request_error" and app[1].asked == []


def test_tools_with_tool_choice_none_and_a_text_format_are_accepted(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(
            model="auto",
            messages=USER,
            tools=[{"type": "function", "function": {"name": "f"}}],
            tool_choice="none",
            response_format={"type": "text"},
            logprobs=False,
            n=1,
        )

    assert _run(app[0], call).choices[0].message.content == "VACUUM reclaims storage [1]."


@pytest.mark.parametrize(("field", "value"), [("max_tokens", 12), ("max_completion_tokens", 9)])
def test_max_tokens_reaches_the_query_event(
    app: tuple[FastAPI, FakeQueries], field: str, value: int
) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(model="small", messages=USER, **{field: value})

    _run(app[0], call)
    assert app[1].asked[-1].max_tokens == value
    _run(app[0], lambda c: c.chat.completions.create(model="small", messages=USER))
    assert app[1].asked[-1].max_tokens is None


@pytest.mark.parametrize("chars", [4001, 10_452, 17_000])
def test_an_over_long_message_is_a_400_context_length_exceeded(
    app: tuple[FastAPI, FakeQueries], chars: int
) -> None:
    from openai import BadRequestError

    content = ("How does VACUUM work? " * 1000)[:chars]

    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": content}]
        )

    err = _status_error(app[0], call)
    assert isinstance(err, BadRequestError)
    assert err.code == "context_length_exceeded" and err.param == "messages"
    assert app[1].asked == []  # never cut and sent


def test_the_limit_is_api_max_query_chars(tmp_path: Path) -> None:
    from openai import BadRequestError

    app, fake = make_app(tmp_path, answered, max_query_chars=30)

    def call(content: str) -> Callable[[AsyncOpenAI], Any]:
        return lambda c: c.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": content}]
        )

    _run(app, call("x" * 30))
    assert fake.asked[-1].query == "x" * 30
    assert isinstance(_status_error(app, call("x" * 31)), BadRequestError)


def test_text_completions_answer_the_prompt(app: tuple[FastAPI, FakeQueries]) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.completions.create(model="small", prompt="What does VACUUM do?")

    done = _run(app[0], call)
    assert done.object == "text_completion"
    assert done.choices[0].text == "VACUUM reclaims storage [1]."
    assert done.choices[0].finish_reason == "stop" and done.choices[0].logprobs is None
    assert done.usage is not None and done.usage.total_tokens == 47
    assert (done.model_extra or {})["citations"][0]["doc_id"] == "vacuum"
    assert app[1].asked[-1].query == "What does VACUUM do?"
    assert app[1].asked[-1].route == "small"


def test_text_completions_stream(app: tuple[FastAPI, FakeQueries]) -> None:
    async def call(c: AsyncOpenAI) -> list[Any]:
        stream = await c.completions.create(
            model="auto", prompt="What does VACUUM do?", stream=True, max_tokens=50,
            stream_options={"include_usage": True},
        )  # fmt: skip
        return [chunk async for chunk in stream]

    chunks = _run(app[0], call)
    assert all(ch.object == "text_completion" for ch in chunks)
    text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
    assert text == "VACUUM reclaims storage [1]."
    assert chunks[-2].choices[0].finish_reason == "stop" and chunks[-2].usage is None
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None and chunks[-1].usage.total_tokens == 47
    assert app[1].asked[-1].max_tokens == 50


@pytest.mark.parametrize(
    ("extra", "param"),
    [({"echo": True}, "echo"), ({"logprobs": 2}, "logprobs"), ({"best_of": 2}, "best_of"),
     ({"suffix": "x"}, "suffix"), ({"prompt": [1, 2, 3]}, "prompt"), ({"n": 3}, "n")],
)  # fmt: skip
def test_text_completion_parameters_no_tier_honours_are_a_400(
    app: tuple[FastAPI, FakeQueries], extra: dict[str, Any], param: str
) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        body: dict[str, Any] = {"prompt": "What does VACUUM do?"} | extra
        return await c.completions.create(model="auto", **body)

    err = _status_error(app[0], call)
    assert err.status_code == 400 and err.param == param


def test_errors_of_the_openai_routes_have_openais_shape(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    app, _ = make_app(tmp_path, answered, max_query_chars=10)
    with TestClient(app) as client:
        r = client.post("/v1/chat/completions", json={"messages": []})
        assert r.status_code == 400  # OpenAI's status for a bad request, not 422
        error = r.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] == "messages"
        assert error["code"] == "empty_array"
        assert set(error) == {"message", "type", "param", "code"}
        r = client.post("/v1/completions", json={"prompt": "x" * 11})
        assert r.status_code == 400
        assert r.json()["error"]["code"] == "context_length_exceeded"
        assert r.json()["error"]["param"] == "prompt"


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/responses", "/v1/audio/speech"])
def test_unknown_v1_paths_are_a_404_listing_the_endpoints(tmp_path: Path, path: str) -> None:
    from fastapi.testclient import TestClient

    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        r = client.post(path, json={"model": "auto", "input": "x"})
    assert r.status_code == 404
    error = r.json()["error"]
    assert error["type"] == "invalid_request_error" and error["code"] == "unknown_url"
    assert "POST /v1/completions" in error["message"] and "GET /v1/models" in error["message"]


def test_an_unknown_v1_path_through_the_openai_client_is_a_not_found(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    from openai import NotFoundError

    async def call(c: AsyncOpenAI) -> Any:
        return await c.embeddings.create(model="auto", input="VACUUM")

    err = _status_error(app[0], call)
    assert isinstance(err, NotFoundError) and "/v1/chat/completions" in err.message


@pytest.mark.parametrize(("generated", "finish", "recorded", "truncated"), CHECKED)
def test_a_stream_ends_with_the_recorded_answer_when_the_check_changed_it(
    tmp_path: Path, generated: str, finish: str, recorded: str, truncated: bool
) -> None:
    app, _ = make_app(tmp_path, checked(generated, finish))

    async def call(c: AsyncOpenAI) -> list[Any]:
        stream = await c.chat.completions.create(model="small", messages=USER, stream=True)
        return [chunk async for chunk in stream]

    chunks = _run(app, call)
    deltas = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    last = chunks[-1]
    extra = last.model_extra or {}
    assert extra["answer"] == recorded and extra["truncated"] is truncated
    assert last.choices[0].finish_reason == ("length" if truncated else "stop")
    # what a client shows: the deltas, or ``answer`` when the last chunk says ``replaced``
    shown = extra["answer"] if extra["replaced"] else deltas
    assert shown == recorded
    assert extra["replaced"] is bool(generated)  # nothing streamed: the deltas carry it all
    if not generated:
        assert deltas == recorded


@pytest.mark.parametrize(("generated", "finish", "recorded", "truncated"), CHECKED)
def test_a_text_completion_stream_ends_with_the_recorded_answer_too(
    tmp_path: Path, generated: str, finish: str, recorded: str, truncated: bool
) -> None:
    app, _ = make_app(tmp_path, checked(generated, finish))

    async def call(c: AsyncOpenAI) -> list[Any]:
        stream = await c.completions.create(model="small", prompt="VACUUM?", stream=True)
        return [chunk async for chunk in stream]

    chunks = _run(app, call)
    extra = chunks[-1].model_extra or {}
    texts = "".join(ch.choices[0].text for ch in chunks)
    assert (extra["answer"] if extra["replaced"] else texts) == recorded
    assert chunks[-1].choices[0].finish_reason == ("length" if truncated else "stop")


def test_an_answer_cut_at_its_token_limit_finishes_with_length(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, checked("VACUUM reclaims storage [1]. It can", "length"))

    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(model="small", messages=USER, max_tokens=12)

    done = _run(app, call)
    assert done.choices[0].message.content == "VACUUM reclaims storage [1]."
    assert done.choices[0].finish_reason == "length"
    assert (done.model_extra or {})["truncated"] is True


def test_an_unchanged_stream_is_not_replaced(app: tuple[FastAPI, FakeQueries]) -> None:
    async def call(c: AsyncOpenAI) -> list[Any]:
        stream = await c.chat.completions.create(model="small", messages=USER, stream=True)
        return [chunk async for chunk in stream]

    extra = _run(app[0], call)[-1].model_extra or {}
    assert extra["replaced"] is False and extra["answer"] == "VACUUM reclaims storage [1]."


def test_a_timeout_and_a_missing_key_keep_their_codes_in_openais_shape(tmp_path: Path) -> None:
    from fastapi.testclient import TestClient

    def silent(_: QueryRequest) -> list[Any]:
        return []

    app, _ = make_app(tmp_path, silent, wait_timeout_s=0.2)
    body = {"model": "auto", "messages": USER}
    with TestClient(app) as client:
        r = client.post("/v1/chat/completions", json=body)
        assert r.status_code == 504
        assert r.json()["error"]["code"] == "TIMEOUT"  # the native code, as before
        assert r.json()["error"]["type"] == "server_error"
        app.dependency_overrides.clear()  # the real key check
        r = client.get("/v1/models")
        assert r.status_code == 401
        assert r.json()["error"]["type"] == "authentication_error"
        assert r.json()["error"]["code"] == "invalid_api_key"


def test_a_model_is_retrieved_by_name_and_an_unknown_one_is_not_found(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.models.retrieve("small")

    assert _run(app[0], call).id == "small"
    err = _status_error(app[0], lambda c: c.models.retrieve("gpt-4o"))
    assert err.status_code == 404 and err.code == "model_not_found"


def _degraded(request: QueryRequest) -> list[Any]:
    """The answered replies of ``request`` with its response marked as shed (``propose``)."""
    *before, response = answered(request)
    assert isinstance(response, QueryResponse)
    return [*before, response.model_copy(update={"degraded": ("propose",)})]


def test_an_answer_made_without_its_proposals_says_so_through_the_openai_client(
    tmp_path: Path, app: tuple[FastAPI, FakeQueries]
) -> None:
    shed, _ = make_app(tmp_path / "shed", _degraded)

    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(model="auto", messages=USER)

    async def streamed(c: AsyncOpenAI) -> list[Any]:
        stream = await c.chat.completions.create(model="auto", messages=USER, stream=True)
        return [chunk async for chunk in stream]

    assert (_run(shed, call).model_extra or {})["degraded"] == ["propose"]
    assert (_run(shed, streamed)[-1].model_extra or {})["degraded"] == ["propose"]
    assert (_run(app[0], call).model_extra or {})["degraded"] == []  # a full answer
