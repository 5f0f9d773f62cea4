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

from tests.unit.apikit import FakeQueries, answered, make_app
from topics.queries import QueryRequest
from workers.conversation import CONTEXT_MARKER


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
    [("evidence", "evidence"), ("small", "small"), ("large", "large"), ("gpt-4o", "auto")],
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


def test_a_follow_up_is_made_standalone_from_earlier_questions_only(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    long_answer = "x" * 2000 + " autovacuum runs every minute."
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
    query = app[1].asked[-1].query
    assert query == (
        "How often does the autovacuum launcher run?"
        f"{CONTEXT_MARKER}What is VACUUM? What is the autovacuum launcher?"
    )
    assert "x" * 10 not in query and "reclaims" not in query and "Be brief" not in query


def test_a_single_question_is_sent_unchanged(app: tuple[FastAPI, FakeQueries]) -> None:
    async def call(c: AsyncOpenAI) -> Any:
        return await c.chat.completions.create(
            model="auto", messages=[{"role": "user", "content": "What does VACUUM do?"}]
        )

    completion = _run(app[0], call)
    assert app[1].asked[-1].query == "What does VACUUM do?"
    extra = completion.model_extra or {}
    assert extra["citations"][0]["doc_id"] == "vacuum" and extra["evidence"][0]["n"] == 1


def test_the_stream_ends_with_usage_citations_and_evidence(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    async def call(c: AsyncOpenAI) -> list[Any]:
        stream = await c.chat.completions.create(
            model="small",
            messages=[{"role": "user", "content": "What does VACUUM do?"}],
            stream=True,
        )
        return [chunk async for chunk in stream]

    chunks = _run(app[0], call)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text == "VACUUM reclaims storage [1]."
    last = chunks[-1]
    assert last.choices[0].finish_reason == "stop"
    assert last.usage is not None and last.usage.total_tokens == 47
    extra = last.model_extra or {}
    assert extra["citations"][0]["doc_id"] == "vacuum"
    assert extra["evidence"][0]["text"] == "VACUUM reclaims"
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
