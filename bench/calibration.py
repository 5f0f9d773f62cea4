"""The machine's calibration: two fixed workloads whose rates let two machines' figures be
compared as ratios (issue 53, item 3).

A figure divided by the calibration of the run that measured it (``rate / cpu_loop_per_s``,
``chunks_per_s / encoder_texts_per_s``) is a property of the code more than of the host:

- ``cpu_loop_per_s``: :func:`cpu_loop_rate`, iterations per second of a fixed pure-Python loop
  on one core (the interpreter's speed: what the pools' Python work scales with);
- ``encoder_texts_per_s``: :func:`encoder_rate`, chunk-size texts per second of the configured
  embedding model (``embedding.backend``, built as the ingest path builds it by
  :func:`ingest.factory.build_model`) on a fixed set of texts (:func:`fixed_texts`): what the
  write path's throughput is bounded by (``bench ingest`` (a) measures the same on the real
  sample's chunks).

``ragstream bench calibrate`` writes both as JSON; ``make bench`` runs it first and ``bench
summary`` copies it into ``summary.json`` as ``calibration``.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ragstream.settings import Settings

#: Iterations of :func:`cpu_loop` per timing (about 0.1 s on a 2020s x86 core under CPython 3.11).
CPU_LOOP_ITERATIONS = 1_000_000
#: Texts of :func:`fixed_texts` and the timings each rate is the best of.
N_TEXTS = 32
REPEATS = 3
#: Common English words the fixed texts are drawn from, each one word piece in BERT-style
#: vocabularies: a text of ``n`` words is ``n + 2`` tokens (``[CLS]``, ``[SEP]``) for the default
#: bge-small-en-v1.5 and for all-MiniLM-L6-v2.
_WORD_LINES = (
    "the of and to in is that for it as with was on be by this are from at or an which",
    "have not can all one if will more when there use each other data file table server",
    "value name list time new query index function type system user first set number",
    "string return default option command line error page key row column order result",
    "database module class method object call read write open close start stop run test",
    "case form part point group field state change mode level size space text word block",
)
WORDS = tuple(word for line in _WORD_LINES for word in line.split())


def cpu_loop(iterations: int = CPU_LOOP_ITERATIONS) -> int:
    """The fixed CPU workload: ``x = (x * 31 + i) & 0xFFFFFFFF`` for ``i`` in
    ``range(iterations)``, from ``x = 0`` (a multiply, an add and a mask per iteration: pure
    interpreter work, no allocation beyond small ints, no memory traffic). Returns ``x``."""
    x = 0
    for i in range(iterations):
        x = (x * 31 + i) & 0xFFFFFFFF
    return x


def best_rate(work: Callable[[], object], units: int, repeats: int = REPEATS) -> float:
    """``units`` per second of the fastest of ``repeats`` timed calls of ``work()``
    (:func:`time.perf_counter`; the best, not the mean: the least disturbed by other load)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - t0)
    return units / best


def cpu_loop_rate(iterations: int = CPU_LOOP_ITERATIONS, repeats: int = REPEATS) -> float:
    """Iterations per second of :func:`cpu_loop`, best of ``repeats``, one core."""
    return best_rate(lambda: cpu_loop(iterations), iterations, repeats)


def fixed_texts(n_texts: int = N_TEXTS, words_per_text: int = 192) -> list[str]:
    """``n_texts`` texts of ``words_per_text`` words of :data:`WORDS`, the same on every
    machine (``random.Random(i)`` picks text ``i``'s words). 192 words are 194 tokens for the
    default model, under the chunk cap of 256 (``chunking.chunk_tokens``); every text has the
    same length, so no batch order pads."""
    return [" ".join(random.Random(i).choices(WORDS, k=words_per_text)) for i in range(n_texts)]


def encoder_rate(settings: Settings, texts: list[str], repeats: int = REPEATS) -> float:
    """Texts per second of the configured embedding model encoding ``texts`` in one call
    (batched by ``embedding.batch_size``, the runtime's default threads, no cache), best of
    ``repeats``, after loading the model and a warm-up call on 8 texts (loading excluded).

    Raises:
        ConfigurationError: the model cannot be built (see :func:`ingest.factory.build_model`).
    """
    from ingest.factory import build_model

    model = build_model(settings)
    model.warm_up()
    model.embed(texts[:8])
    return best_rate(lambda: model.embed(texts), len(texts), repeats)


def measure(settings: Settings, *, encoder: bool = True) -> dict[str, Any]:
    """The calibration of this machine now: ``{"cpu_loop_per_s"`` (iterations/s),
    ``"encoder_texts_per_s"`` (texts/s; ``None`` with ``encoder=False``), ``"encoder"`` (the
    backend and model), ``"texts"``, ``"words_per_text"``, ``"load_avg_1m"`` (the machine's
    1-minute load average before: how busy it was), ``"at"`` (UTC)``}``, rates rounded to 3
    significant figures."""
    load = round(os.getloadavg()[0], 2)
    texts = fixed_texts()
    emb = settings.embedding
    name = emb.onnx_model if emb.backend == "onnx" else (emb.model_path or "all-MiniLM-L6-v2")
    return {
        "cpu_loop_per_s": float(f"{cpu_loop_rate():.3g}"),
        "encoder_texts_per_s": float(f"{encoder_rate(settings, texts):.3g}") if encoder else None,
        "encoder": f"{emb.backend}:{name}",
        "texts": len(texts),
        "words_per_text": len(texts[0].split()),
        "load_avg_1m": load,
        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def read(path: Path) -> dict[str, Any] | None:
    """A calibration written by ``ragstream bench calibrate`` (or kept inside another result
    under ``calibration``), or ``None`` when ``path`` does not exist or holds none."""
    if not path.exists():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        return None
    found = data.get("calibration", data)
    return found if isinstance(found, dict) and "cpu_loop_per_s" in found else None
