"""The reranker's ONNX export matches torch (issue 50; bench/rerank/export.py).

Needs the torch extra, which the default install leaves out: run it with the training venv
(``make train-venv``; ``.local/train-venv/bin/pytest tests/unit/test_rerank_export.py``). In the
lean venv it is skipped, saying so; the error the CLI gives there is tested in
tests/unit/test_rerank_data.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragstream.extras import TORCH_MODULES, missing_modules

pytestmark = pytest.mark.skipif(
    bool(missing_modules(TORCH_MODULES)),
    reason="needs the torch extra (make train-venv; .local/train-venv/bin/pytest)",
)

PAIRS = [
    ("How do I split a string on whitespace?", "str.split(sep=None, maxsplit=-1)\nReturn a list."),
    ("What does VACUUM do?", "VACUUM reclaims storage occupied by dead tuples. " * 30),
    ("checkpoint_timeout", "Maximum time between automatic WAL checkpoints."),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, Path]:
    import torch

    from bench.rerank.export import Manifest, export_cross_encoder, load_cross_encoder

    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = load_cross_encoder(max_length=128)
    with torch.no_grad():  # a head with a spread, so that the comparison means something
        model.model.classifier.weight.mul_(40.0)
    out = tmp_path_factory.mktemp("rerank") / "m"
    manifest = Manifest(name="test", sets=["bench/evaluation/questions.dev.jsonl"])
    export_cross_encoder(model, out, manifest, keep_fp32=True)
    return model, out


def test_directory_holds_the_format(exported: tuple[object, Path]) -> None:
    import onnxruntime as ort

    from bench.rerank.export import FORMAT, INPUT_NAMES, read_manifest

    _, out = exported
    names = sorted(p.name for p in out.iterdir())
    assert names == ["manifest.json", "model.fp32.onnx", "model.onnx", "tokenizer.json"]
    session = ort.InferenceSession(str(out / "model.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == list(INPUT_NAMES)
    (output,) = session.get_outputs()
    assert output.name == "logits"
    assert output.shape[1] == 1 and isinstance(output.shape[0], str)  # [batch, 1], batch dynamic
    assert all(isinstance(i.shape[1], str) for i in session.get_inputs())  # sequence dynamic
    manifest = read_manifest(out)
    assert manifest.format == FORMAT and manifest.max_length == 128 and manifest.created
    assert manifest.onnx_check["max_abs_logit_gap"] >= 0.0
    int8 = [
        i
        for i in __import__("onnx").load(str(out / "model.onnx")).graph.node
        if "Integer" in i.op_type
    ]
    assert int8, "no integer ops: the graph was not quantised"


def test_onnx_logits_match_torch(exported: tuple[object, Path]) -> None:
    from bench.rerank.export import OnnxScorer, _torch_logits

    model, out = exported
    want = _torch_logits(model, PAIRS)  # type: ignore[arg-type]
    fp32 = OnnxScorer(out, filename="model.fp32.onnx")(PAIRS)
    got = OnnxScorer(out)(PAIRS)
    spread = max(want) - min(want)
    print(f"torch {want}\nfp32  {fp32}\nint8  {got}\nspread {spread:.3f}")
    assert spread > 0.5, "the probe pairs do not tell the scores apart"
    # the graph: the fp32 export is torch's function
    assert fp32 == pytest.approx(want, abs=1e-4 * max(1.0, spread))
    # int8 weights (dynamic quantisation): within a quarter of the logits' spread
    assert max(abs(a - b) for a, b in zip(want, got, strict=True)) < 0.25 * spread
    # one pair alone (batch 1, its own length) scores as in the padded batch: exactly in fp32;
    # in int8 up to the activation ranges, which dynamic quantisation takes per batch
    alone = OnnxScorer(out, filename="model.fp32.onnx")(PAIRS[1:2])[0]
    assert alone == pytest.approx(fp32[1], abs=1e-4)
    assert OnnxScorer(out)(PAIRS[1:2])[0] == pytest.approx(got[1], abs=0.25 * spread)


def test_manifest_sets_are_kept(exported: tuple[object, Path]) -> None:
    from bench.rerank.export import read_manifest

    _, out = exported
    assert read_manifest(out).sets == ["bench/evaluation/questions.dev.jsonl"]
