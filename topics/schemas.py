"""JSON Schema files of every event model, for producers written in other languages.

The files live in ``topics/schemas/<topic>.schema.json``; ``ragstream topics schemas`` rewrites
them and ``tests/unit/test_topics.py`` fails when they are out of date.
"""

from __future__ import annotations

import json
from pathlib import Path

from topics.registry import TOPICS

SCHEMA_DIR = Path(__file__).resolve().parent / "schemas"


def render_schemas() -> dict[str, str]:
    """``{file name: JSON text}`` for every topic in the registry (validation mode schemas)."""
    out = {}
    for spec in TOPICS:
        schema = spec.model.model_json_schema(mode="validation")
        schema["$id"] = f"https://ragstream.dev/schemas/{spec.name}.schema.json"
        schema["x-topic"] = {"name": spec.name, "key": spec.key, "dlq": spec.dlq}
        out[f"{spec.name}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
    return out


def write_schemas(directory: Path = SCHEMA_DIR) -> list[Path]:
    """Write every schema file into ``directory``; return the paths written."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, text in render_schemas().items():
        path = directory / name
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
