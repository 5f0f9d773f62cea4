"""The AsyncAPI 3.0 document of the event bus, generated from the topic registry.

``topics/schemas/asyncapi.json`` (beside the JSON Schemas of :mod:`topics.schemas`) describes
every registry topic as a channel (address, Kafka binding with partitions, retention and
cleanup policy, the record key), its event model as a message whose payload is the model's
JSON Schema (pydantic, validation mode, shared definitions under ``components.schemas``), and
each consumed topic's dead-letter channel (the original record byte for byte plus the
``dlq.*`` headers of :mod:`topics.dlq`). Operations: every topic can be sent to; consumed
topics (and their DLQs, by ``ragstream dlq``) are received from.

``ragstream topics schemas`` rewrites it; ``tests/unit/test_asyncapi.py`` fails when it is
stale and validates it against the AsyncAPI 3.0.0 JSON Schema. Spec:
https://www.asyncapi.com/docs/reference/specification/v3.0.0 (Kafka bindings 0.5.0).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic.json_schema import models_json_schema

from ragstream import __version__
from topics.dlq import DLQ_HEADER_PREFIX
from topics.registry import DLQ_PARTITIONS, DLQ_RETENTION_MS, TOPICS, TopicSpec

ASYNCAPI_PATH = Path(__file__).resolve().parent / "schemas" / "asyncapi.json"
KAFKA_BINDING = "0.5.0"
SCHEMAS_REF = "#/components/schemas/{model}"
#: The headers a dead letter adds (:func:`topics.dlq.dead_letter_headers`), all UTF-8 strings.
DLQ_HEADERS = {
    "error.class": "module-qualified class of the error that dead-lettered the record",
    "error.message": "the error's message, at most 2,000 characters",
    "attempts": "attempts made before giving up (decimal)",
    "source.topic": "the topic the record came from (replay sends it back there)",
    "source.partition": "its partition (decimal)",
    "source.offset": "its offset (decimal)",
    "pool": "the pool that failed it",
    "failed_at": "when, UTC ISO 8601",
}


def _asyncapi_schema(node: Any) -> Any:
    """``node`` (a pydantic JSON Schema) as an AsyncAPI Schema Object: the only difference
    that occurs is ``discriminator``, an OpenAPI object ``{propertyName, mapping}`` in
    pydantic's output and the property name alone in AsyncAPI 3.0."""
    if isinstance(node, list):
        return [_asyncapi_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _asyncapi_schema(v) for k, v in node.items()}
    if isinstance(out.get("discriminator"), dict):
        out["discriminator"] = out["discriminator"]["propertyName"]
    return out


def _channel(spec: TopicSpec) -> dict[str, Any]:
    message = spec.model.__name__
    return {
        "address": spec.name,
        "title": spec.name,
        "description": (spec.model.__doc__ or "").strip().splitlines()[0],
        "messages": {message: {"$ref": f"#/components/messages/{message}"}},
        "bindings": {
            "kafka": {
                "topic": spec.name,
                "partitions": spec.partitions,
                "topicConfiguration": {
                    "cleanup.policy": [spec.cleanup_policy],
                    "retention.ms": spec.retention_ms,
                },
                "bindingVersion": KAFKA_BINDING,
            }
        },
    }


def _dlq_channel(spec: TopicSpec) -> dict[str, Any]:
    message = f"{spec.model.__name__}DeadLetter"
    return {
        "address": spec.dlq,
        "title": spec.dlq,
        "description": f"Dead letters of {spec.name}: the original record plus why it failed.",
        "messages": {message: {"$ref": f"#/components/messages/{message}"}},
        "bindings": {
            "kafka": {
                "topic": spec.dlq,
                "partitions": DLQ_PARTITIONS,
                "topicConfiguration": {
                    "cleanup.policy": ["delete"],
                    "retention.ms": DLQ_RETENTION_MS,
                },
                "bindingVersion": KAFKA_BINDING,
            }
        },
    }


def _messages(specs: tuple[TopicSpec, ...], refs: dict[str, Any]) -> dict[str, Any]:
    messages: dict[str, Any] = {}
    for spec in specs:
        name = spec.model.__name__
        messages[name] = {
            "name": name,
            "title": name,
            "summary": (spec.model.__doc__ or "").strip().splitlines()[0],
            "contentType": "application/json",
            "payload": refs[name],
            "bindings": {
                "kafka": {
                    "key": {"type": "string", "description": f"the event's {spec.key}, UTF-8"},
                    "bindingVersion": KAFKA_BINDING,
                }
            },
        }
        if spec.consumed:
            messages[f"{name}DeadLetter"] = {
                "name": f"{name}DeadLetter",
                "title": f"{name} dead letter",
                "summary": f"A {name} record that failed, byte for byte, with its failure.",
                "contentType": "application/json",
                "headers": {
                    "type": "object",
                    "properties": {
                        DLQ_HEADER_PREFIX + k: {"type": "string", "description": v}
                        for k, v in DLQ_HEADERS.items()
                    },
                    "required": [DLQ_HEADER_PREFIX + k for k in DLQ_HEADERS],
                },
                "payload": refs[name],
            }
    return messages


def _operations(specs: tuple[TopicSpec, ...]) -> dict[str, Any]:
    ops: dict[str, Any] = {}
    for spec in specs:
        channel = {"$ref": f"#/channels/{spec.name}"}
        ops[f"send.{spec.name}"] = {
            "action": "send",
            "channel": channel,
            "summary": f"Produce {spec.model.__name__} events keyed by {spec.key}.",
        }
        if spec.consumed:
            ops[f"receive.{spec.name}"] = {
                "action": "receive",
                "channel": channel,
                "summary": f"A pool consumes {spec.name} (at-least-once, dead letters on failure).",
            }
            ops[f"receive.{spec.dlq}"] = {
                "action": "receive",
                "channel": {"$ref": f"#/channels/{spec.dlq}"},
                "summary": "`ragstream dlq inspect` lists them, `ragstream dlq replay` resends.",
            }
    return ops


def render_asyncapi(specs: tuple[TopicSpec, ...] = TOPICS) -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document of ``specs`` (default: the whole registry), as a dict.

    Topic names are the unprefixed registry names (a deployment's ``kafka.topic_prefix`` is
    prepended on the broker).
    """
    models = list(dict.fromkeys(s.model for s in specs))
    keys, defs = models_json_schema([(m, "validation") for m in models], ref_template=SCHEMAS_REF)
    refs = {m.__name__: keys[(m, "validation")] for m in models}
    channels: dict[str, Any] = {}
    for spec in specs:
        channels[spec.name] = _channel(spec)
        if spec.consumed:
            channels[str(spec.dlq)] = _dlq_channel(spec)
    return {
        "asyncapi": "3.0.0",
        "id": "urn:ragstream:event-bus",
        "info": {
            "title": "ragstream event bus",
            "version": __version__,
            "description": (
                "Kafka topics of ragstream, generated from topics/registry.py by "
                "`ragstream topics schemas`. Events are JSON, one per record; every event has "
                "schema_version, event_id, tenant, created_at (UTC) and a per-stage trace.\n\n"
                "Trust model: the bus is trusted. Any producer that can write to a topic may "
                "ask as any tenant (the `tenant` field is not checked against the producer) and "
                "read every tenant's answers; authenticate clients at the HTTP API, which "
                "scopes each request to its API key's tenant, and restrict who may produce to "
                "or consume from these topics with Kafka ACLs.\n\n"
                "rag.queries: a record without `request_id` is answered under its record key "
                "(send the key you will look the answer up by); a record without `created_at` "
                "gets the record's timestamp, so the trace shows the time spent in Kafka."
            ),
            "license": {"name": "Apache-2.0"},
        },
        "servers": {
            "kafka": {
                "host": "localhost:9092",
                "protocol": "kafka",
                "description": "The development broker (`make up`); `kafka.bootstrap_servers`.",
            }
        },
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": _operations(specs),
        "components": {
            "schemas": _asyncapi_schema(defs.get("$defs", {})),
            "messages": _messages(specs, refs),
        },
    }


def render_asyncapi_text() -> str:
    """:func:`render_asyncapi` as the JSON text of the file (sorted keys, 2-space indent)."""
    return json.dumps(render_asyncapi(), indent=2, sort_keys=True) + "\n"


def write_asyncapi(path: Path = ASYNCAPI_PATH) -> Path:
    """Write the AsyncAPI document to ``path``; return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_asyncapi_text(), encoding="utf-8")
    return path
