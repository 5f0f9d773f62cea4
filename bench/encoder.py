"""``ragstream bench encoder``: the embedding model's rate per token length, and what batching
by tokens saves on the write path's real mix of chunks and definition entries (issue 53).

Two measurements over a sample of the manuals (``--docs`` pages spread evenly over both,
:func:`bench.ingest.even_sample`), parsed and chunked as the ingest path does:

(1) **rate per length bucket**: for each bucket of ``N`` tokens, ``--texts`` of the sample's
    chunk texts cut to ``N`` tokens (special tokens included) are embedded in one call; texts
    and tokens a second, and milliseconds a text. A text of ``N`` tokens costs about ``N``
    tokens' worth when its batch is padded to its own length.
(2) **the write path's mix**: the sample's chunk texts and definition entry texts
    (:func:`ingest.pipeline.definition_embed_text`) embedded together, as one ingest batch
    embeds them, in two batch orders: by **characters** (the order before issue 53: each batch of
    ``embedding.batch_size`` texts in character order, padded to its longest text) and by
    **tokens** (:meth:`ingest.onnx_embedding.OnnxEmbedder.embed`). Padded tokens of each order
    are counted exactly; seconds are the best of ``--repeat`` interleaved runs.

Needs the ONNX backend (``embedding.backend = "onnx"``, the default).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ragstream.settings import PROJECT_ROOT, Settings

console = Console(width=160)
#: Token lengths of the buckets of (1), special tokens included.
BUCKETS = (16, 32, 64, 128, 256)


@dataclass
class Bucket:
    """(1): one length bucket."""

    tokens: int
    texts: int
    seconds: float
    texts_per_s: float
    tokens_per_s: float
    ms_per_text: float


@dataclass
class MixOrder:
    """(2): one batch order over the chunk + entry mix."""

    order: str
    padded_tokens: int
    seconds: float
    texts_per_s: float


def _padded(lengths: list[int], order: list[int], batch_size: int) -> int:
    """Tokens a forward pass sees when ``order`` is cut into batches of ``batch_size``, each
    padded to its longest text."""
    total = 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        total += max(lengths[i] for i in idx) * len(idx)
    return total


def run_encoder_bench(
    settings: Settings, *, docs: int = 60, texts: int = 128, repeat: int = 2
) -> dict[str, Any]:
    """Measure (1) and (2) (see the module docstring).

    Args:
        settings: the configuration (the embedding model, its batch size, the chunking).
        docs: pages in the sample, spread evenly over both manuals.
        texts: texts per bucket in (1).
        repeat: runs of each order in (2); the best counts.

    Returns:
        ``{"model", "batch_size", "sample": {pages, chunks, entries, chunk_tokens_mean,
        entry_tokens_mean}, "buckets": [Bucket...], "mix": [MixOrder...], "mix_saving"}``.

    Raises:
        RuntimeError: the manuals are not installed, or the backend is not ONNX.
    """
    from bench.ingest import corpus_pages, even_sample
    from ingest.factory import build_chunker, build_model
    from ingest.onnx_embedding import OnnxEmbedder
    from ingest.parsers import parse
    from ingest.pipeline import definition_embed_text

    model = build_model(settings)
    if not isinstance(model, OnnxEmbedder):
        raise RuntimeError("bench encoder needs embedding.backend = 'onnx'")
    pages = [p for _, p in even_sample(corpus_pages(), docs)]
    if not pages:
        raise RuntimeError("the manuals are not installed (make docs)")
    chunker = build_chunker(settings)
    chunks: list[str] = []
    entries: list[str] = []
    for page in pages:
        for doc in parse(page.read_bytes(), filename=str(page)):
            chunks += [c.embed_text for c in chunker.chunk(doc)]
            entries += [definition_embed_text(e) for e in doc.definitions]
    tok = model.tokenizer()
    model.embed(chunks[:64])  # load and warm the kernels

    buckets: list[Bucket] = []
    ids = [e.ids for e in tok.encode_batch(chunks[:texts])]
    for n in BUCKETS:
        cut = [tok.decode(i[1 : n - 1]) for i in ids]
        t0 = time.perf_counter()
        model.embed(cut)
        s = time.perf_counter() - t0
        lengths = [len(e.ids) for e in model._unpadded.encode_batch(cut)]  # type: ignore[union-attr]
        buckets.append(
            Bucket(n, len(cut), round(s, 3), round(len(cut) / s, 1), round(sum(lengths) / s),
                   round(1000 * s / len(cut), 2))
        )  # fmt: skip

    mix = chunks + entries
    lengths = [len(e.ids) for e in model._unpadded.encode_batch(mix)]  # type: ignore[union-attr]
    by_chars = sorted(range(len(mix)), key=lambda i: len(mix[i]))
    by_tokens = sorted(range(len(mix)), key=lengths.__getitem__)
    bs = model.batch_size
    best = {"characters": float("inf"), "tokens": float("inf")}
    for _ in range(repeat):
        t0 = time.perf_counter()
        for start in range(0, len(by_chars), bs):  # one call per character-ordered batch
            model.embed([mix[i] for i in by_chars[start : start + bs]])
        best["characters"] = min(best["characters"], time.perf_counter() - t0)
        t0 = time.perf_counter()
        model.embed(mix)
        best["tokens"] = min(best["tokens"], time.perf_counter() - t0)
    orders = [
        MixOrder(name, _padded(lengths, order, bs), round(best[name], 2),
                 round(len(mix) / best[name], 1))
        for name, order in (("characters", by_chars), ("tokens", by_tokens))
    ]  # fmt: skip
    chunk_tokens = lengths[: len(chunks)]
    entry_tokens = lengths[len(chunks) :]
    return {
        "model": model.model_id,
        "batch_size": bs,
        "sample": {
            "pages": len(pages),
            "chunks": len(chunks),
            "entries": len(entries),
            "chunk_tokens_mean": round(sum(chunk_tokens) / max(1, len(chunk_tokens)), 1),
            "entry_tokens_mean": round(sum(entry_tokens) / max(1, len(entry_tokens)), 1),
            "real_tokens": sum(lengths),
        },
        "buckets": [asdict(b) for b in buckets],
        "mix": [asdict(o) for o in orders],
        "mix_saving": round(1 - best["tokens"] / best["characters"], 3),
    }


def print_report(result: dict[str, Any]) -> None:
    """The two tables of :func:`run_encoder_bench`'s result."""
    s = result["sample"]
    console.print(
        f"{result['model']}, batch {result['batch_size']}: {s['pages']} pages, {s['chunks']} "
        f"chunks (mean {s['chunk_tokens_mean']} tokens), {s['entries']} entries (mean "
        f"{s['entry_tokens_mean']} tokens)"
    )
    table = Table("tokens", "texts", "s", "texts/s", "tokens/s", "ms/text")
    for b in result["buckets"]:
        table.add_row(*(str(b[k]) for k in ("tokens", "texts", "seconds", "texts_per_s",
                                            "tokens_per_s", "ms_per_text")))  # fmt: skip
    console.print(table)
    table = Table("batch order", "padded tokens", "s", "texts/s")
    for o in result["mix"]:
        table.add_row(o["order"], str(o["padded_tokens"]), str(o["seconds"]), str(o["texts_per_s"]))
    console.print(table)
    console.print(f"by tokens instead of characters: {100 * result['mix_saving']:.1f}% less time")


def encoder_command(docs: int, texts: int, repeat: int, out: Path | None) -> None:
    """``ragstream bench encoder``: run, print, write JSON (default
    ``.local/bench/encoder.json``)."""
    result = run_encoder_bench(Settings(), docs=docs, texts=texts, repeat=repeat)
    print_report(result)
    path = out or PROJECT_ROOT / ".local" / "bench" / "encoder.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    console.print(f"wrote {path}")
