"""The OpenAI routes' client contracts (issue 39), driven by the real client libraries over
ASGI (the pools are faked on the reply path, :mod:`tests.unit.apikit`):

- a bad request is a 400 in OpenAI's error shape with a lower-case ``code`` (OpenAI's status
  and codes), never the native routes' 422 ``INVALID_REQUEST``; the OpenAPI document says so;
- with ``stream_options.include_usage`` the usage comes on one more chunk with ``choices: []``
  after the finish chunk, and without it no chunk carries usage;
- LlamaIndex's ``OpenAILike`` with its defaults (``is_chat_model=False``) writes a chat out as
  a ``"user: ...\\nassistant: "`` transcript to ``/v1/completions``: the last ``user`` turn is
  the question and the earlier turns its conversation, not part of the question.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from openai import AsyncOpenAI, BadRequestError

from api.asking import numbered
from api.openai.protocol import Ask
from api.openai.rendering import positioned_chunks
from api.streams.ids import FINAL
from tests.unit.apikit import FakeQueries, answered, make_app
from topics.answers import Answer
from topics.queries import QueryRequest

QUESTION = "What does VACUUM do?"
USER: Any = [{"role": "user", "content": QUESTION}]
ANSWER = "VACUUM reclaims storage [1]."


@pytest.fixture
def app(tmp_path: Path) -> tuple[FastAPI, FakeQueries]:
    return make_app(tmp_path, answered)


def _run(app: FastAPI, call: Callable[[AsyncOpenAI], Any]) -> Any:
    async def go() -> Any:
        http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url="http://api")
        async with AsyncOpenAI(
            base_url="http://api/v1", api_key="rsk_x", http_client=http, max_retries=0
        ) as client:
            return await call(client)

    return asyncio.run(go())


def _bad_request(app: FastAPI, call: Callable[[AsyncOpenAI], Any]) -> BadRequestError:
    with pytest.raises(BadRequestError) as caught:
        _run(app, call)
    return caught.value


# 1. bad requests: 400, OpenAI's codes


@pytest.mark.parametrize(
    ("kwargs", "param", "code"),
    [
        ({"messages": []}, "messages", "empty_array"),
        ({"messages": USER, "extra_body": {"max_tokens": "many"}}, "max_tokens", "invalid_type"),
        ({"messages": USER, "n": 0}, "n", "integer_below_min_value"),
        ({"messages": [{"role": "narrator", "content": "x"}]}, "messages", "invalid_value"),
        ({"messages": [{"role": "user", "content": "  "}]}, "messages", "invalid_value"),
        ({"messages": USER, "extra_body": {"model": "m" * 200}}, "model",
         "string_above_max_length"),
        ({"messages": USER, "stream_options": {"include_usage": "yes"}}, "stream_options",
         "invalid_type"),
    ],
)  # fmt: skip
def test_a_bad_chat_request_is_a_400_with_openais_lower_case_code(
    app: tuple[FastAPI, FakeQueries], kwargs: dict[str, Any], param: str, code: str
) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(**{"model": "auto", **kwargs})

    err = _bad_request(app[0], call)
    assert err.status_code == 400
    assert (err.type, err.param, err.code) == ("invalid_request_error", param, code)
    assert app[1].asked == []


@pytest.mark.parametrize(
    ("prompt", "code"), [("   ", "invalid_value"), ("What\x00?", "invalid_value")]
)
def test_a_bad_text_completion_is_a_400_with_openais_lower_case_code(
    app: tuple[FastAPI, FakeQueries], prompt: str, code: str
) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.completions.create(model="auto", prompt=prompt)

    err = _bad_request(app[0], call)
    assert (err.status_code, err.param, err.code) == (400, "prompt", code)


def test_a_missing_field_and_a_body_that_is_not_json_are_400_too(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        missing = client.post("/v1/completions", json={"model": "auto"})
        broken = client.post(
            "/v1/chat/completions",
            content=b"{not json",
            headers={"content-type": "application/json"},
        )
        native = client.post("/v1/query", json={"query": ""})
    assert missing.status_code == 400 and missing.json() == {
        "error": {
            "message": "body.prompt: Field required",
            "type": "invalid_request_error",
            "param": "prompt",
            "code": "missing_required_parameter",
        }
    }
    assert broken.status_code == 400
    assert broken.json()["error"]["code"] == "invalid_json"
    assert broken.json()["error"]["param"] is None
    # the rest of the API keeps its 422 and upper-case codes
    assert native.status_code == 422 and native.json()["error"]["code"] == "INVALID_REQUEST"


def test_the_spec_documents_400_and_no_422_on_the_openai_routes(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        spec = client.get("/openapi.json").json()
    for path, method in [
        ("/v1/chat/completions", "post"),
        ("/v1/completions", "post"),
        ("/v1/models", "get"),
        ("/v1/models/{model}", "get"),
    ]:
        responses = spec["paths"][path][method]["responses"]
        assert "422" not in responses, path
    for path in ("/v1/chat/completions", "/v1/completions"):
        bad = spec["paths"][path]["post"]["responses"]["400"]
        assert bad["content"]["application/json"]["schema"]["$ref"].endswith("/OpenAIErrorEnvelope")
        assert "missing_required_parameter" in bad["description"]
    assert "422" in spec["paths"]["/v1/query"]["post"]["responses"]


# 2. the usage chunk


def test_include_usage_sends_usage_on_a_last_chunk_without_choices(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    async def call(c: AsyncOpenAI) -> list[Any]:
        stream = await c.chat.completions.create(
            model="small", messages=USER, stream=True, stream_options={"include_usage": True}
        )
        return [chunk async for chunk in stream]

    chunks = _run(app[0], call)
    *content, finish, usage = chunks
    assert finish.choices[0].finish_reason == "stop" and finish.usage is None
    assert (finish.model_extra or {})["citations"][0]["doc_id"] == "vacuum"
    assert usage.choices == [] and usage.usage is not None
    assert (usage.usage.prompt_tokens, usage.usage.completion_tokens) == (40, 7)
    assert usage.id == finish.id and usage.object == "chat.completion.chunk"
    assert all(ch.usage is None and ch.choices for ch in content)
    assert "".join(ch.choices[0].delta.content or "" for ch in content) == ANSWER


@pytest.mark.parametrize("options", [None, {"include_usage": False}])
def test_without_include_usage_no_chunk_carries_usage(
    app: tuple[FastAPI, FakeQueries], options: dict[str, bool] | None
) -> None:
    async def call(c: AsyncOpenAI) -> list[Any]:
        extra: dict[str, Any] = {} if options is None else {"stream_options": options}
        stream = await c.chat.completions.create(model="small", messages=USER, stream=True, **extra)
        return [chunk async for chunk in stream]

    chunks = _run(app[0], call)
    assert all(ch.choices and ch.usage is None for ch in chunks)
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_a_text_completion_stream_ends_with_the_usage_chunk_on_request(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    async def call(c: AsyncOpenAI) -> list[Any]:
        stream = await c.completions.create(
            model="small", prompt=QUESTION, stream=True, stream_options={"include_usage": True}
        )
        return [chunk async for chunk in stream]

    *content, finish, usage = _run(app[0], call)
    assert finish.choices[0].finish_reason == "stop" and finish.usage is None
    assert usage.object == "text_completion" and usage.choices == []
    assert usage.usage is not None and usage.usage.total_tokens == 47
    assert "".join(ch.choices[0].text for ch in [*content, finish]) == ANSWER


def test_langchain_reads_the_usage_chunk(app: tuple[FastAPI, FakeQueries]) -> None:
    from langchain_openai import ChatOpenAI

    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app[0]), base_url="http://api")
    llm = ChatOpenAI(
        base_url="http://api/v1", api_key="rsk_x", http_async_client=http, stream_usage=True
    )

    async def stream() -> Any:
        total = None
        async for chunk in llm.astream(QUESTION):
            total = chunk if total is None else total + chunk
        return total

    message = asyncio.run(stream())
    assert message.content == ANSWER
    assert message.usage_metadata["input_tokens"] == 40
    assert message.usage_metadata["output_tokens"] == 7


def test_a_stream_resumed_after_the_finish_chunk_gets_the_usage_chunk_then_done() -> None:
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=30)
    request = QueryRequest(tenant="acme", query=QUESTION, route="small", deadline=deadline)
    replies = answered(request)
    final = Answer.of(replies[-1], query=QUESTION)  # type: ignore[arg-type]
    ask = Ask(QUESTION, "small", True, None, "chat", include_usage=True)

    async def items() -> AsyncIterator[Any]:
        yield final

    async def resume() -> list[str]:
        chunks = numbered("r1", positioned_chunks("r1", ask, items()), FINAL)
        return [chunk.decode() async for chunk in chunks]

    usage, done = asyncio.run(resume())
    assert usage.startswith("id: r1:u\n") and done == "id: r1:d\ndata: [DONE]\n\n"
    data = json.loads(usage.split("data: ", 1)[1])
    assert data["choices"] == [] and data["usage"]["total_tokens"] == 47


# 3. a role-prefixed transcript prompt


def _llamaindex(app: FastAPI) -> Any:
    from llama_index.llms.openai_like import OpenAILike

    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")
    return OpenAILike(api_base="http://api/v1", api_key="rsk_x", async_http_client=http)


def _chat(*turns: tuple[str, str]) -> list[Any]:
    from llama_index.core.llms import ChatMessage

    return [ChatMessage(role=role, content=text) for role, text in turns]


def test_llamaindex_openailike_defaults_ask_the_last_user_turn(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    llm = _llamaindex(app[0])
    assert llm.is_chat_model is False  # the default: the chat goes to /v1/completions
    reply = asyncio.run(llm.achat(_chat(("user", QUESTION))))
    assert reply.message.content == ANSWER
    asked = app[1].asked[-1]
    assert asked.query == QUESTION and asked.conversation == ()


def test_llamaindex_openailike_defaults_carry_the_earlier_turns(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    messages = _chat(
        ("system", "Be brief."),
        ("user", "What is VACUUM?"),
        ("assistant", "It reclaims storage.\nIt also updates statistics."),
        ("user", "How often does autovacuum run?"),
    )

    async def stream() -> list[Any]:
        return [r async for r in await _llamaindex(app[0]).astream_chat(messages)]

    deltas = asyncio.run(stream())
    assert deltas[-1].message.content == ANSWER
    asked = app[1].asked[-1]
    assert asked.query == "How often does autovacuum run?"
    assert [(t.question, t.answer) for t in asked.conversation] == [
        ("What is VACUUM?", "It reclaims storage.\nIt also updates statistics.")
    ]


def test_the_exact_openailike_request_is_read_as_a_chat(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    """The body LlamaIndex's default sends (``messages_to_prompt``), posted as is."""
    from llama_index.core.base.llms.generic_utils import messages_to_prompt

    prompt = messages_to_prompt(_chat(("user", "Which port?"), ("assistant", "5432."),
                                      ("user", "And how do I change it?")))  # fmt: skip
    assert (
        prompt == "user: Which port?\nassistant: 5432.\nuser: And how do I change it?\nassistant: "
    )
    with TestClient(app[0]) as client:
        r = client.post("/v1/completions", json={"model": "gpt-3.5-turbo", "prompt": prompt})
    assert r.status_code == 200, r.text
    asked = app[1].asked[-1]
    assert asked.query == "And how do I change it?"
    assert [(t.question, t.answer) for t in asked.conversation] == [("Which port?", "5432.")]


def test_langchains_completion_llm_transcript_is_read_as_a_chat_too(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage
    from langchain_openai import OpenAI

    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app[0]), base_url="http://api")
    llm = OpenAI(base_url="http://api/v1", api_key="rsk_x", http_async_client=http, model="auto")
    messages = [SystemMessage("Be brief."), HumanMessage("What is VACUUM?"),
                AIMessage("It reclaims storage."), HumanMessage(QUESTION)]  # fmt: skip
    assert asyncio.run(llm.ainvoke(messages)) == ANSWER
    asked = app[1].asked[-1]
    assert asked.query == QUESTION
    assert [t.question for t in asked.conversation] == ["What is VACUUM?"]


@pytest.mark.parametrize(
    "prompt",
    [
        QUESTION,
        "Explain this log line: user: postgres, database: main",
        "Which user: postgres or admin, owns the table?",
        "What does the assistant: field of the config mean?",
    ],
)
def test_a_plain_prompt_is_the_question_unchanged(
    app: tuple[FastAPI, FakeQueries], prompt: str
) -> None:
    from api.openai.protocol import transcript

    assert transcript(prompt) is None

    async def call(c: AsyncOpenAI) -> Any:
        return await c.completions.create(model="auto", prompt=prompt)

    assert _run(app[0], call).choices[0].text == ANSWER
    assert app[1].asked[-1].query == prompt and app[1].asked[-1].conversation == ()


def test_a_transcript_without_a_user_turn_is_plain_and_the_limit_is_on_the_question(
    tmp_path: Path,
) -> None:
    from api.openai.protocol import transcript

    assert transcript("system: Be brief.\nassistant: ") is None
    app, fake = make_app(tmp_path, answered, max_query_chars=30)
    earlier = "x" * 200  # an earlier turn over the limit is cut, as in a chat
    prompt = f"user: {earlier}\nassistant: ok\nuser: {'y' * 30}\nassistant: "
    with TestClient(app) as client:
        assert client.post("/v1/completions", json={"prompt": prompt}).status_code == 200
        assert fake.asked[-1].query == "y" * 30
        long = prompt.replace("y" * 30, "y" * 31)
        r = client.post("/v1/completions", json={"prompt": long})
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert r.json()["error"]["param"] == "prompt"
