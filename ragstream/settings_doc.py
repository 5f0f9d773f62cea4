"""The configuration reference (``docs/configuration.md``), generated from the settings tree.

:func:`render` walks :class:`ragstream.settings.Settings` section by section and emits one
Markdown table per settings model: the environment variable of each field
(``RAGSTREAM_<SECTION>__<FIELD>``, nested models adding ``__<FIELD>``), its type with its
constraints, its default and its description. Descriptions are the ``#:`` comments written
above a field in ``ragstream/settings.py`` (the Sphinx attribute-comment convention) or a
``Field(description=...)``; a section's text is its model's docstring. Defaults are read from
the models' own defaults (the default instance of each section), never from the environment,
so the page is the same on every machine; a path under the checkout is written
``<checkout>/...``.

``python -m ragstream.settings_doc`` rewrites the page; ``--check`` exits 1 when the committed
page differs from a fresh generation (``tests/unit/test_settings_doc.py`` asserts the same).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import json
import re
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal, TypeGuard, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from ragstream import settings as settings_module
from ragstream.settings import PROJECT_ROOT, Settings

#: The page this module writes, relative to the checkout.
DEFAULT_PAGE = PROJECT_ROOT / "docs" / "configuration.md"
ENV_PREFIX = "RAGSTREAM_"
ENV_DELIMITER = "__"

_HEADER = """\
# Configuration reference

<!-- Generated from ragstream/settings.py by `python -m ragstream.settings_doc`; do not edit by
hand. tests/unit/test_settings_doc.py fails when this page differs from a fresh generation. -->

{module_doc}

How a value is given:

- Every field is an environment variable `{prefix}<SECTION>__<FIELD>`; a nested model adds
  `__<FIELD>` again (`{prefix}POOLS__RETRIEVAL__MAX_BATCH=16`,
  `{prefix}GENERATION__LARGE__BASE_URL=http://vllm:8000`). Names are case-insensitive.
- A `.env` file in the working directory is read too; the environment wins over it.
- Lists and other complex values are JSON: `{prefix}INGEST__ALLOWED_ROOTS='["/srv/docs"]'`,
  `{prefix}WEBHOOKS__ALLOW_NETWORKS='["10.0.0.0/8"]'`.
- Booleans take `true`/`false` (or `1`/`0`); an unset optional value (`None`) is left out.
- A default written `<checkout>/...` is a path under the repository root of the install
  (`pip install -e .`).
- An invalid value stops the process at start-up, naming the field.
"""


def _rst_to_md(text: str) -> str:
    """``code`` -> `code` and :class:`X` / :func:`X` / ... -> `X` (docstrings use reST)."""
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _field_comments(cls: type[BaseModel]) -> dict[str, str]:
    """The ``#:`` comment block written right above each annotated field of ``cls``.

    Returns:
        ``{field name: comment text}`` (lines joined by spaces, ``#:`` removed); fields
        without such a comment are absent.
    """
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    source = inspect.cleandoc("\n" + source) if source.startswith(" ") else source
    lines = source.splitlines()
    tree = ast.parse(source)
    found: dict[str, str] = {}
    class_def = next(n for n in tree.body if isinstance(n, ast.ClassDef))
    for node in class_def.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        block: list[str] = []
        row = node.lineno - 2  # 0-based index of the line above the field
        while row >= 0 and lines[row].strip().startswith("#:"):
            block.insert(0, lines[row].strip()[2:].strip())
            row -= 1
        if block:
            found[node.target.id] = " ".join(block)
    return found


def _type_names(annotation: Any) -> list[str]:
    """The alternatives of a field's annotation, each readable (``["str", "None"]``,
    ``['"a"', '"b"']`` for a ``Literal``, ``["list[str]"]``)."""
    origin = get_origin(annotation)
    if origin is Literal:
        return [json.dumps(a) for a in get_args(annotation)]
    if origin in (Union, types.UnionType):
        return [name for a in get_args(annotation) for name in _type_names(a)]
    if origin is not None:
        args = ", ".join(" | ".join(_type_names(a)) for a in get_args(annotation))
        return [f"{getattr(origin, '__name__', str(origin))}[{args}]"]
    if annotation is type(None):
        return ["None"]
    return [getattr(annotation, "__name__", str(annotation))]


_BOUNDS = (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<"))


def _constraints(info: FieldInfo) -> list[str]:
    """``["≥ 1", "≤ 4000"]``, ``["pattern ^(console|json)$"]``: the field's validation bounds."""
    out = []
    for meta in info.metadata:
        for attr, sign in _BOUNDS:
            value = getattr(meta, attr, None)
            if value is not None:
                out.append(f"{sign} {value}")
        pattern = getattr(meta, "pattern", None)
        if pattern is not None:
            out.append(f"pattern `{pattern}`")
    return out


def _plain(value: Any) -> Any:
    """JSON-ready form of a default: paths as strings (under the checkout: ``<checkout>/..``)."""
    if isinstance(value, Path):
        try:
            return "<checkout>/" + value.relative_to(PROJECT_ROOT).as_posix()
        except ValueError:
            return value.as_posix()
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, BaseModel):  # a model inside a dict (``scaling.pools``)
        return _plain(value.model_dump())
    return value


def _default_text(value: Any) -> str:
    """The default as it would be written: JSON (strings quoted, lists as arrays), ``None``."""
    if value is None:
        return "`None`"
    return f"`{json.dumps(_plain(value), ensure_ascii=False)}`"


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell: no line breaks, and a pipe outside a code span
    escaped (Python-Markdown's tables, which MkDocs uses, leave pipes in code spans alone)."""
    pieces = text.replace("\n", " ").split("`")
    return "`".join(p if i % 2 else p.replace("|", "\\|") for i, p in enumerate(pieces))


def _is_model(annotation: Any) -> TypeGuard[type[BaseModel]]:
    """Whether a field's annotation is a nested settings model (a section of its own)."""
    return inspect.isclass(annotation) and issubclass(annotation, BaseModel)


def _sections(
    model: type[BaseModel], instance: BaseModel, path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], type[BaseModel], BaseModel]]:
    """``(path, model class, default instance)`` of ``model`` and of every nested model in it,
    depth first, in field order."""
    yield path, model, instance
    for name, info in model.model_fields.items():
        if _is_model(info.annotation):
            yield from _sections(info.annotation, getattr(instance, name), (*path, name))


def _table(path: tuple[str, ...], model: type[BaseModel], instance: BaseModel) -> list[str]:
    """The Markdown rows of ``model``'s own (non-model) fields; ``[]`` when it has none."""
    comments = _field_comments(model)
    rows = []
    for name, info in model.model_fields.items():
        if _is_model(info.annotation):
            continue
        env = ENV_PREFIX + ENV_DELIMITER.join(p.upper() for p in (*path, name))
        alternatives = " | ".join(f"`{t}`" for t in _type_names(info.annotation))
        kind = " ".join([alternatives, *_constraints(info)])
        about = _rst_to_md(info.description or comments.get(name, ""))
        default = _default_text(getattr(instance, name))
        rows.append(f"| `{env}` | {_cell(kind)} | {_cell(default)} | {_cell(about)} |")
    if not rows:
        return []
    return ["| variable | type | default | description |", "|---|---|---|---|", *rows]


def _doc(model: type[BaseModel]) -> str:
    """The model's own docstring (not one inherited from ``BaseModel``), as Markdown."""
    doc = model.__dict__.get("__doc__")
    return _rst_to_md(inspect.cleandoc(doc)) if doc else ""


def render() -> str:
    """The whole reference page (Markdown, ending in one newline)."""
    module_doc = _rst_to_md(inspect.cleandoc(settings_module.__doc__ or ""))
    parts = [_HEADER.format(module_doc=module_doc, prefix=ENV_PREFIX)]
    documented: set[type[BaseModel]] = set()
    for name, info in Settings.model_fields.items():
        default = info.get_default(call_default_factory=True)
        assert _is_model(info.annotation) and isinstance(default, BaseModel), name
        for path, model, instance in _sections(info.annotation, default, (name,)):
            level = "#" * (len(path) + 1)
            parts.append(f"{level} `{'.'.join(path)}`\n")
            doc = _doc(model)
            # A model used several times (each pool, each tier) has its text once, at the first.
            if doc and model not in documented:
                parts.append(doc + "\n")
            documented.add(model)
            rows = _table(path, model, instance)
            if rows:
                parts.append("\n".join(rows) + "\n")
    return "\n".join(parts).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the page (default ``docs/configuration.md``), or with ``--check`` compare it.

    Returns:
        0 when written or up to date; 1 when ``--check`` finds it stale.
    """
    parser = argparse.ArgumentParser(prog="python -m ragstream.settings_doc")
    parser.add_argument("page", nargs="?", type=Path, default=DEFAULT_PAGE)
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    page: Path = args.page
    text = render()
    if args.check:
        current = page.read_text(encoding="utf-8") if page.exists() else ""
        if current != text:
            print(f"{page} is stale: run `python -m ragstream.settings_doc`", file=sys.stderr)
            return 1
        return 0
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
