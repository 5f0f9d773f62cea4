"""Document ids and the upload form as the OpenAPI document states them and the API checks
them (issue 39): no control character, C1 (U+0080-U+009F) included, in a body, a form or a
path; ``readers`` and ``metadata`` of a form as the spec says; no ``null`` for a parameter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from api.errors import ApiError
from api.ingesting import check_doc_id as _check_doc_id
from api.openapi import without_null
from api.uploads import DocumentForm
from tests.unit.apikit import answered, make_app


@pytest.mark.parametrize("doc_id", ["a\x85b", "\x9f", "a\x7f", "a\nb", "ok\n", ""])
def test_a_control_character_in_an_id_is_refused(doc_id: str) -> None:
    with pytest.raises(ApiError) as raised:
        _check_doc_id(doc_id)
    assert raised.value.status == 422
    with pytest.raises(ValueError):
        DocumentForm(doc_id=doc_id)


@pytest.mark.parametrize("doc_id", ["naïve/日本", "/abs/id", "50% off #1", "\xa0x"])
def test_other_ids_are_accepted(doc_id: str) -> None:
    _check_doc_id(doc_id)
    assert DocumentForm(doc_id=doc_id).doc_id == doc_id


def _spec(tmp_path: Path) -> dict[str, Any]:
    app, _ = make_app(tmp_path, answered)
    return app.openapi()


def test_the_spec_states_what_the_server_refuses(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    post = spec["paths"]["/v1/documents"]["post"]["requestBody"]["content"]
    form = post["multipart/form-data"]
    doc_id = form["schema"]["properties"]["doc_id"]
    assert doc_id["pattern"] == r"^[^\x00-\x1f\x7f-\x9f]+$" and "anyOf" not in doc_id
    assert (
        post["application/json"]["schema"]["properties"]["doc_id"]["pattern"] == doc_id["pattern"]
    )
    assert form["schema"]["properties"]["metadata"]["type"] == "object"
    assert form["encoding"] == {"metadata": {"contentType": "application/json"}}
    assert form["schema"]["properties"]["readers"]["pattern"].startswith("^ *(?:user|group):")
    for path in ("/v1/documents/{doc_id}", "/v1/readers/{doc_id}"):
        for op in spec["paths"][path].values():
            (param,) = [p for p in op["parameters"] if p["name"] == "doc_id"]
            assert param["schema"]["pattern"] == doc_id["pattern"]
    for path, item in spec["paths"].items():  # HTTP has no null: a parameter is absent or text
        for op in item.values():
            for param in op.get("parameters", []):
                assert {"type": "null"} not in param["schema"].get("anyOf", []), (path, param)
    gone = spec["paths"]["/v1/documents/{doc_id}"]["get"]["responses"]["404"]
    assert "deleted" in gone["description"]


def test_without_null_keeps_the_rest() -> None:
    schema = {"anyOf": [{"type": "string", "pattern": "^a$"}, {"type": "null"}], "default": None,
              "description": "d"}  # fmt: skip
    assert without_null(schema) == {"type": "string", "pattern": "^a$", "description": "d"}
    assert without_null({"type": "integer"}) == {"type": "integer"}


def test_the_form_takes_metadata_and_readers_as_the_spec_states() -> None:
    form = DocumentForm(metadata=json.dumps({"lang": "en", "n": 2}), readers="user:a , group:b")
    assert form.metadata_dict() == {"lang": "en", "n": 2}
    assert form.readers_tuple() == ("group:b", "user:a")
    for readers in ("user:a,,user:b", "user:a\n", "ada"):
        with pytest.raises(ValueError):
            DocumentForm(readers=readers)
    for metadata in ("null", "[]", '{"a": [1]}'):
        with pytest.raises(ValueError):
            DocumentForm(metadata=metadata)
