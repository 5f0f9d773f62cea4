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
PARSE_FORMAT = 3  # 3: warnings and surrogates (a record's lone surrogates replaced)

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
class Definition:
    """One documented name of a document: an entry of its definition index.

    Attributes:
        name: the name as the document writes it (``str.split``, ``shared_buffers``,
            ``CREATE INDEX``, ``CONCURRENTLY``, ``-m``, ``PYTHONPATH``).
        kind: what the markup says it is: a Sphinx object type (``function``, ``method``,
            ``class``, ``data``, ``attribute``, ``exception``, ``option``, ``envvar``...),
            ``setting``/``option``/``term`` (a DocBook ``varlistentry``), ``command`` (a
            reference page), ``function`` (a row of a function table) or ``term`` (a
            definition list or a "name — summary" heading of an uploaded document).
        signature: the entry's heading line as written (``str.split(sep=None, maxsplit=-1)``,
            ``shared_buffers (integer)``), at most :data:`SIGNATURE_CHARS` characters.
        summary: the first sentence of its description (empty when it has none).
        anchor: the fragment that opens it on its page (``str.split``, ``GUC-SHARED-BUFFERS``),
            empty when the markup has none.
        example: the entry's own example line (a function table's "Example(s)" cell), or empty.
    """

    name: str
    kind: str
    signature: str
    summary: str
    anchor: str = ""
    example: str = ""


#: Longest signature kept on a :class:`Definition` (a command's whole synopsis is longer).
SIGNATURE_CHARS = 300


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    """A parsed document: its title, its sections in reading order, and metadata.

    ``doc_id`` is set only by formats whose records carry their own id (JSON/JSONL); the
    caller names every other document.

    ``error`` is set on a record that was rejected on its own (its id holds a lone surrogate):
    it has no sections, its ``doc_id`` is the id with the surrogate escaped (storable, so the
    failure can be recorded and read back), and it fails alone while the rest of its file is
    indexed.

    ``definitions`` are the names it documents (:mod:`ingest.parsers.definitions`), each
    indexed as a definition entry beside its chunks.

    ``warnings``: what the parser repaired in the input, one line each (a record's lone
    surrogates replaced by U+FFFD); the registry keeps them on the document's row and
    ``GET /v1/documents/{id}`` shows them. ``surrogates``: how many lone surrogates were
    replaced (the pipeline counts them in ``ragstream_ingest_surrogates_replaced_total``).
    """

    title: str
    sections: tuple[Section, ...]
    content_type: str
    metadata: dict[str, MetaValue] = field(default_factory=dict)
    doc_id: str | None = None
    error: str | None = None
    definitions: tuple[Definition, ...] = ()
    warnings: tuple[str, ...] = ()
    surrogates: int = 0

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
