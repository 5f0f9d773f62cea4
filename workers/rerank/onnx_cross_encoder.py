"""A cross-encoder reranker served from ONNX with onnxruntime and ``tokenizers``: no torch.

:class:`OnnxCrossEncoder` runs a BERT-style cross-encoder exported to ONNX (inputs
``input_ids``, ``attention_mask``, ``token_type_ids``: int64 ``(batch, seq)``; output
``logits``: float ``(batch, 1)``), the format ``ragstream rerank train`` writes: a model
directory holding ``model.onnx`` (int8, onnxruntime's dynamic quantisation),
``tokenizer.json`` (the Hugging Face fast tokenizer of the base model, MiniLM / BERT uncased)
and ``manifest.json`` (what the model was trained on). Each ``(question, passage)`` pair is
encoded as ``[CLS] question [SEP] passage [SEP]`` and truncated to ``max_length`` tokens by
cutting the passage (the question is kept); the score is ``sigmoid(logit)`` in ``[0, 1]``, as
sentence-transformers' ``CrossEncoder`` scores a one-label model (Nogueira & Cho 2019,
"Passage Re-ranking with BERT").
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt
import structlog

from ragstream.errors import ConfigurationError

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

__all__ = ["MANIFEST_FILE", "MODEL_FILE", "TOKENIZER_FILE", "OnnxCrossEncoder", "sigmoid"]

log = structlog.get_logger(__name__)

#: File names inside a model directory.
MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"
MANIFEST_FILE = "manifest.json"
#: The on-disk format this backend reads (``bench/rerank/export.py`` writes it; the manifest's
#: ``format``).
FORMAT = "ragstream-rerank-onnx/1"
#: BERT's padding token.
PAD_TOKEN = "[PAD]"  # noqa: S105 - a vocabulary token, not a secret
#: The inputs a BERT cross-encoder export takes (``token_type_ids`` only when the graph has it).
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


class Session(Protocol):
    """The part of ``onnxruntime.InferenceSession`` the reranker uses."""

    def get_inputs(self) -> Sequence[Any]: ...
    def get_outputs(self) -> Sequence[Any]: ...
    def run(self, output_names: Any, input_feed: dict[str, Any]) -> Sequence[Any]: ...


def sigmoid(logits: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """``1 / (1 + exp(-x))`` element-wise, float64, without overflow for large ``|x|``."""
    x = np.asarray(logits, dtype=np.float64)
    return np.asarray(
        np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), 1 - 1 / (1 + np.exp(-np.abs(x))))
    )


class OnnxCrossEncoder:
    """A :class:`workers.rerank.backends.Reranker` running an ONNX cross-encoder on the CPU.

    Args:
        model_dir: the model directory (``model.onnx``, ``tokenizer.json``, optional
            ``manifest.json``).
        batch_size: pairs per session run; pairs are sorted by length first so a sub-batch
            pads to similar lengths.
        max_length: tokens per pair, special tokens included; a longer pair keeps the whole
            question and loses the end of its passage (a question longer than half of it is
            cut too, so some passage is always read).
        num_threads: onnxruntime intra-op threads (``0``: onnxruntime's default, one per core);
            1 by default, one per pool process, because the pools share the cores.

    Attributes:
        model_calls: :meth:`score` calls with pairs.
        session_runs: onnxruntime runs (one per sub-batch of ``batch_size`` pairs).
        pairs_scored: pairs scored so far.
        manifest: the model's ``manifest.json`` (empty when it has none).
    """

    def __init__(
        self,
        model_dir: str | Path,
        *,
        batch_size: int = 32,
        max_length: int = 256,
        num_threads: int = 1,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if max_length < 8:
            raise ValueError(f"max_length must be >= 8, got {max_length}")
        if num_threads < 0:
            raise ValueError(f"num_threads must be >= 0, got {num_threads}")
        self.model_dir = Path(model_dir)
        self.batch_size = batch_size
        self.max_length = max_length
        self.num_threads = num_threads
        self.model_calls = 0
        self.session_runs = 0
        self.pairs_scored = 0
        self.manifest: dict[str, Any] = {}
        self._session: Session | None = None
        self._tokenizer: Tokenizer | None = None
        self._question_tokenizer: Tokenizer | None = None
        self._inputs: tuple[str, ...] = ()
        self._load_lock = threading.Lock()
        self._run_lock = threading.Lock()

    @property
    def model_name(self) -> str:
        """The model directory's name (the name under ``<infra.local_dir>/models/rerank/``)."""
        return self.model_dir.name

    def files(self) -> tuple[Path, Path]:
        """``(model.onnx, tokenizer.json)`` of the model directory.

        Raises:
            ConfigurationError: the directory or one of the files is missing.
        """
        if not self.model_dir.is_dir():
            raise ConfigurationError(
                f"rerank model directory {self.model_dir} does not exist (train one with "
                "`ragstream rerank train`, or set rerank.model to a directory holding "
                f"{MODEL_FILE} and {TOKENIZER_FILE})"
            )
        model, tok = self.model_dir / MODEL_FILE, self.model_dir / TOKENIZER_FILE
        missing = [p.name for p in (model, tok) if not p.is_file()]
        if missing:
            raise ConfigurationError(
                f"rerank model directory {self.model_dir} lacks {', '.join(missing)}"
            )
        return model, tok

    def warm_up(self) -> None:
        """Load the manifest, the tokenizer and the ONNX session (once; thread-safe).

        Raises:
            ConfigurationError: files missing or unloadable, a malformed ``manifest.json``, or
                a graph that does not take ``input_ids`` and ``attention_mask`` or does not
                give one logit a pair.
        """
        if self._session is not None:
            return
        with self._load_lock:
            if self._session is not None:
                return
            import onnxruntime as ort
            from tokenizers import Tokenizer

            model_file, tok_file = self.files()
            started = time.perf_counter()
            self.manifest = _manifest(self.model_dir / MANIFEST_FILE)
            try:
                tokenizer = Tokenizer.from_file(str(tok_file))
            except Exception as exc:  # tokenizers raises untyped errors
                raise ConfigurationError(f"cannot load tokenizer {tok_file}: {exc}") from exc
            options = ort.SessionOptions()
            if self.num_threads:
                options.intra_op_num_threads = self.num_threads
                options.inter_op_num_threads = 1
            try:
                session = ort.InferenceSession(
                    str(model_file), options, providers=["CPUExecutionProvider"]
                )
            except Exception as exc:  # onnxruntime raises its own untyped errors
                raise ConfigurationError(f"cannot load ONNX model {model_file}: {exc}") from exc
            self.attach(session, tokenizer)
            log.info(
                "rerank_model_loaded",
                backend="onnx",
                model=str(self.model_dir),
                threads=self.num_threads or "default",
                trained=self.manifest.get("trained"),
                load_s=round(time.perf_counter() - started, 2),
            )

    def attach(self, session: Session, tokenizer: Tokenizer) -> None:
        """Use ``session`` and ``tokenizer`` (what :meth:`warm_up` loads; tests pass fakes).

        The tokenizer's own truncation and padding are replaced: pairs are truncated to
        ``max_length`` by cutting the passage, and padded to the longest pair of a sub-batch.

        Raises:
            ConfigurationError: the graph lacks ``input_ids`` or ``attention_mask``, or its
                output is not one logit a pair.
        """
        names = tuple(i.name for i in session.get_inputs())
        if not {"input_ids", "attention_mask"} <= set(names):
            raise ConfigurationError(
                f"rerank model {self.model_dir} takes {list(names)}; a cross-encoder export "
                "takes input_ids, attention_mask (and token_type_ids)"
            )
        unknown = [n for n in names if n not in INPUTS]
        if unknown:
            raise ConfigurationError(
                f"rerank model {self.model_dir} needs unknown inputs {unknown}"
            )
        outputs = session.get_outputs()
        width = outputs[0].shape[-1] if outputs and outputs[0].shape else None
        if not outputs or (isinstance(width, int) and width != 1):
            raise ConfigurationError(
                f"rerank model {self.model_dir} gives {width} logits a pair, need 1"
            )
        from tokenizers import Tokenizer

        question_tokenizer = Tokenizer.from_str(tokenizer.to_str())
        question_tokenizer.no_truncation()
        question_tokenizer.no_padding()
        tokenizer.no_truncation()
        tokenizer.enable_truncation(max_length=self.max_length, strategy="only_second")
        pad_id = tokenizer.token_to_id(PAD_TOKEN)
        tokenizer.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token=PAD_TOKEN)
        self._inputs = names
        self._question_tokenizer = question_tokenizer
        self._tokenizer = tokenizer
        self._session = session

    def score(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """``sigmoid(logit)`` of every ``(question, passage)`` pair, in ``[0, 1]``, input order.

        One call for the whole pool batch: pairs sorted by length, ``batch_size`` a session
        run.

        Raises:
            ConfigurationError: the model cannot be loaded (first call without ``warm_up``).
        """
        if not pairs:
            return []
        self.warm_up()
        order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]) + len(pairs[i][1]))
        out = np.empty(len(pairs), dtype=np.float64)
        with self._run_lock:
            self.model_calls += 1
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                out[idx] = sigmoid(self._logits([pairs[i] for i in idx]))
                self.session_runs += 1
            self.pairs_scored += len(pairs)
        return [float(s) for s in out]

    def encode(self, pairs: Sequence[tuple[str, str]]) -> list[Encoding]:
        """The padded encodings of ``pairs`` (one sub-batch), each at most ``max_length``."""
        assert self._tokenizer is not None and self._question_tokenizer is not None
        cap = max(1, self.max_length // 2)
        # only_second cannot truncate a pair whose question alone fills max_length: such a
        # question is cut to half of it first (its word pieces, decoded back to text).
        cut: dict[str, str] = {}
        for q in {q for q, _ in pairs}:
            ids = self._question_tokenizer.encode(q, add_special_tokens=False).ids
            cut[q] = self._tokenizer.decode(ids[:cap]) if len(ids) > cap else q
        return self._tokenizer.encode_batch([(cut[q], p) for q, p in pairs])

    def _logits(self, pairs: Sequence[tuple[str, str]]) -> npt.NDArray[Any]:
        assert self._session is not None
        encodings = self.encode(pairs)
        columns = {
            "input_ids": [e.ids for e in encodings],
            "attention_mask": [e.attention_mask for e in encodings],
            "token_type_ids": [e.type_ids for e in encodings],
        }
        feeds = {name: np.asarray(columns[name], dtype=np.int64) for name in self._inputs}
        logits = np.asarray(self._session.run(None, feeds)[0])
        if logits.size != len(pairs):
            raise ConfigurationError(
                f"rerank model {self.model_dir} gave {logits.shape} logits for {len(pairs)} pairs"
            )
        return logits.reshape(len(pairs))


def _manifest(path: Path) -> dict[str, Any]:
    """The model's manifest (``{}`` when the directory has none).

    Raises:
        ConfigurationError: it is not a JSON object.
    """
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigurationError(f"malformed rerank model manifest {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigurationError(f"malformed rerank model manifest {path}: not a JSON object")
    if data.get("format", FORMAT) != FORMAT:
        raise ConfigurationError(
            f"rerank model manifest {path} has format {data['format']!r}; this backend reads "
            f"{FORMAT!r}"
        )
    return data
