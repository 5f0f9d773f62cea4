"""LangChain's ``ChatOpenAI`` and LlamaIndex's ``OpenAILike`` against the real app over ASGI
(the pools are faked on the reply path, :mod:`tests.unit.apikit`): with their defaults they
answer, and the citations reach their messages through the sources option (issue 25, item 2).

Neither framework keeps a provider's extra top-level fields in its message objects (LangChain's
``response_metadata`` holds ``id``, ``model_name``, ``finish_reason``, usage; LlamaIndex keeps
the whole body only in ``raw``), which the first test pins down: if a framework starts keeping
``citations``, the docs should say so.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from langchain_core.messages import AIMessage, AIMessageChunk
from langchain_openai import ChatOpenAI
from llama_index.core.llms import ChatMessage
from llama_index.llms.openai_like import OpenAILike

from api.replies import Reply
from tests.unit.apikit import FakeQueries, answered, make_app
from topics.queries import QueryRequest
from topics.responses import Citation, QueryResponse

QUESTION = "What does VACUUM do?"
#: The sources block of the answer of :func:`two_sources`.
BLOCK = "\n\nSources:\n[1] Routine Vacuuming (docs/vacuum.html)\n[2] autovacuum"


def two_sources(request: QueryRequest) -> list[Reply]:
    """The faked answer, citing two passages (one with a title and source, one without)."""
    replies: list[Reply] = list(answered(request, "VACUUM reclaims storage [1][2]."))
    final = replies[-1]
    assert isinstance(final, QueryResponse)
    citations = (
        Citation(n=2, doc_id="autovacuum", chunk_id="autovacuum#0"),
        Citation(
            n=1,
            doc_id="vacuum",
            chunk_id="vacuum#0",
            title="Routine Vacuuming",
            source="docs/vacuum.html",
        ),
    )
    replies[-1] = final.model_copy(update={"citations": citations})
    return replies


@pytest.fixture
def app(tmp_path: Path) -> tuple[FastAPI, FakeQueries]:
    return make_app(tmp_path, two_sources)


def _http(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://api")


def _langchain(app: FastAPI, **kwargs: Any) -> ChatOpenAI:
    return ChatOpenAI(
        base_url="http://api/v1", api_key="rsk_x", http_async_client=_http(app), **kwargs
    )


def _llamaindex(app: FastAPI, **kwargs: Any) -> OpenAILike:
    return OpenAILike(
        api_base="http://api/v1", api_key="rsk_x", async_http_client=_http(app), **kwargs
    )


def _run(call: Callable[[], Any]) -> Any:
    return asyncio.run(call())


def test_without_the_option_the_frameworks_drop_the_citations(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    message = _run(lambda: _langchain(app[0]).ainvoke(QUESTION))
    assert isinstance(message, AIMessage)
    assert message.content == "VACUUM reclaims storage [1][2]."
    assert "citations" not in message.response_metadata
    assert "citations" not in message.additional_kwargs
    reply = _run(lambda: _llamaindex(app[0], is_chat_model=True).achat([_user(QUESTION)]))
    assert reply.message.content == "VACUUM reclaims storage [1][2]."
    assert "citations" not in reply.additional_kwargs
    assert "citations" not in reply.message.additional_kwargs


def test_langchain_chatopenai_with_its_default_model_answers(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    llm = _langchain(app[0])
    assert llm.model_name == "gpt-3.5-turbo"  # the framework's default, sent unasked
    message = _run(lambda: llm.ainvoke(QUESTION))
    assert message.content == "VACUUM reclaims storage [1][2]."
    assert app[1].asked[-1].route == "auto"
    # The request id is reachable: GET /v1/queries/{id} has the whole answer.
    assert message.response_metadata["id"] == f"chatcmpl-{app[1].asked[-1].request_id}"


def test_langchain_gets_the_sources_block_with_the_model_suffix(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    message = _run(lambda: _langchain(app[0], model="auto+sources").ainvoke(QUESTION))
    assert message.content == "VACUUM reclaims storage [1][2]." + BLOCK
    assert app[1].asked[-1].route == "auto"


def test_langchain_gets_the_sources_block_with_the_body_field_streamed_too(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    llm = _langchain(app[0], model="small", extra_body={"sources": True})

    async def stream() -> list[AIMessageChunk]:
        return [chunk async for chunk in llm.astream(QUESTION)]

    chunks = _run(stream)
    assert "".join(str(c.content) for c in chunks) == "VACUUM reclaims storage [1][2]." + BLOCK
    assert app[1].asked[-1].route == "small"
    message = _run(lambda: llm.ainvoke(QUESTION))
    assert str(message.content).endswith(BLOCK)


def test_llamaindex_openailike_with_its_defaults_answers(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    llm = _llamaindex(app[0])
    assert (llm.model, llm.is_chat_model) == ("gpt-3.5-turbo", False)  # -> /v1/completions
    reply = _run(lambda: llm.acomplete(QUESTION))
    assert reply.text == "VACUUM reclaims storage [1][2]."
    assert app[1].asked[-1].route == "auto" and app[1].asked[-1].query == QUESTION


def test_llamaindex_gets_the_sources_block_completion_and_chat(
    app: tuple[FastAPI, FakeQueries],
) -> None:
    text = _run(lambda: _llamaindex(app[0], model="ragstream+sources").acomplete(QUESTION))
    assert text.text == "VACUUM reclaims storage [1][2]." + BLOCK
    chat = _llamaindex(app[0], model="auto+sources", is_chat_model=True)
    reply = _run(lambda: chat.achat([_user(QUESTION)]))
    assert reply.message.content == "VACUUM reclaims storage [1][2]." + BLOCK

    async def stream() -> Sequence[Any]:
        return [r async for r in await chat.astream_chat([_user(QUESTION)])]

    deltas = _run(stream)
    assert deltas[-1].message.content == "VACUUM reclaims storage [1][2]." + BLOCK


def test_an_answer_without_citations_gets_no_block(tmp_path: Path) -> None:
    def bare(request: QueryRequest) -> list[Reply]:
        replies = list(answered(request, "Nothing in the documents says so."))
        final = replies[-1]
        assert isinstance(final, QueryResponse)
        replies[-1] = final.model_copy(update={"citations": ()})
        return replies

    app, _ = make_app(tmp_path, bare)
    message = _run(lambda: _langchain(app, model="auto+sources").ainvoke(QUESTION))
    assert message.content == "Nothing in the documents says so."


def test_other_unknown_models_are_still_not_found(app: tuple[FastAPI, FakeQueries]) -> None:
    import openai

    with pytest.raises(openai.NotFoundError) as caught:
        _run(lambda: _langchain(app[0], model="gpt-4o").ainvoke(QUESTION))
    assert caught.value.code == "model_not_found"
    with pytest.raises(openai.NotFoundError):
        _run(lambda: _langchain(app[0], model="gpt-4o+sources").ainvoke(QUESTION))


def _user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)
