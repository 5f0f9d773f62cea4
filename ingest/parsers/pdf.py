"""PDF: the text layer (pypdf), one section per page."""

from __future__ import annotations

import io

from pypdf import PasswordType, PdfReader

from ingest.parsers.text import clean_line, first_line, normalize_text
from ingest.types import MetaValue, ParsedDocument, ParseError, Section

NO_TEXT = "PDF has no text layer (scanned or image-only pages; OCR is not supported)"


def parse_pdf(data: bytes) -> ParsedDocument:
    """Parse a PDF's text layer into one section per page that has text.

    Section heading paths are ``("page N",)`` with N from 1. A PDF encrypted with an empty
    user password (permissions only) is opened; any other encryption is refused.

    Returns:
        One document titled by the ``/Title`` of its info dictionary, else its first line;
        ``metadata["page_count"]`` is the number of pages (with or without text).

    Raises:
        ParseError: corrupt ("corrupt PDF: <reason>"), encrypted, or no text on any page.
    """
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and reader.decrypt("") == PasswordType.NOT_DECRYPTED:
            raise ParseError("PDF is encrypted with a password")
        pages = [page.extract_text() or "" for page in reader.pages]
        info_title = reader.metadata.title if reader.metadata is not None else None
    except ParseError:
        raise
    except Exception as exc:
        raise ParseError(f"corrupt PDF: {type(exc).__name__}: {exc}") from exc
    sections = tuple(
        Section(heading_path=(f"page {number}",), text=text)
        for number, text in enumerate((normalize_text(page) for page in pages), start=1)
        if text.strip()
    )
    if not sections:
        raise ParseError(NO_TEXT)
    metadata: dict[str, MetaValue] = {"page_count": len(pages)}
    title = clean_line(info_title) if isinstance(info_title, str) else ""
    return ParsedDocument(
        title=title or first_line(sections[0].text),
        sections=sections,
        content_type="pdf",
        metadata=metadata,
    )
