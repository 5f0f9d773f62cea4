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
