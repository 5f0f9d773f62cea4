"""Text normalisation shared by every format, the section builder, and the plain-text parser."""

from __future__ import annotations

import re
import unicodedata

from ingest.types import ParsedDocument, ParseError, Section

#: Longest title (and heading) kept, in code points.
MAX_TITLE_CHARS = 200

_NEWLINES = str.maketrans({"\r": "\n", "\x0b": "\n", "\x0c": "\n", "\x00": None})
_TRAILING_SPACE = re.compile(r"[ \t]+$", re.MULTILINE)
_BLANK_RUN = re.compile(r"\n{3,}")
_SPACE_RUN = re.compile(r"\s+")
#: A UTF-16 surrogate code point: only valid in pairs inside UTF-16, never in text (a JSON
#: string may still hold a lone one, ``"\\ud83d"``, which no UTF-8 encoder accepts).
_SURROGATE = re.compile("[\ud800-\udfff]")

EMPTY = "document is empty"


def normalize_text(text: str) -> str:
    """Normalise extracted text; never drops a non-ASCII character.

    CRLF, CR, VT and FF become ``\\n``; NUL characters are removed; Unicode is NFC (so input
    not already in NFC, e.g. CJK compatibility ideographs U+F900.., changes code points);
    trailing spaces and tabs on each line are removed; runs of blank lines collapse to one
    blank line; leading and trailing blank lines are removed (leading indentation is kept); a
    lone surrogate code point becomes U+FFFD, the replacement character.
    """
    text = replace_surrogates(text.replace("\r\n", "\n").translate(_NEWLINES))
    text = unicodedata.normalize("NFC", text)
    text = _TRAILING_SPACE.sub("", text)
    return _BLANK_RUN.sub("\n\n", text).strip("\n")


def replace_surrogates(text: str) -> str:
    """``text`` with every lone surrogate code point replaced by U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


def count_surrogates(*texts: str) -> int:
    """How many lone surrogate code points ``texts`` hold together (what
    :func:`replace_surrogates` would replace)."""
    return sum(len(_SURROGATE.findall(t)) for t in texts)


def surrogates_warning(count: int, where: str) -> str:
    """The warning a document carries when ``count`` lone surrogates in ``where`` (``"text"``,
    ``"title, metadata"``) were replaced: ``"3 lone surrogate(s) in text replaced by U+FFFD
    (...)"``."""
    return (
        f"{count} lone surrogate(s) in {where} replaced by U+FFFD (half of a UTF-16 pair, "
        "e.g. an emoji cut in two: the character is lost)"
    )


def surrogate_problem(value: str, what: str) -> str | None:
    """Why ``value`` cannot be an identifier, or ``None`` when it holds no lone surrogate.

    An identifier is matched exactly (updates, deletes, ``GET /v1/documents/{id}``), so unlike
    text it is never repaired: a lone surrogate (half of a UTF-16 pair, e.g. an emoji cut in
    two) has no UTF-8 form, so SQL, Elasticsearch and Kafka could not store the id, and
    replacing it would merge ids that differ only there.

    Args:
        value: the identifier.
        what: how the message names it (``"line 3: doc_id"``).

    Returns:
        ``"<what> 'j-\\ud83d' holds a lone surrogate U+D83D at index 2 (...)"`` (the id as
        :func:`escape_surrogates` writes it), or ``None``.
    """
    found = _SURROGATE.search(value)
    if found is None:
        return None
    return (
        f"{what} '{escape_surrogates(value)}' holds a lone surrogate "
        f"U+{ord(found.group()):04X} at index {found.start()} (half of a UTF-16 pair, "
        "not Unicode text); an id must be valid Unicode"
    )


def escape_surrogates(text: str) -> str:
    """``text`` with every lone surrogate written as its escape (``"j-\\ud83d"``, 6
    characters): a storable stand-in that keeps distinct ids distinct."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def clean_line(text: str) -> str:
    """Normalise a one-line value (title, heading): NFC, whitespace runs to one space, stripped."""
    text = unicodedata.normalize("NFC", replace_surrogates(text.replace("\x00", "")))
    return _SPACE_RUN.sub(" ", text).strip()[:MAX_TITLE_CHARS].rstrip()


def first_line(text: str) -> str:
    """Return the first non-blank line of ``text``, cleaned and cut to 200 characters."""
    for line in text.split("\n"):
        if line.strip():
            return clean_line(line)
    return ""


class SectionBuilder:
    """Collect text under a stack of headings, as ``Section`` values in reading order.

    Call :meth:`add` with text and :meth:`heading` when a heading starts; a heading of level
    ``n`` closes every open heading of level ``>= n``. :meth:`build` normalises each text and
    drops empty sections.
    """

    def __init__(self) -> None:
        self._stack: list[tuple[int, str]] = []
        self._parts: list[tuple[tuple[str, ...], str]] = []
        self.headings: list[str] = []

    @property
    def path(self) -> tuple[str, ...]:
        """The heading path of the text added now."""
        return tuple(title for _, title in self._stack)

    @property
    def has_text(self) -> bool:
        """Whether any text (not counting headings) was added."""
        return bool(self._parts)

    def add(self, text: str) -> None:
        """Append ``text`` to the section under the current heading path."""
        if not text.strip():
            return
        path = self.path
        if self._parts and self._parts[-1][0] == path:
            self._parts[-1] = (path, self._parts[-1][1] + "\n" + text)
        else:
            self._parts.append((path, text))

    def heading(self, level: int, title: str) -> None:
        """Open a heading of ``level`` (1 = top) titled ``title``; empty titles are ignored."""
        title = clean_line(title)
        if not title:
            return
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, title))
        self.headings.append(title)

    def build(self) -> tuple[Section, ...]:
        """Return the non-empty sections; a document of headings only keeps them as its text.

        Raises:
            ParseError: nothing but whitespace ("document is empty").
        """
        sections = []
        for path, raw in self._parts:
            text = normalize_text(raw)
            if text.strip():
                sections.append(Section(heading_path=path, text=text))
        if not sections and self.headings:
            sections.append(Section(heading_path=(), text="\n".join(self.headings)))
        if not sections:
            raise ParseError(EMPTY)
        return tuple(sections)


def parse_text(text: str) -> ParsedDocument:
    """Parse plain text: one section with heading path ``()``, titled by its first line.

    Raises:
        ParseError: the text is empty or whitespace only.
    """
    body = normalize_text(text)
    if not body.strip():
        raise ParseError(EMPTY)
    return ParsedDocument(
        title=first_line(body),
        sections=(Section(heading_path=(), text=body),),
        content_type="text",
    )
