"""Replay a chat front end's recorded request sequence (``tests/fixtures/openai/*.json``)
against the API and check every answer the way that front end parses it.

Shared by the unit test (the app with faked pools) and the integration test (the real stack).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

FIXTURES = Path(__file__).parent / "fixtures" / "openai"


@dataclass
class Exchange:
    """What one replayed request gave: ``ids`` of a model list, or the answer ``text`` with the
    ``final`` stream chunk (usage, citations) or the ``completion``."""

    name: str
    ids: list[str] = field(default_factory=list)
    text: str = ""
    final: dict[str, Any] = field(default_factory=dict)
    completion: dict[str, Any] = field(default_factory=dict)


def load(name: str) -> dict[str, Any]:
    """The fixture ``name`` (e.g. ``open-webui``)."""
    return json.loads((FIXTURES / f"{name}.json").read_text())  # type: ignore[no-any-return]


def replay(http: httpx.Client, fixture: dict[str, Any], key: str) -> list[Exchange]:
    """Send every request of ``fixture`` in order through ``http`` and check each answer.

    Raises:
        AssertionError: an answer the front end could not parse.
    """
    out = []
    for step in fixture["requests"]:
        headers = {k: v.replace("{{KEY}}", key) for k, v in step["headers"].items()}
        kind = step["expect"]
        ex = Exchange(step["name"])
        if kind == "chat.stream":
            with http.stream(step["method"], step["path"], headers=headers, json=step["body"]) as r:
                assert r.status_code == 200, (step["name"], r.read())
                assert r.headers["content-type"].startswith("text/event-stream")
                ex.text, ex.final = parse_stream(list(r.iter_lines()))
        else:
            r = http.request(step["method"], step["path"], headers=headers, json=step.get("body"))
            assert r.status_code == 200, (step["name"], r.text)
            assert r.headers["content-type"].startswith("application/json")
            if kind == "models":
                ex.ids = parse_models(r.json())
            else:
                ex.completion = r.json()
                ex.text = parse_completion(ex.completion)
        out.append(ex)
    return out


def parse_models(data: Any) -> list[str]:
    """The model ids of an OpenAI model list (``{"object": "list", "data": [{"id", ...}]}``)."""
    assert data["object"] == "list" and data["data"], data
    for model in data["data"]:
        assert isinstance(model["id"], str) and model["object"] == "model", model
        assert isinstance(model["created"], int) and isinstance(model["owned_by"], str), model
    return [m["id"] for m in data["data"]]


def parse_stream(lines: list[str]) -> tuple[str, dict[str, Any]]:
    """The answer text and the finish chunk of an OpenAI chat stream with the ``usage`` of the
    usage chunk after it (``stream_options.include_usage``: ``choices: []``, OpenAI's shape):
    ``data:`` lines of ``chat.completion.chunk`` objects (comments allowed), each after its SSE
    ``id:`` line (the resumable-stream id, which SSE parsers such as Open WebUI's read and
    OpenAI's clients skip), ending in ``data: [DONE]``."""
    datas = [line[len("data:") :].strip() for line in lines if line.startswith("data:")]
    ids = [line for line in lines if line.startswith("id: ")]
    others = [line for line in lines if line and not line.startswith(("data:", ":", "id: "))]
    assert not others, others  # nothing but id and data lines and keep-alive comments
    events = [line for line in lines if line.startswith(("id: ", "data:"))]
    assert events[::2] == ids and len(ids) == len(datas), events  # one id before each data line
    assert datas and datas[-1] == "[DONE]", datas[-3:]
    text, final = "", {}
    *content, last = [json.loads(raw) for raw in datas[:-1]]
    for chunk in content:
        assert "error" not in chunk, chunk
        assert chunk["object"] == "chat.completion.chunk" and chunk["id"], chunk
        assert "usage" not in chunk, chunk  # only the usage chunk counts tokens
        choice = chunk["choices"][0]
        assert isinstance(choice["delta"], dict) and choice["index"] == 0, chunk
        text += choice["delta"].get("content") or ""
        final = chunk
    assert last.get("choices") == [] and last.get("usage"), "no usage chunk (include_usage)"
    final = {**final, "usage": last["usage"]}
    usage = final["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"], usage
    assert final["choices"][0]["finish_reason"] == "stop", final
    return text, final


def parse_completion(data: dict[str, Any]) -> str:
    """The answer of a ``chat.completion``."""
    assert data["object"] == "chat.completion", data
    message = data["choices"][0]["message"]
    assert message["role"] == "assistant" and isinstance(message["content"], str), data
    assert data["choices"][0]["finish_reason"] == "stop", data
    return str(message["content"])
