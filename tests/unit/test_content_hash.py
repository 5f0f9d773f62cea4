"""What a document's content hash covers: a change there re-indexes the document."""

from __future__ import annotations

from ingest.ops import IngestOp
from ingest.pipeline import content_hash
from ingest.types import ParsedDocument, Section

OP = IngestOp(tenant="t", doc_id="d", source="s.html")


def _doc(*sections: Section, title: str = "Page") -> ParsedDocument:
    return ParsedDocument(title=title, sections=sections, content_type="html")


def test_a_renamed_heading_changes_the_hash() -> None:
    # Every chunk's title is its heading path: a heading renamed over unchanged text must
    # re-index the document, or its chunks keep the old titles.
    before = _doc(Section(("EXPLAIN",), "EXPLAIN — show the plan"))
    after = _doc(Section(("EXPLAIN — show the plan",), "EXPLAIN — show the plan"))
    assert before.text == after.text
    assert content_hash(before, OP) != content_hash(after, OP)


def test_the_same_document_has_the_same_hash() -> None:
    one = _doc(Section(("A",), "x"), Section(("A", "B"), "y"))
    two = _doc(Section(("A",), "x"), Section(("A", "B"), "y"))
    assert content_hash(one, OP) == content_hash(two, OP)
    assert content_hash(one, OP) != content_hash(_doc(Section(("A",), "x")), OP)


def test_new_chunking_rules_or_sizes_change_the_hash() -> None:
    one = _doc(Section(("A",), "x"))
    assert content_hash(one, OP, "2:256:32:32") != content_hash(one, OP, "1:256:32:32")
    assert content_hash(one, OP, "2:256:32:32") != content_hash(one, OP, "2:128:32:32")


def test_a_chunkers_rules_name_its_version_and_sizes() -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    from ingest.chunking import CHUNKING_RULES, Chunker
    from ragstream.settings import ChunkingSettings

    tok = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    chunker = Chunker(tok, ChunkingSettings(chunk_tokens=128, overlap_tokens=16))
    assert chunker.rules == f"{CHUNKING_RULES}:128:16:32"
