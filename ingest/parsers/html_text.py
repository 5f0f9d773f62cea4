"""Text of an lxml HTML tree as the browser lays it out: blocks on their own lines, sections by h*.

The walk is iterative (no recursion limit on deep trees). Elements whose ``SKIP_ATTR`` value is
in the skip set are left out, their tail text kept.
"""

from __future__ import annotations

import re
from typing import Any

from ingest.parsers.text import SectionBuilder

#: Attribute set on elements to leave out; its value says why ("boilerplate", "toc", ...).
SKIP_ATTR = "data-ragstream-skip"

#: lxml elements (lxml ships no type hints; the project does not depend on lxml-stubs).
Element = Any

HEADING_LEVELS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}

# Blocks separated by a blank line, and blocks that only start a new line.
_PARAGRAPH_BLOCKS = frozenset(
    {"p", "pre", "table", "blockquote", "ul", "ol", "dl", "figure", "hr", "section", "article"}
    | {"main", "address", "details", "fieldset", "header", "footer", "aside", "nav", "form"}
    | set(HEADING_LEVELS)
)
_LINE_BLOCKS = frozenset(
    {"div", "li", "dt", "dd", "tr", "caption", "figcaption", "summary", "legend", "body"}
    | {"center", "option", "menu", "dir", "noscript", "td", "th", "tbody", "thead", "tfoot"}
)
_SPACE = re.compile(r"[ \t\n\r\f\v]+")
# A heading directly inside one of these titles a note box (DocBook ``div.note > h3``), not a
# section: it is kept as a line of text and does not enter the heading path.
_ADMONITIONS = frozenset(
    {"note", "tip", "caution", "warning", "important", "admonition", "attention", "danger"}
    | {"hint", "error", "seealso", "callout"}
)


class TextExtractor:
    """Collect the text of a subtree into sections (or, when ``flat``, plain lines).

    Args:
        skip: ``SKIP_ATTR`` values whose elements are left out.
        flat: headings are plain blocks (used for headings and table cells themselves).
        title: the page title; when the first heading says the same, it heads every path
            (level 0), so a DocBook reference page's ``h2`` "SELECT" then ``h2`` "Synopsis"
            give ``("SELECT", "Synopsis")`` rather than ``("Synopsis",)``.
    """

    def __init__(self, skip: frozenset[str], *, flat: bool = False, title: str = "") -> None:
        self._skip = skip
        self._flat = flat
        self._title = title.casefold()
        self._parts: list[str] = []
        self._pending = 0  # newlines owed before the next text (1 = line, 2 = blank line)
        self.sections = SectionBuilder()

    def run(self, root: Element) -> TextExtractor:
        """Walk ``root`` (its tail excluded); return ``self`` for chaining."""
        stack: list[tuple[Element, bool]] = [(root, False)]
        while stack:
            element, closing = stack.pop()
            if closing:
                self._block(element.tag)
                if element is not root:
                    self._text(element.tail)
                continue
            if not self._open(element):
                if element is not root:
                    self._text(element.tail)
                continue
            stack.append((element, True))
            stack.extend((child, False) for child in reversed(element))
        if not self._flat:
            self.sections.add("".join(self._parts))
            self._parts = []
        return self

    def lines(self) -> list[str]:
        """The non-blank lines collected so far (flat mode), stripped."""
        text = "".join(self._parts)
        return [line.strip() for line in text.split("\n") if line.strip()]

    def one_line(self, root: Element) -> str:
        """The text of ``root`` on one line (flat walk: headings, cells)."""
        return " ".join(TextExtractor(self._skip, flat=True).run(root).lines())

    def _open(self, element: Element) -> bool:
        """Handle an opening tag; return whether to descend into its children."""
        tag = element.tag
        if not isinstance(tag, str) or element.get(SKIP_ATTR) in self._skip:
            return False
        if tag in HEADING_LEVELS and not self._flat and not _in_admonition(element):
            self._heading(element, HEADING_LEVELS[tag])
            return False
        if tag == "pre":
            self._verbatim(_pre_text(element))
            return False
        if tag == "table":
            self._verbatim("\n".join(self._table_rows(element)))
            return False
        if tag == "br":
            self._pending = 2 if self._pending else 1
            return False
        self._block(tag)
        self._text(element.text)
        return True

    def _block(self, tag: str) -> None:
        if tag in _PARAGRAPH_BLOCKS:
            self._pending = 2
        elif tag in _LINE_BLOCKS:
            self._pending = max(self._pending, 1)

    def _text(self, text: str | None) -> None:
        if not text:
            return
        text = _SPACE.sub(" ", text)
        if self._pending or not self._parts or self._parts[-1].endswith("\n"):
            text = text.lstrip(" ")
        elif text.startswith(" ") and self._parts[-1].endswith(" "):
            text = text[1:]
        if text:
            self._emit(text)

    def _verbatim(self, text: str) -> None:
        self._pending = 2
        if text.strip():
            self._emit(text)
            self._pending = 2

    def _emit(self, text: str) -> None:
        if self._pending and self._parts:
            self._parts.append("\n" * self._pending)
        self._pending = 0
        self._parts.append(text)

    def _heading(self, element: Element, level: int) -> None:
        title = self.one_line(element)
        if not title:
            return
        self.sections.add("".join(self._parts))
        self._parts, self._pending = [], 0
        if not self.sections.headings and title.casefold() == self._title:
            level = 0
        self.sections.heading(level, title)

    def _table_rows(self, table: Element) -> list[str]:
        rows: list[str] = []
        for child in table:
            tag = child.tag
            if not isinstance(tag, str) or child.get(SKIP_ATTR) in self._skip:
                continue
            if tag == "caption":
                rows.append(self.one_line(child))
            elif tag == "tr":
                rows.append(self._row(child))
            elif tag in {"thead", "tbody", "tfoot"}:
                rows.extend(self._row(tr) for tr in child if tr.tag == "tr")
        return [row for row in rows if row.strip(" |")]

    def _row(self, tr: Element) -> str:
        cells = [
            self.one_line(cell)
            for cell in tr
            if cell.tag in {"td", "th"} and cell.get(SKIP_ATTR) not in self._skip
        ]
        while cells and not cells[-1]:
            cells.pop()
        return " | ".join(cells)


def _in_admonition(heading: Element) -> bool:
    parent = heading.getparent()
    classes = (parent.get("class") or "").lower().split() if parent is not None else []
    return not _ADMONITIONS.isdisjoint(classes)


def _pre_text(pre: Element) -> str:
    """The text of a ``<pre>`` as written; the newline right after ``<pre>`` is not content."""
    text = "".join(pre.itertext())
    if text.startswith("\r\n"):
        return text[2:]
    return text.removeprefix("\n")
