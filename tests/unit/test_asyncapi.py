"""The AsyncAPI document (``topics/schemas/asyncapi.json``) is generated from the topic registry:
it fails here when stale, it is a valid AsyncAPI 3.0.0 document, and it names every registry
topic, its key and its dead-letter topic.

``tests/fixtures/asyncapi-3.0.0.schema.json`` is the specification's JSON Schema,
``schemas/3.0.0-without-$id.json`` of the npm package ``@asyncapi/specs`` 6.11.1 (Apache-2.0),
re-serialised compactly with sorted keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema_rs

from topics.asyncapi import ASYNCAPI_PATH, render_asyncapi, render_asyncapi_text
from topics.registry import TOPICS

SPEC_SCHEMA = Path(__file__).resolve().parents[1] / "fixtures" / "asyncapi-3.0.0.schema.json"


def test_asyncapi_document_is_current() -> None:
    assert ASYNCAPI_PATH.read_text(encoding="utf-8") == render_asyncapi_text(), (
        "run `ragstream topics schemas` and commit the result"
    )


def test_asyncapi_document_is_valid_asyncapi_3() -> None:
    validator = jsonschema_rs.validator_for(json.loads(SPEC_SCHEMA.read_text(encoding="utf-8")))
    document = json.loads(ASYNCAPI_PATH.read_text(encoding="utf-8"))
    errors = [f"{e.instance_path}: {e.message}"[:300] for e in validator.iter_errors(document)]
    assert not errors, errors[:5]
    broken = dict(document, channels={"x": {"address": 42}})
    assert not validator.is_valid(broken)


def test_every_topic_its_key_and_dlq_are_described() -> None:
    document = render_asyncapi()
    channels, messages = document["channels"], document["components"]["messages"]
    for spec in TOPICS:
        channel = channels[spec.name]
        assert channel["bindings"]["kafka"]["partitions"] == spec.partitions
        message = messages[spec.model.__name__]
        assert spec.key in message["bindings"]["kafka"]["key"]["description"]
        assert message["payload"] == {"$ref": f"#/components/schemas/{spec.model.__name__}"}
        if spec.consumed:
            assert channels[str(spec.dlq)]["address"] == spec.dlq
            assert f"receive.{spec.name}" in document["operations"]
    # Every reference inside the document resolves.
    text = json.dumps(document)
    for ref in {part.split('"')[0] for part in text.split('"$ref": "#/')[1:]}:
        node = document
        for step in ref.split("/"):
            node = node[step]
