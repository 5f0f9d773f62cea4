"""DOCX (Office Open XML word processing, ECMA-376): body paragraphs and tables with python-docx.

Headings are the paragraphs styled ``Heading 1`` .. ``Heading 9`` (Word's built-in styles, whose
names python-docx reports in English whatever the document's language); ``Title`` titles the
document. Tables become one line per row, cells joined by `` | ``. Headers, footers, comments,
footnotes and text boxes are not read.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Iterator

import docx
from docx.table import Table
from docx.text.paragraph import Paragraph

from ingest.parsers.text import SectionBuilder, clean_line, first_line
from ingest.types import MetaValue, ParsedDocument, ParseError

#: Largest total uncompressed size of a DOCX's parts: python-docx holds them all in memory, so
#: a small zip bomb named .docx must not get that far (a 300-page report is ~5 MB unpacked).
MAX_UNPACKED_BYTES = 256 * 1024 * 1024
_HEADING_STYLE = re.compile(r"^Heading ([1-9])$")


def parse_docx(data: bytes) -> ParsedDocument:
    """Parse a ``.docx`` file's body into sections under its headings.

    Returns:
        One document, ``content_type="docx"``, titled by the core property ``title``, else the
        first ``Title``-styled paragraph, else the first heading, else the first line;
        ``metadata`` holds the core properties ``author`` and ``created`` (ISO 8601) when set.

    Raises:
        ParseError: not a DOCX package ("corrupt DOCX: ..."), unpacking to over
            :data:`MAX_UNPACKED_BYTES`, encrypted (an OLE file, not a zip), or no text.
    """
    _check_package(data)
    try:
        document = docx.Document(io.BytesIO(data))
        builder = SectionBuilder()
        title = _read_body(document.iter_inner_content(), builder)
        sections = builder.build()
        props = document.core_properties
        core_title, author, created = props.title, props.author, props.created
    except ParseError:
        raise
    except Exception as exc:
        raise ParseError(f"corrupt DOCX: {type(exc).__name__}: {exc}") from exc
    metadata: dict[str, MetaValue] = {}
    if author:
        metadata["author"] = clean_line(author)
    if created is not None:
        metadata["created"] = created.isoformat()
    title = clean_line(core_title or "") or title
    if not title:
        title = builder.headings[0] if builder.headings else first_line(sections[0].text)
    return ParsedDocument(title=title, sections=sections, content_type="docx", metadata=metadata)


def _check_package(data: bytes) -> None:
    if data[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":  # OLE2: encrypted OOXML or a .doc
        raise ParseError("DOCX is encrypted with a password, or is a legacy .doc file")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as package:
            unpacked = sum(info.file_size for info in package.infolist())
    except zipfile.BadZipFile as exc:
        raise ParseError(f"corrupt DOCX: not a zip package: {exc}") from exc
    if unpacked > MAX_UNPACKED_BYTES:
        raise ParseError(
            f"DOCX unpacks to {unpacked} bytes, over the {MAX_UNPACKED_BYTES}-byte limit"
        )


def _read_body(blocks: Iterator[Paragraph | Table], builder: SectionBuilder) -> str:
    """Feed paragraphs and tables in reading order to ``builder``; return the Title text."""
    title = ""
    for block in blocks:
        if isinstance(block, Table):
            builder.add(_table_text(block))
            continue
        style = block.style.name if block.style is not None else ""
        level = _HEADING_STYLE.match(style or "")
        if level:
            builder.heading(int(level[1]), block.text)
        elif style == "Title" and not title:
            title = clean_line(block.text)
        else:
            builder.add(block.text)
    return title


def _table_text(table: Table) -> str:
    rows = []
    for row in table.rows:
        cells: list[str] = []
        for cell in row.cells:
            text = " ".join(cell.text.split())
            if not cells or cells[-1] != text:  # a merged cell repeats in each grid column
                cells.append(text)
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)
