"""The HTTP edge's messages for a key without ``Bearer`` and for a body that is not JSON."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from api.app import create_app
from tests.unit.apikit import answered, make_app, settings_for
from workers.conversation import last_answer, question_of, split_context


def test_a_key_without_bearer_is_told_the_right_header(tmp_path: Path) -> None:
    with TestClient(create_app(settings_for(tmp_path))) as client:
        r = client.post("/v1/query", json={"query": "q"}, headers={"Authorization": "rsk_abc"})
    assert r.status_code == 401
    assert "use 'Authorization: Bearer <key>'" in r.json()["error"]["message"]


def test_a_body_that_is_not_json_is_415_and_bad_json_fields_stay_422(tmp_path: Path) -> None:
    app, _ = make_app(tmp_path, answered)
    with TestClient(app) as client:
        r = client.post("/v1/query", content=b"query=hi", headers={"Content-Type": "text/plain"})
        assert r.status_code == 415, r.text
        assert r.json()["error"]["code"] == "UNSUPPORTED_MEDIA_TYPE"
        r = client.post("/v1/query", json={"query": "hi", "top_k": 0})
        assert r.status_code == 422 and r.json()["error"]["code"] == "INVALID_REQUEST"


def test_a_follow_up_carries_its_conversation_and_is_answered_standalone(tmp_path: Path) -> None:
    app, fake = make_app(tmp_path, answered)
    earlier = "Which TCP port does the PostgreSQL server listen on by default?"
    body = {
        "query": "And how do I change it?",
        "history": [earlier, {"question": "What is VACUUM?", "answer": "VACUUM reclaims storage."}],
    }
    with TestClient(app) as client:
        assert client.post("/v1/query", json=body).status_code == 200
        alone = client.post("/v1/query", json={"query": "What is VACUUM?", "history": []})
        assert alone.status_code == 200
        bad = client.post("/v1/query", json={"query": "q", "history": [{"answer": "a"}]})
        assert bad.status_code == 422, bad.text
    asked = fake.asked[0]
    assert asked.query == "And how do I change it?"  # as typed, never rewritten
    assert [(t.question, t.answer) for t in asked.conversation] == [
        (earlier, ""),
        ("What is VACUUM?", "VACUUM reclaims storage."),
    ]
    assert last_answer(asked) == "VACUUM reclaims storage."
    question, context = split_context(question_of(asked))
    assert question.startswith("How do I change")
    assert earlier in context
    assert fake.asked[1].query == "What is VACUUM?" and fake.asked[1].conversation == ()
    assert question_of(fake.asked[1]) == "What is VACUUM?"
