"""Markdown: sections by ATX and setext headings, fenced code kept verbatim, YAML front matter.

A line-based subset of CommonMark (https://spec.commonmark.org/0.31.2/): headings (§4.2, §4.3)
and fenced code blocks (§4.5) are recognised; everything else is kept as text, markup included.
:func:`pipe_tables` finds GitHub Flavored Markdown tables (https://github.github.com/gfm/,
§4.10) in such text, so the chunker can cut them between rows and repeat their header.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass

from ingest.parsers.text import SectionBuilder, clean_line, first_line, normalize_text
from ingest.types import MetaValue, ParsedDocument

_FENCE_OPEN = re.compile(r"^ {0,3}(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_FENCE_CLOSE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")
_ATX = re.compile(r"^ {0,3}(?P<marks>#{1,6})(?:[ \t]+(?P<text>.*?))?[ \t]*$")
_ATX_CLOSING = re.compile(r"(?:^|[ \t]+)#+$")
_SETEXT = re.compile(r"^ {0,3}(?P<under>=+|-+)[ \t]*$")
# A paragraph may not start with these (so "- item" + "---" is a list and a rule, not a heading).
_NOT_PARAGRAPH = re.compile(r"^(?: {4}|\t| {0,3}(?:[-*+>|]|\d{1,9}[.)])(?:[ \t]|$))")
_FRONT_KEY = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_-]{0,63})[ \t]*:[ \t]*(?P<value>.*)$")
_FRONT_END = frozenset({"---", "..."})
#: A GFM table's delimiter row: cells of hyphens with optional alignment colons, and a pipe.
_TABLE_DELIMITER = re.compile(
    r"^ {0,3}(?=[^|]*\|)\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*$"
)
_INT = re.compile(r"^[-+]?\d{1,18}$")
_FLOAT = re.compile(r"^[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?$")


@dataclass
class _Fence:
    char: str
    length: int

    def closes(self, line: str) -> bool:
        """A closing fence: the same character, at least as long, nothing after it."""
        match = _FENCE_CLOSE.match(line)
        return match is not None and match[1][0] == self.char and len(match[1]) >= self.length


@dataclass(frozen=True, slots=True)
class PipeTable:
    """One GFM pipe table of a text, by character offsets into it.

    Attributes:
        start: offset of the header row.
        body_start: offset of the first data row (just after the delimiter row's newline).
        end: offset just after the last row (its newline excluded).
        row_starts: offset of each data row, in order (the first is ``body_start``).
        header: the header row and the delimiter row, newline-terminated, as in the text.
    """

    start: int
    body_start: int
    end: int
    row_starts: tuple[int, ...]
    header: str


def pipe_tables(text: str, *, row_lines: bool = False) -> list[PipeTable]:
    """The GFM tables of ``text`` that have at least one data row, in order.

    A table is a line with a pipe, then a delimiter row (``|---|:--:|``, with a pipe), then
    rows: the following non-blank lines with a pipe (GFM §4.10 ends a table at a blank line or
    another block; a line without a pipe is taken as that block). Lines inside fenced code
    blocks are never tables.

    With ``row_lines``, also the tables the HTML and Word parsers write: at least
    :data:`MIN_ROW_LINES` consecutive lines that each hold ``" | "`` (one line a row, cells
    joined by ``" | "``, no delimiter row), the first of them the header
    (:attr:`PipeTable.header` is that line alone).
    """
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    tables: list[PipeTable] = []
    fence: _Fence | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if fence is not None:
            fence = None if fence.closes(line) else fence
            i += 1
            continue
        opened = _FENCE_OPEN.match(line)
        if opened and not (opened["fence"][0] == "`" and "`" in opened["info"]):
            fence = _Fence(opened["fence"][0], len(opened["fence"]))
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _TABLE_DELIMITER.match(lines[i + 1]):
            rows = i + 2
            while rows < len(lines) and lines[rows].strip() and "|" in lines[rows]:
                rows += 1
            if rows > i + 2:
                last = rows - 1
                tables.append(
                    PipeTable(
                        start=starts[i],
                        body_start=starts[i + 2],
                        end=starts[last] + len(lines[last]),
                        row_starts=tuple(starts[r] for r in range(i + 2, rows)),
                        header=text[starts[i] : starts[i + 2]],
                    )
                )
            i = rows
            continue
        found = _row_table(text, lines, starts, i) if row_lines and " | " in line else None
        if found is not None:
            tables.append(found)
            i = bisect_right(starts, found.end)
            continue
        i += 1
    return tables


def _row_table(text: str, lines: list[str], starts: list[int], i: int) -> PipeTable | None:
    """The table without a delimiter row whose header is line ``i``, or ``None`` when fewer
    than :data:`MIN_ROW_LINES` lines from there hold ``" | "``."""
    rows = i + 1
    while rows < len(lines) and " | " in lines[rows]:
        rows += 1
    if rows - i < MIN_ROW_LINES:
        return None
    last = rows - 1
    return PipeTable(
        start=starts[i],
        body_start=starts[i + 1],
        end=starts[last] + len(lines[last]),
        row_starts=tuple(starts[r] for r in range(i + 1, rows)),
        header=text[starts[i] : starts[i + 1]],
    )


#: Fewest lines of a table without a delimiter row (:func:`pipe_tables` with ``row_lines``):
#: a header and two rows; two lines with a pipe are too often something else.
MIN_ROW_LINES = 3


def parse_markdown(text: str) -> ParsedDocument:
    """Parse Markdown into sections keyed by the stack of enclosing headings.

    ``# A`` then ``## B`` gives sections ``("A",)`` and ``("A", "B")``; text before the first
    heading has path ``()``. ``#`` lines inside ``` or ~~~ fences are code, not headings; fences
    stay in the text. Front matter (``---`` ... ``---`` first in the file) is removed; its
    ``key: value`` scalar lines become metadata (``-`` in keys becomes ``_``; lists and nested
    maps are skipped). Title: front matter ``title``, else the first H1, else the first
    heading, else the first line.

    Raises:
        ParseError: nothing but whitespace and front matter.
    """
    text = normalize_text(text)
    metadata, body = _split_front_matter(text)
    builder = SectionBuilder()
    h1 = _scan(body, builder)
    sections = builder.build()
    title = clean_line(str(metadata.pop("title", "")))
    if not title:
        title = h1 or (builder.headings[0] if builder.headings else first_line(sections[0].text))
    return ParsedDocument(
        title=title,
        sections=sections,
        content_type="markdown",
        metadata=metadata,
    )


def _scan(body: str, builder: SectionBuilder) -> str | None:
    """Feed ``body`` to ``builder`` line by line; return the first H1's text, if any."""
    lines: list[str] = []
    para_start: int | None = None  # index in ``lines`` where the open paragraph began
    fence: _Fence | None = None
    h1: str | None = None
    for line in body.split("\n"):
        if fence is not None:
            lines.append(line)
            if fence.closes(line):
                fence = None
            continue
        heading = _heading(line, lines, para_start)
        if heading is not None:
            level, title, keep = heading
            builder.add("\n".join(lines[:keep]))
            lines, para_start = [], None
            builder.heading(level, title)
            if level == 1 and h1 is None and clean_line(title):
                h1 = clean_line(title)
            continue
        lines.append(line)
        opened = _FENCE_OPEN.match(line)
        if opened and not (opened["fence"][0] == "`" and "`" in opened["info"]):
            fence, para_start = _Fence(opened["fence"][0], len(opened["fence"])), None
        elif not line.strip():
            para_start = None
        elif para_start is None and not _NOT_PARAGRAPH.match(line):
            para_start = len(lines) - 1
    builder.add("\n".join(lines))
    return h1


def _heading(line: str, lines: list[str], para_start: int | None) -> tuple[int, str, int] | None:
    """Return ``(level, title, lines to keep before it)`` when ``line`` ends or is a heading."""
    atx = _ATX.match(line)
    if atx:
        title = _ATX_CLOSING.sub("", atx["text"] or "").strip()
        return len(atx["marks"]), title, len(lines)
    setext = _SETEXT.match(line)
    if setext and para_start is not None:
        title = " ".join(part.strip() for part in lines[para_start:])
        return (1 if setext["under"][0] == "=" else 2), title, para_start
    return None


def _split_front_matter(text: str) -> tuple[dict[str, MetaValue], str]:
    """Split leading ``---`` front matter off ``text``; return ``(metadata, rest)``."""
    lines = text.split("\n")
    if not lines or lines[0].rstrip() != "---":
        return {}, text
    for end in range(1, len(lines)):
        if lines[end].rstrip() in _FRONT_END:
            break
    else:
        return {}, text  # no closing line: a thematic break, not front matter
    metadata: dict[str, MetaValue] = {}
    for line in lines[1:end]:
        match = _FRONT_KEY.match(line)
        if match is None:
            continue
        value = _scalar(match["value"].strip(), keep_string=match["key"] == "title")
        if value is not None:
            metadata[match["key"].replace("-", "_")] = value
    return metadata, "\n".join(lines[end + 1 :])


def _scalar(raw: str, *, keep_string: bool = False) -> MetaValue:
    """A YAML-ish scalar: quoted string, bool, int, float or plain string; ``None`` to skip."""
    if not raw or raw[0] in "[{|>&*!#" or raw.lower() in {"~", "null"}:
        return None
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        return raw[1:-1]
    value: MetaValue = raw
    if keep_string:
        pass
    elif raw.lower() in {"true", "false"}:
        value = raw.lower() == "true"
    elif _INT.match(raw):
        value = int(raw)
    elif _FLOAT.match(raw):
        value = float(raw)
    return value
