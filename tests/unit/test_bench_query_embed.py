"""``bench query-embed``: the per-batch-size pass embeds every question once per pass, in
batches of the size named, and the table shows each row."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from bench.query import query_embed
from ragstream.settings import Settings


class _Model:
    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: list[str]) -> np.ndarray[Any, Any]:
        self.calls.append(list(texts))
        return np.zeros((len(texts), 4), dtype=np.float32)


def test_each_batch_size_embeds_every_question_in_batches_of_that_size(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    models: list[_Model] = []

    def build_model(settings: Settings, num_threads: int = 0, role: str = "passage") -> _Model:
        assert role == "query"
        models.append(_Model())
        return models[-1]

    monkeypatch.setattr("ingest.factory.build_model", build_model)
    questions = [f"q{i}" for i in range(10)]
    rows = query_embed.per_batch_size(Settings(), questions, sizes=(1, 4), threads=(1,), repeat=2)
    assert [(r["threads"], r["batch"]) for r in rows] == [(1, 1), (1, 4)]
    assert all(r["wall_ms"] >= 0 and r["cpu_ms"] >= 0 for r in rows)
    calls = models[0].calls[1:]  # after the loading call
    ones, fours = calls[:30], calls[30:]  # an untimed pass and two timed, each size
    assert [len(c) for c in ones] == [1] * 30
    assert [len(c) for c in fours] == [4, 4, 2] * 3
    assert [q for c in fours[:3] for q in c] == questions


def test_render_has_a_row_per_measurement() -> None:
    payload = {
        "per_batch_size": [{"threads": 1, "batch": 1, "wall_ms": 5.8, "cpu_ms": 5.0}],
        "two_pools": [{"threads": 1, "per_s": 365.8, "cpu_ms": 5.02}],
        "repeated_question": {"miss_ms": 6.9, "hit_ms": 0.01},
    }
    sizes, pools, cache = query_embed.render(payload)
    assert (sizes.row_count, pools.row_count, cache.row_count) == (1, 1, 1)
