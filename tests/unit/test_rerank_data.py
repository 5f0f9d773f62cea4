"""The reranker's training data and metrics, without torch or services (issue 50;
bench/rerank/data.py, bench/rerank/train.py), and the error its torch commands give without
the torch extra."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from bench.rerank import cli
from bench.rerank.data import (
    FOLDS,
    Chunk,
    Seed,
    _trimmed,
    fold_of,
    heading_of,
    howto_queries,
    mine_structure,
    page_key,
    table_rows,
)
from bench.rerank.train import first_positive_rank, ranking_metrics, training_pairs
from ragstream.errors import ConfigurationError


def test_heading_drops_numbering_and_keeps_the_last_part() -> None:
    assert (
        heading_of("Chapter 36. ECPG > 36.2. Managing Database Connections")
        == "Managing Database Connections"
    )
    assert heading_of("Appendix L. Acronyms") == "Acronyms"
    assert (
        heading_of("os — Miscellaneous operating system interfaces")
        == "os — Miscellaneous operating system interfaces"
    )


def test_howto_and_example_sentences() -> None:
    text = (
        "Tables hold rows. To remove a table, use the DROP TABLE command:\n"
        "DROP TABLE products;\n"
        "For example, to create a role that can log in:\n"
        "CREATE ROLE name LOGIN;"
    )
    found = howto_queries(text)
    assert ("howto", "How do I remove a table?") in found
    assert ("howto", "How do I create a role that can log in?") in found
    shown = howto_queries(
        "The example below lists the schemas:\n\nSELECT nspname FROM pg_namespace;"
    )
    assert shown == [("example", "The example below lists the schemas")]
    assert howto_queries("Nothing to do here. Go on, then.") == []


def test_table_rows_take_the_first_cell() -> None:
    text = "Function | Description\nabs ( numeric ) → numeric | Absolute value\n1.5 | 2\nplain line"
    assert table_rows(text) == ["Function", "abs ( numeric ) → numeric"]


def test_folds_are_by_page_and_stable() -> None:
    a = page_key("/usr/share/doc/python3.11/html/library/os.html")
    b = page_key("/usr/share/doc/python3.11/html/_sources/library/os.rst.txt")
    assert a == b == "python-3.11:library/os.html"
    assert fold_of(a) == fold_of(b) and 0 <= fold_of(a) < FOLDS
    assert page_key("tenant-doc-7") == "tenant-doc-7"
    assert len({fold_of(f"p{i}") for i in range(50)}) == FOLDS


def _chunk(i: int, doc: str, title: str, text: str) -> Chunk:
    return Chunk(f"{doc}#{i}", doc, i, title, text, page_key(doc))


def test_structure_mining_finds_each_source() -> None:
    doc = "/docs/guide.html"
    chunks = [
        _chunk(0, doc, "Guide > 1. Creating Tables", "To create a table, use CREATE TABLE."),
        _chunk(
            1, doc, "Guide > 2. Removing Tables", "Drops a table from the database entirely. | x"
        ),
    ]
    definitions = [
        {
            "doc_id": doc,
            "name": "DROP",
            "summary": "Drops a table from the database entirely.",
            "signature": "",
        }
    ]
    seeds = mine_structure(chunks, definitions, per_source=10)
    got = {(s.source, s.query, tuple(sorted(s.positives))) for s in seeds}
    assert (
        "structure.definition",
        "DROP: Drops a table from the database entirely.",
        (f"{doc}#1",),
    ) in got
    assert ("structure.heading", "Creating Tables", (f"{doc}#0",)) in got
    assert ("structure.howto", "How do I create a table?", (f"{doc}#0",)) in got
    assert ("structure.table", "Drops a table from the database entirely.", (f"{doc}#1",)) in got
    assert len(mine_structure(chunks, definitions, per_source=1)) == len({s.source for s in seeds})


def _page_in_fold(fold: int) -> str:
    return next(f"page-{i}" for i in range(1000) if fold_of(f"page-{i}") == fold)


def test_held_out_groups_keep_the_whole_fused_list_and_training_groups_are_trimmed() -> None:
    listed = [("a", 0), ("b", 1), ("c", 0), ("d", 0), ("e", 0)]
    held = _trimmed(Seed("q", "s", _page_in_fold(0), frozenset()), listed, 5, [], 2)
    assert (held.passages, held.labels, held.fused, held.fold) == (
        ["a", "b", "c", "d", "e"],
        [0, 1, 0, 0, 0],
        5,
        0,
    )
    other = [_chunk(9, "/d.html", "", "same page")]
    train = _trimmed(Seed("q", "s", _page_in_fold(1), frozenset()), listed, 5, other, 3)
    assert (train.passages, train.labels, train.fused) == (["b", "a", "same page"], [1, 0, 0], 0)
    pairs = training_pairs([held, train])
    assert sorted(pairs) == [("q", "a", 0.0), ("q", "b", 1.0), ("q", "same page", 0.0)]


def test_ranks_and_metrics_against_the_fused_order() -> None:
    assert first_positive_rank([0, 0, 1]) == 3
    assert first_positive_rank([0, 0, 1], [0.1, 0.2, 0.9]) == 1
    assert first_positive_rank([0, 0]) is None
    held = _trimmed(
        Seed("q", "questions.x", _page_in_fold(0), frozenset()), [("a", 0), ("b", 1)], 2, [], 7
    )
    metrics = ranking_metrics([held], lambda pairs: [1.0 if p == "b" else 0.0 for _, p in pairs])
    assert metrics["all"] == {
        "n": 1,
        "fused": {"hit@1": 0.0, "mrr": 0.5},
        "model": {"hit@1": 1.0, "mrr": 1.0},
    }


def test_torch_commands_name_the_training_venv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("ragstream.extras.missing_modules", lambda modules: ["torch"])
    with pytest.raises(ConfigurationError, match=r"make train-venv"):
        cli.require_training_stack("train")
    result = CliRunner().invoke(cli.rerank_app, ["train", "--tenant", "t"])
    assert isinstance(result.exception, ConfigurationError)
    assert "make train-venv" in str(result.exception)
