"""Value types of the write path, shared by parsers, chunking, embedding and indexing."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

import ragstream
from ragstream.errors import PermanentError
from ragstream.settings import IngestSettings

#: Version of what the parsers make of a file: bump it when a parser's output changes, so that
#: parses stored beside uploads (``ingest/uploads.py``) under the old one are not reused.
PARSE_FORMAT = 1

#: Metadata values kept on documents and chunks (JSON scalars).
MetaValue = str | int | float | bool | None


class ParseError(PermanentError):
    """A document cannot be parsed (unknown type, empty, corrupt); it fails alone."""

    code = "PARSE_FAILED"


@dataclass(frozen=True, slots=True)
class ParseOptions:
    """How files are parsed: the settings every parse of the write path uses.

    Attributes:
        json_text_field: the field holding each JSON/JSONL record's text
            (``ingest.json_text_field``).
    """

    json_text_field: str = "text"

    @classmethod
    def from_settings(cls, settings: IngestSettings) -> ParseOptions:
        """The options of ``settings`` (``settings.ingest``)."""
        return cls(json_text_field=settings.json_text_field)

    def fingerprint(self) -> str:
        """16 hex digits identifying these options and the parsers' version: a stored parse
        is reused only under the same fingerprint."""
        key = json.dumps(
            [self.json_text_field, PARSE_FORMAT, ragstream.__version__], ensure_ascii=False
        )
        return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Section:
    """A run of text under one heading path, e.g. ``("Tutorial", "Lists")``."""

    heading_path: tuple[str, ...]
    text: str


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A parsed document: its title, its sections in reading order, and metadata.

    ``doc_id`` is set only by formats whose records carry their own id (JSON/JSONL); the
    caller names every other document.

    ``error`` is set on a record that was rejected on its own (its id holds a lone surrogate):
    it has no sections, its ``doc_id`` is the id with the surrogate escaped (storable, so the
    failure can be recorded and read back), and it fails alone while the rest of its file is
    indexed.
    """

    title: str
    sections: tuple[Section, ...]
    content_type: str
    metadata: dict[str, MetaValue] = field(default_factory=dict)
    doc_id: str | None = None
    error: str | None = None

    @property
    def text(self) -> str:
        """All section text joined by blank lines (what the content hash covers)."""
        return "\n\n".join(s.text for s in self.sections)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk of a document, ready to embed and index.

    Attributes:
        chunk_no: position in the document, from 0.
        title: the heading path joined with `` > `` (empty when the document has none).
        text: the chunk's text (a span of one section).
        embed_text: what the embedding model sees (title line + text); its token count,
            special tokens included, never exceeds the model's maximum sequence length.
        token_count: tokens of ``embed_text`` as the model's tokenizer counts them.
    """

    chunk_no: int
    title: str
    text: str
    embed_text: str
    token_count: int
    metadata: dict[str, Any] = field(default_factory=dict)
