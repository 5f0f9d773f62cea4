"""The configuration reference (docs/configuration.md) is generated from the settings tree.

The committed page must equal a fresh generation (``python -m ragstream.settings_doc``
rewrites it), every variable it names must set a real field, and its defaults must not depend
on the environment of the machine that generated it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import BaseModel, Field

from ragstream import settings_doc
from ragstream.settings import PROJECT_ROOT, Settings

PAGE = PROJECT_ROOT / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(RAGSTREAM_[A-Z0-9_]+)` \| (.*?) \| (.*?) \| (.*) \|$", re.MULTILINE)


def _leaf_paths(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    out: set[tuple[str, ...]] = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out |= _leaf_paths(annotation, (*prefix, name))
        else:
            out.add((*prefix, name))
    return out


def test_committed_page_is_a_fresh_generation() -> None:
    assert PAGE.read_text(encoding="utf-8") == settings_doc.render(), (
        "docs/configuration.md is stale: run `python -m ragstream.settings_doc`"
    )


def test_check_mode_reports_a_stale_page(tmp_path: Path) -> None:
    page = tmp_path / "configuration.md"
    page.write_text("# stale\n", encoding="utf-8")
    assert settings_doc.main([str(page), "--check"]) == 1
    assert settings_doc.main([str(page)]) == 0
    assert settings_doc.main([str(page), "--check"]) == 0


def test_every_field_of_the_tree_has_exactly_one_row() -> None:
    names = [m.group(1) for m in ROW.finditer(settings_doc.render())]
    expected = {"RAGSTREAM_" + "__".join(p.upper() for p in path) for path in _leaf_paths(Settings)}
    assert len(names) == len(set(names))
    assert set(names) == expected


@pytest.mark.parametrize(
    ("variable", "value", "path", "expected"),
    [
        ("RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS", "kafka:9092", ("kafka", "bootstrap_servers"),
         "kafka:9092"),
        ("RAGSTREAM_POOLS__RETRIEVAL__MAX_BATCH", "7", ("pools", "retrieval", "max_batch"), 7),
        ("RAGSTREAM_GENERATION__LARGE__BASE_URL", "http://vllm:8000",
         ("generation", "large", "base_url"), "http://vllm:8000"),
        ("RAGSTREAM_WEBHOOKS__ALLOW_NETWORKS", '["10.0.0.0/8"]', ("webhooks", "allow_networks"),
         ["10.0.0.0/8"]),
        ("RAGSTREAM_EVIDENCE__TIER_MODE", "auto", ("evidence", "tier_mode"), "auto"),
    ],
)  # fmt: skip
def test_a_listed_variable_sets_its_field(
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    path: tuple[str, ...],
    expected: object,
) -> None:
    assert f"| `{variable}` |" in settings_doc.render()
    monkeypatch.setenv(variable, value)
    node: object = Settings()
    for part in path:
        node = getattr(node, part)
    assert node == expected


def test_rows_carry_type_constraints_defaults_and_comments() -> None:
    rows = {m.group(1): m.groups()[1:] for m in ROW.finditer(settings_doc.render())}
    kind, default, about = rows["RAGSTREAM_KAFKA__TOPIC_PREFIX"]
    assert (kind, default) == ("`str`", '`""`')
    assert about.startswith("Prefix of every topic name")  # its `#:` comment
    assert rows["RAGSTREAM_POOLS__INGEST__MAX_BATCH"][:2] == ("`int` ≥ 1", "`16`")  # pool's own
    assert rows["RAGSTREAM_EMBEDDING__BACKEND"][0] == '`"sentence-transformers"` \\| `"onnx"`'
    assert rows["RAGSTREAM_INFRA__LOCAL_DIR"][1] == '`"<checkout>/.local"`'


def test_defaults_do_not_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    before = settings_doc.render()
    monkeypatch.setenv("RAGSTREAM_KAFKA__BOOTSTRAP_SERVERS", "elsewhere:1")
    monkeypatch.setenv("RAGSTREAM_POOLS__RETRIEVAL__MAX_BATCH", "3")
    assert settings_doc.render() == before


class _Example(BaseModel):
    """An example section."""

    #: Seconds to wait,
    #: in two lines.
    wait_s: float = Field(default=1.5, gt=0)
    plain: str = "a|b"
    described: int = Field(default=3, description="From ``Field``.")


def test_table_of_a_model() -> None:
    rows = settings_doc._table(("example",), _Example, _Example())
    assert rows[2:] == [
        "| `RAGSTREAM_EXAMPLE__WAIT_S` | `float` > 0 | `1.5` | Seconds to wait, in two lines. |",
        '| `RAGSTREAM_EXAMPLE__PLAIN` | `str` | `"a|b"` |  |',
        "| `RAGSTREAM_EXAMPLE__DESCRIBED` | `int` | `3` | From `Field`. |",
    ]
