"""Split a chunk's text into evidence units: sentences, code blocks, table rows, list items.

The chunk text is what :mod:`ingest.parsers.html_text` lays out: blocks separated by a blank
line, block elements (paragraphs, list items, definition terms and descriptions, table rows as
``cell | cell``) on their own lines, ``<pre>`` text verbatim. A unit is the smallest piece that
can be quoted as evidence on its own:

- a prose line is split into sentences (a full stop, ``?`` or ``!`` followed by a space and an
  upper-case letter, a digit or an opening quote/bracket; common abbreviations such as "e.g."
  and "i.e." do not end a sentence);
- a code block (a verbatim block: a block whose lines are indented, or that holds prompt or
  statement markers such as ``>>>``, ``$ ``, ``;`` line ends, braces) stays whole;
- a table row stays whole and carries its table's first row (the header) as context;
- a list item or definition line is its own unit (it is a line of its own already);
- a definition term (a block of one short line that does not end like a sentence and is no
  field line such as "Source code: Lib/copy.py": a PostgreSQL ``varlistentry`` term
  "checkpoint_timeout (integer)" or a Sphinx signature "pprint.pprint(object, width=80)") is a
  unit of kind ``term`` and shares its block number with the block that follows it (its
  description): "The default is five minutes." is about the term.

Every unit keeps ``[start, end)`` character offsets into the chunk text, so a quote can be
traced back exactly (``text[start:end] == unit.text``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

#: Abbreviations after which a full stop does not end a sentence (lower-case, without the dot).
ABBREVIATIONS = frozenset(
    {"e.g", "i.e", "etc", "vs", "cf", "approx", "no", "fig", "ch", "sec", "resp", "incl"}
    | {"al", "eds", "vol", "ver", "esp", "ca"}
)
#: A sentence boundary candidate: end punctuation (optionally closed by a quote or bracket),
#: white space, then something that can start a sentence.
_BOUNDARY = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z0-9\"'(\[`])")
_WORD_BEFORE = re.compile(r"(\S+)\.$")
_TABLE_ROW = re.compile(r"\S \| \S|^\S[^|]*\|$")
#: A Markdown table's delimiter row ("|---|:---:|", "--- | ---"): never a unit of evidence.
DELIMITER_ROW = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(?:\|\s*:?-{3,}:?\s*)*\|?\s*$")
_CODE_MARKERS = re.compile(r"^(>>>|\.\.\.|\$ |#|--|/\*|\w+=# )|[;{}]\s*$|^\s{2,}\S")
#: Longest code block kept as one unit, in characters; longer ones are cut into line groups.
MAX_CODE_CHARS = 600
#: Most words of a definition term line: long enough for a Sphinx signature with several
#: parameters (``class pprint.PrettyPrinter(indent=1, width=80, ...)`` has 9), short of prose.
MAX_TERM_WORDS = 16


@dataclass(frozen=True, slots=True)
class Unit:
    """One quotable piece of a chunk.

    Attributes:
        start: offset of the first character in the chunk text.
        end: offset one past the last character (``chunk_text[start:end] == text``).
        text: the unit as written.
        kind: ``sentence``, ``code``, ``row``, ``header`` (a table's first row, which the
            other rows carry as their context), ``item`` or ``term`` (a definition term that
            heads the block after it).
        context: text that frames it when scored and quoted (a table row's header row), or "".
        block: index of the blank-line block it belongs to (neighbours share a block; a
            definition term shares the block of its description).
        head: the definition term heading the unit's block, or "" (none, or the unit is it).
    """

    start: int
    end: int
    text: str
    kind: str
    context: str = ""
    block: int = 0
    head: str = ""


def _blocks(text: str) -> list[tuple[int, str]]:
    """``(offset, block)`` of every non-blank block separated by blank lines."""
    out = []
    for match in re.finditer(r"(?:[^\n]|\n(?!\s*\n))+", text):
        block = match.group(0)
        if block.strip():
            out.append((match.start(), block))
    return out


def _lines(block: str, base: int) -> list[tuple[int, str]]:
    out = []
    offset = 0
    for line in block.split("\n"):
        stripped = line.strip()
        if stripped:
            out.append((base + offset + line.index(stripped[0]), stripped))
        offset += len(line) + 1
    return out


def _is_code(lines: list[tuple[int, str]], raw: str) -> bool:
    if len(lines) < 2:
        return bool(re.match(r"^(>>>|\$ )", raw.strip()))
    raw_lines = [ln for ln in raw.split("\n") if ln.strip()]
    marked = sum(1 for ln in raw_lines if _CODE_MARKERS.search(ln))
    return marked * 2 >= len(raw_lines)


def _is_table(lines: list[tuple[int, str]]) -> bool:
    rows = sum(1 for _, ln in lines if _TABLE_ROW.search(ln))
    return len(lines) >= 2 and rows * 2 > len(lines)


def _is_term(lines: list[tuple[int, str]]) -> bool:
    """A definition term: one short line that does not end like a sentence or lead into a list."""
    if len(lines) != 1:
        return False
    line = lines[0][1].rstrip()
    if FIELD_LINES and _FIELD.match(line):
        return False  # "Source code: Lib/json/tool.py": a field of the page, not a term
    return len(line.split()) <= MAX_TERM_WORDS and not line.endswith((".", ":", "!", "?"))


#: Whether a field line of a page ("Source code: Lib/copy.py", "Availability: Unix, not
#: Emscripten") is never a term: as one it headed the next paragraph's sentences, and answers
#: read "Source code: Lib/json/tool.py / The json.tool module provides ...".
FIELD_LINES = True
#: A field line: a capitalised label of one to three words, a colon, a value.
_FIELD = re.compile(r"^[A-Z][a-z]+(?: [a-z]+){0,2}: \S")


def split_sentences(line: str) -> list[tuple[int, int]]:
    """``[start, end)`` offsets of the sentences of one prose line (see the module docstring)."""
    spans = []
    start = 0
    for match in _BOUNDARY.finditer(line):
        head = line[start : match.start()].rstrip("\"')]")
        word = _WORD_BEFORE.search(head)
        if word and word.group(1).lower().lstrip("(\"'") in ABBREVIATIONS:
            continue
        if word and len(word.group(1)) == 1 and word.group(1).isupper():
            continue  # an initial ("J. Smith")
        end = match.start() + len(match.group(0).rstrip())
        spans.append((start, end))
        start = match.end()
    if line[start:].strip():
        spans.append((start, len(line)))
    return spans


#: Whether a "See also" box (the heading, the title of the document it points to and that
#: title's description) is left out of the units: it describes another document ("PEP 305 -
#: CSV File API / The Python Enhancement Proposal which proposed this addition to Python." led
#: the answer to "How do I read a CSV file line by line?").
SEE_ALSO_BOXES = True
_SEE_ALSO = re.compile(r"see also:?", re.IGNORECASE)


def _code_units(lines: list[tuple[int, str]], text: str, block_no: int) -> list[Unit]:
    units = []
    group: list[tuple[int, str]] = []

    def flush() -> None:
        if group:
            start, end = group[0][0], group[-1][0] + len(group[-1][1])
            units.append(Unit(start, end, text[start:end], "code", block=block_no))
            group.clear()

    for offset, line in lines:
        if group and offset + len(line) - group[0][0] > MAX_CODE_CHARS:
            flush()
        group.append((offset, line))
    flush()
    return units


def _content_blocks(text: str) -> Iterator[tuple[int, str]]:
    """The blocks of ``text`` (:func:`_blocks`) without its "See also" boxes
    (:data:`SEE_ALSO_BOXES`)."""
    box = 0  # blocks of a "See also" box still to skip
    for base, block in _blocks(text):
        if SEE_ALSO_BOXES and _SEE_ALSO.fullmatch(block.strip()):
            box = 2  # the reference's title and its description
            continue
        if box:
            box -= 1
            if box and not _is_term(_lines(block, base)):
                box = 0  # no title line: the box holds prose (or nothing more)
            continue
        yield base, block


def definition_terms(text: str) -> list[tuple[int, str]]:
    """``(offset, line)`` of every definition term of ``text``: the units of kind ``term`` that
    :func:`segment` gives, without splitting the prose around them (a fifth of the time)."""
    out = []
    for base, block in _content_blocks(text):
        lines = _lines(block, base)
        if _block_kind(lines, block) == "term":
            out.append(lines[0])
    return out


def _block_kind(lines: list[tuple[int, str]], block: str) -> str:
    """``code``, ``table``, ``term`` or ``prose``: how :func:`segment` splits the block."""
    if _is_code(lines, block):
        return "code"
    if _is_table(lines):
        return "table"
    return "term" if _is_term(lines) else "prose"


def segment(text: str) -> list[Unit]:
    """Split ``text`` (a chunk's text) into evidence units, in reading order.

    Returns:
        Units with offsets into ``text``; empty for a blank text.
    """
    units: list[Unit] = []
    block_no = -1
    after_term = False
    head = ""
    for base, block in _content_blocks(text):
        lines = _lines(block, base)
        if not after_term:
            block_no += 1
            head = ""
        after_term = False
        shape = _block_kind(lines, block)
        if shape == "code":
            units.extend(_code_units(lines, text, block_no))
        elif shape == "table":
            # A table cut by chunking starts with the tail of a cell, not its header row: a
            # first line without cells is no header, and the rows are quoted without one.
            first = lines[0][1]
            header = first if "|" in first else ""
            kind = "header" if header else "item"
            units.append(Unit(lines[0][0], lines[0][0] + len(first), first, kind, "", block_no))
            units.extend(
                Unit(off, off + len(line), line, "row", header, block_no)
                for off, line in lines[1:]
                if not DELIMITER_ROW.match(line)  # "|---|:--:|": it states nothing
            )
        elif shape == "term":
            offset, line = lines[0]
            units.append(Unit(offset, offset + len(line), line, "term", "", block_no))
            after_term = True
            head = line
        else:
            for offset, line in lines:
                spans = split_sentences(line)
                kind = "sentence" if len(spans) > 1 or line.rstrip().endswith(".") else "item"
                for s, e in spans:
                    piece = line[s:e].strip()
                    if piece:
                        lead = line[s:e].index(piece[0])
                        start = offset + s + lead
                        units.append(
                            Unit(start, start + len(piece), piece, kind, "", block_no, head)
                        )
    return units


#: Characters of a chunk's start looked for in the chunk before it, or in another passage of
#: its document (:func:`continued_definition`, :func:`workers.evidence.select.carry_heads`):
#: enough to be unique in a chunk, short of the chunker's overlap (``chunking.overlap_tokens``,
#: 32 tokens, about 130 characters).
CONTINUATION_CHARS = 48
#: A one-line example the segmenter reads as a term (``psql -X -f dumpfile postgres``,
#: ``wal_level = logical``, ``ALTER TABLE ... ;``): it defines nothing, so no description
#: continues under it.
EXAMPLE_TERM = re.compile(r"^[a-z][\w.-]*(?: \S+)*? (?:-{1,2}\w|[>|] )|^\S+ = \S|;\s*$")


#: Titles of the manuals' admonition boxes (Sphinx and DocBook): the segmenter reads them as
#: terms, but a box is a part of a description, not a definition of its own.
ADMONITIONS = frozenset(
    {"Note", "Warning", "Tip", "Caution", "Important", "Hint", "Attention", "Danger", "See also"}
)


@dataclass(frozen=True, slots=True)
class Continuation:
    """Where a chunk continues the description of a definition term of the chunk before it.

    Attributes:
        start: offset in the earlier chunk's text of the definition term.
        end: offset in the earlier chunk's text where the chunk's own text begins (the overlap
            of the two chunks starts there).
        overlap: characters of the chunk's text, after its leading whitespace, that the earlier
            chunk holds too (from ``end`` to its end).
    """

    start: int
    end: int
    overlap: int


def continued_definition(previous: str, text: str, max_chars: int) -> Continuation | None:
    """The part of ``previous`` (the text of the chunk before ``text`` in its document) that
    ``text`` continues: from the last definition term before ``text`` begins to where it begins.

    Chunks overlap (``chunking.overlap_tokens``), so a chunk that starts inside a description
    has lost its term and the description's first sentences: the chunk "files. ... The default
    value is four megabytes (4MB)." without ``work_mem (integer)`` and "Sets the base maximum
    amount of memory ...". Read together with this part, the chunk is whole again (the context
    expansion of small-to-big retrieval, e.g. LlamaIndex's sentence-window retriever, bounded
    here by the manual's own structure, a definition term).

    Args:
        previous: the earlier chunk's text.
        text: the chunk's text.
        max_chars: the longest part returned (characters); a longer one gives ``None``.

    Returns:
        The part's offsets, or ``None``: ``text``'s first :data:`CONTINUATION_CHARS` characters
        are not in ``previous`` after its start, ``previous`` does not end with the same
        characters ``text`` starts with, ``text`` starts with a term or no term comes before
        it (an admonition's title, "Note", is no term: :data:`ADMONITIONS`), the term is a
        one-line example (:data:`EXAMPLE_TERM`), or the part is too long.
    """
    body = text.lstrip()
    key = body[:CONTINUATION_CHARS]
    if len(key) < CONTINUATION_CHARS:
        return None
    end = previous.find(key, 1)
    while end > 0 and not body.startswith(previous[end:].rstrip()):
        end = previous.find(key, end + 1)  # the phrase recurs: the overlap is a later one
    if end <= 0:
        return None
    tail = previous[end:].rstrip()
    # Only a term within max_chars before the overlap can be it: read from the block there.
    lo = previous.rfind("\n\n", 0, max(0, end - max_chars)) + 1
    terms = [(lo + at, line) for at, line in definition_terms(previous[lo:])]
    if any(start == end for start, _ in terms):
        return None  # the chunk starts with a term of its own
    start, term = next(
        ((s, t) for s, t in reversed(terms) if s < end and t.strip() not in ADMONITIONS),
        (-1, ""),
    )
    if start < 0 or end - start > max_chars or EXAMPLE_TERM.search(term):
        return None
    return Continuation(start, end, len(tail))
