"""Which parser a document needs: declared content type, else file extension, else sniffing."""

from __future__ import annotations

import io
import re
import zipfile
from pathlib import PurePosixPath
from typing import Literal, get_args

from ingest.parsers.decoding import bom_encoding
from ingest.types import ParseError

#: The formats ``parse`` understands; also the ``content_type`` of the documents it returns.
ContentType = Literal["text", "markdown", "html", "pdf", "docx", "json", "jsonl"]
#: Formats recognised by their bytes alone (magic numbers), never by a name.
BINARY_TYPES: frozenset[ContentType] = frozenset({"pdf", "docx"})
DOCX_MIME = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"

_SHORT_NAMES: frozenset[str] = frozenset(get_args(ContentType))
_ALIASES: dict[str, ContentType] = {
    "txt": "text",
    "plain": "text",
    "md": "markdown",
    "htm": "html",
    "xhtml": "html",
    "ndjson": "jsonl",
    "text/plain": "text",
    "text/markdown": "markdown",
    "text/x-markdown": "markdown",
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/pdf": "pdf",
    "application/x-pdf": "pdf",
    DOCX_MIME: "docx",
    "application/json": "json",
    "text/json": "json",
    "application/jsonl": "jsonl",
    "application/x-jsonlines": "jsonl",
    "application/jsonlines": "jsonl",
    "application/x-ndjson": "jsonl",
    "application/ndjson": "jsonl",
}
_GENERIC = frozenset({"", "application/octet-stream", "binary/octet-stream", "unknown"})
_EXTENSIONS: dict[str, ContentType] = {
    ".txt": "text",
    ".text": "text",
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
    ".json": "json",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
}
_HTML_TAG = re.compile(
    r"<(?:!doctype\s+html|html|head|body|title|meta|div|p|h[1-6]|table|ul|ol|section|article"
    r"|main|span|a|br)\b",
    re.IGNORECASE,
)
_CHARSET_PARAM = re.compile(r";\s*charset\s*=\s*[\"']?([^\"';\s]+)", re.IGNORECASE)
_SNIFF_BYTES = 8192
_TEXT_CONTROLS = frozenset(b"\t\n\r\x0c\x1b")


def detect_content_type(
    data: bytes, *, filename: str | None = None, content_type: str | None = None
) -> ContentType:
    """Decide the format of ``data``.

    Args:
        data: the document's bytes.
        filename: its name or path; the extension (.txt .text .md .markdown .html .htm .xhtml
            .pdf .docx .json .jsonl .ndjson, any case) is used when ``content_type`` is not given.
        content_type: a MIME type (parameters such as ``charset`` ignored) or a short name
            (text, markdown, html, pdf, docx, json, jsonl, and txt, md, htm, ndjson).
            ``application/octet-stream`` counts as not given.

    Returns:
        The short name of the format.

    Raises:
        ParseError: ``content_type`` names a format not handled, or nothing is given and the
            bytes look like none of them ("unsupported content type ...").
    """
    if content_type is not None:
        mime = content_type.split(";", 1)[0].strip().lower()
        if mime not in _GENERIC:
            found = _from_name(mime)
            if found is None:
                raise ParseError(f"unsupported content type {content_type!r}")
            return found
    if filename:
        suffix = PurePosixPath(filename.replace("\\", "/")).suffix.lower()
        if suffix in _EXTENSIONS:
            return _EXTENSIONS[suffix]
    sniffed = sniff(data)
    if sniffed is None:
        named = f" (file {filename!r})" if filename else ""
        raise ParseError(f"unsupported content type: the data is not a known format{named}")
    return sniffed


def mime_charset(content_type: str | None) -> str | None:
    """The ``charset`` parameter of a MIME type, e.g. ``"shift_jis"``; ``None`` if absent."""
    match = _CHARSET_PARAM.search(content_type or "")
    return match[1] if match else None


def detect_upload(
    data: bytes, *, filename: str | None = None, content_type: str | None = None
) -> ContentType:
    """Decide the format of an uploaded file, trusting its bytes over its name.

    Binary formats are known by their magic numbers (PDF ``%PDF-``, DOCX a zip package holding
    ``word/document.xml``); a name or MIME type cannot make other bytes one of them. Text
    formats cannot be told apart by their bytes (Markdown is text), so for text the file's
    extension decides, then ``content_type`` (the part's declared type), then sniffing.

    Args:
        data: the file's bytes.
        filename: the name the client gave it.
        content_type: the MIME type the client declared (``application/octet-stream`` counts
            as none).

    Returns:
        The short name of the format.

    Raises:
        ParseError: the bytes are binary but no format handled here; or the name or declared
            type says PDF/DOCX and the bytes are not ("... is not a PDF"); or the declared type
            is unknown and nothing else decides.
    """
    magic = sniff_binary(data)
    if magic is not None:
        return magic
    named: ContentType | None = None
    if filename:
        named = _EXTENSIONS.get(PurePosixPath(filename.replace("\\", "/")).suffix.lower())
    if named is None and content_type is not None:
        mime = content_type.split(";", 1)[0].strip().lower()
        named = None if mime in _GENERIC else _from_name(mime)
    label = f"file {filename!r}" if filename else "the data"
    if named in BINARY_TYPES:
        raise ParseError(f"{label} is not a {named.upper()}: its bytes do not start like one")
    if not _looks_like_text(data[:_SNIFF_BYTES]):
        raise ParseError(f"unsupported content type: {label} is binary and not PDF or DOCX")
    if named is not None:
        return named
    return detect_content_type(data, filename=filename, content_type=content_type)


def sniff_binary(data: bytes) -> ContentType | None:
    """PDF (``%PDF-`` in the first KiB) or DOCX (a zip with ``word/document.xml``), else None."""
    if b"%PDF-" in data[:1024]:
        return "pdf"
    if data[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(io.BytesIO(data)) as package:
                names = set(package.namelist())
        except zipfile.BadZipFile:
            return None
        if "word/document.xml" in names:
            return "docx"
    return None


def sniff(data: bytes) -> ContentType | None:
    """Guess the format from the first bytes: PDF, DOCX, HTML, JSON/JSONL, else text if not
    binary."""
    binary = sniff_binary(data)
    if binary is not None:
        return binary
    head = data[:_SNIFF_BYTES]
    if not _looks_like_text(head):
        return None
    bom = bom_encoding(head)
    start = head[bom[1] :].decode(bom[0], errors="ignore") if bom else head.decode("latin-1")
    start = start.lstrip()
    if start.startswith("<"):
        return "html" if _HTML_TAG.search(start) else None
    if start.startswith("["):
        return "json"
    if start.startswith("{"):
        lines = [line.strip() for line in start.split("\n") if line.strip()]
        one_per_line = len(lines) > 1 and lines[0].endswith("}") and lines[1].startswith("{")
        return "jsonl" if one_per_line else "json"
    return "text"


def _from_name(name: str) -> ContentType | None:
    if name in _SHORT_NAMES:
        return name  # type: ignore[return-value]  # narrowed by membership
    return _ALIASES.get(name)


def _looks_like_text(head: bytes) -> bool:
    """No NUL byte (unless UTF-16/32 with a BOM) and under 1% other control bytes."""
    if bom_encoding(head) is not None:
        return True
    if b"\x00" in head:
        return False
    controls = sum(1 for byte in head if byte < 0x20 and byte not in _TEXT_CONTROLS)
    return controls * 100 <= len(head)
