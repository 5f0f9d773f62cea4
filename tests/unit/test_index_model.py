"""The index records its embedding model; the query side refuses another one."""

from __future__ import annotations

from typing import Any

import pytest

from index.schema import EmbeddingModelMismatchError, check_index_model, index_model, mapping
from ragstream.errors import ConfigurationError
from ragstream.settings import ElasticsearchSettings


class _Body:
    def __init__(self, body: dict[str, Any]) -> None:
        self.body = body


class _Indices:
    def __init__(self, mappings: dict[str, Any]) -> None:
        self.mappings = mappings

    def get_mapping(self, index: str) -> _Body:
        return _Body({f"{index}-v3": {"mappings": self.mappings}})


class _Es:
    """Just enough of an Elasticsearch client: ``indices.get_mapping`` of one index."""

    def __init__(self, mappings: dict[str, Any]) -> None:
        self.indices = _Indices(mappings)


def _es(model_id: str | None, dims: int) -> Any:
    return _Es(mapping(dims, ElasticsearchSettings(), model_id)["mappings"])


def test_the_mapping_records_model_and_dims() -> None:
    body = mapping(384, ElasticsearchSettings(), "bge-small-en-v15-q@abc")
    assert body["mappings"]["_meta"] == {
        "embedding": {"model_id": "bge-small-en-v15-q@abc", "dims": 384}
    }
    assert body["mappings"]["properties"]["text_stemmed"]["analyzer"] == "whitespace"
    assert index_model(_es("m@1", 384), "chunks") == ("m@1", 384)


def test_same_model_passes() -> None:
    check_index_model(_es("m@1", 384), "chunks", "m@1", 384)


def test_another_model_id_is_refused_with_both_names() -> None:
    with pytest.raises(EmbeddingModelMismatchError) as info:
        check_index_model(_es("all-MiniLM-L6-v2@aa", 384), "chunks", "bge-small-en-v15-q@bb", 384)
    err = info.value
    assert isinstance(err, ConfigurationError)
    assert (err.index_model, err.model_id) == ("all-MiniLM-L6-v2@aa", "bge-small-en-v15-q@bb")
    assert "all-MiniLM-L6-v2@aa" in str(err) and "bge-small-en-v15-q@bb" in str(err)
    assert "index rebuild" in str(err)


def test_another_dimension_is_refused() -> None:
    with pytest.raises(EmbeddingModelMismatchError, match="768-d"):
        check_index_model(_es("m@1", 768), "chunks", "m@1", 384)


def test_an_index_from_before_the_record_is_checked_on_its_dimension() -> None:
    legacy = mapping(384, ElasticsearchSettings())["mappings"]
    del legacy["_meta"]
    check_index_model(_Es(legacy), "chunks", "any@1", 384)  # type: ignore[arg-type]
    with pytest.raises(EmbeddingModelMismatchError, match="unrecorded"):
        check_index_model(_Es(legacy), "chunks", "any@1", 768)  # type: ignore[arg-type]
    assert index_model(_Es(legacy), "chunks") == (None, 384)  # type: ignore[arg-type]
