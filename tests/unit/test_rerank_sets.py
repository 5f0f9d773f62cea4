"""The reranker never trains on a judging set before it has been judged (issue 50).

``bench/evaluation/judged.json`` says which sets are dev sets and which blind sets were judged
when; the training code's list (:data:`bench.rerank.data.TRAINING_SETS`), the committed example
manifest and any model manifest present under ``.local/models/rerank/`` may name only sets that
were judged by the day they were made.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from bench.rerank.data import TRAINING_SETS
from bench.rerank.judged import (
    REGISTRY,
    SetEntry,
    check_trainable,
    load_registry,
    set_key,
    trainable,
)
from ragstream.errors import ConfigurationError
from ragstream.settings import PROJECT_ROOT

EXAMPLE = PROJECT_ROOT / "bench" / "rerank" / "manifest.example.json"


def _manifests() -> list[Path]:
    found = sorted((PROJECT_ROOT / ".local" / "models" / "rerank").glob("*/manifest.json"))
    return [EXAMPLE, *found]


def test_training_sets_are_judged() -> None:
    check_trainable(list(TRAINING_SETS), load_registry())


@pytest.mark.parametrize("path", _manifests(), ids=lambda p: str(p.relative_to(PROJECT_ROOT)))
def test_manifest_names_only_judged_sets(path: Path) -> None:
    manifest = json.loads(path.read_text())
    made = dt.date.fromisoformat(manifest["created"][:10]) if manifest.get("created") else None
    bad = [s for s in manifest["sets"] if not trainable(s, load_registry(), on=made)]
    assert not bad, f"{path} was trained on sets not judged by {made}: {bad}"


def test_every_question_file_is_registered() -> None:
    registry = load_registry()
    files = sorted((PROJECT_ROOT / "bench" / "evaluation").glob("questions*.jsonl"))
    assert files
    missing = [set_key(f) for f in files if set_key(f) not in registry]
    assert not missing, f"add these to {REGISTRY.name} (blind sets with judged null): {missing}"


def test_unjudged_blind_set_is_refused() -> None:
    # A blind set is registered with judged null when it is written (as the 2026-12-07 set was
    # until its blind run): never trainable until its date is filled in.
    key = "bench/evaluation/questions.blind-2099-01-01.jsonl"
    registry = {**load_registry(), key: SetEntry(key, "blind", None)}
    assert not trainable(key, registry)
    with pytest.raises(ConfigurationError, match=r"blind-2099-01-01"):
        check_trainable([*TRAINING_SETS, key], registry)


def test_judged_date_is_a_gate_and_unknown_sets_are_refused() -> None:
    registry = {"b": SetEntry("b", "blind", dt.date(2026, 12, 5)), "d": SetEntry("d", "dev", None)}
    assert trainable("d", registry)
    assert trainable("b", registry, on=dt.date(2026, 12, 5))
    assert not trainable("b", registry, on=dt.date(2026, 12, 4))
    assert not trainable("never-registered", registry)


def test_malformed_registry_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "judged.json"
    bad.write_text(json.dumps({"sets": {"x.jsonl": {"role": "blind", "judged": "soon"}}}))
    with pytest.raises(ConfigurationError, match=r"x.jsonl: judged 'soon' is no date"):
        load_registry(bad)
    bad.write_text(json.dumps({"sets": {"x.jsonl": {"role": "test"}}}))
    with pytest.raises(ConfigurationError, match=r"role 'test'"):
        load_registry(bad)
