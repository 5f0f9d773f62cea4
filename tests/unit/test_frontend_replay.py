"""A chat front end's request sequence (Open WebUI, ``tests/fixtures/openai/open-webui.json``)
replayed against the app with faked pools: every answer parses as that front end reads it."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from tests.frontends import load, replay
from tests.unit.apikit import answered, make_app


def test_open_webui_models_stream_and_title_generation(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path, answered, sse_keepalive_s=0.01)
    fixture = load("open-webui")
    with TestClient(app) as client:
        models, chat, title = replay(client, fixture, "rsk_test")
    chosen = fixture["requests"][1]["body"]["model"]
    assert chosen in models.ids and models.ids[0] == "auto"
    assert chat.text == "VACUUM reclaims storage [1]."
    assert chat.final["citations"][0]["doc_id"] == "vacuum" and chat.final["evidence"]
    assert chat.final["usage"] == {"prompt_tokens": 40, "completion_tokens": 7, "total_tokens": 47}
    assert title.text == "VACUUM reclaims storage [1]."
    # The second turn stands on its own, so it reached the pipeline as asked: no earlier answer
    # text, no system prompt, no cache_control part marker; the title task was asked as it came.
    asked = fake.asked[0].query
    assert asked == "How often does the autovacuum launcher start workers?"
    assert fake.asked[1].query.startswith("### Task:\nGenerate a concise")
    assert [r.stream for r in fake.asked] == [True, False]
