"""Definition entries: the names a document documents, read from its markup.

Each documented name becomes one :class:`~ingest.types.Definition` (name, kind, signature,
first description sentence, anchor, example), indexed beside the document's chunks so that a
name can be looked up, and checked to exist, in the tenant's own documents.

What yields an entry:

- **Sphinx** (the Python manual): a module's page (its ``h1`` "argparse — Parser for
  command-line options, arguments and sub-commands" beside the ``module-argparse`` target),
  kind ``module``; an object description ``<dl class="py function">`` (also
  ``method``, ``class``, ``data``, ``attribute``, ``exception``, ``classmethod``,
  ``staticmethod``, ``decorator``, ``property``; the ``c`` domain's; ``std cmdoption``,
  ``std envvar``): each ``<dt id>`` signature of it is an entry; its name is the
  ``sig-prename`` + ``sig-name`` (``str.split``), its summary the first sentence of the
  ``<dd>``'s first paragraph. https://www.sphinx-doc.org/en/master/usage/domains/python.html
- **DocBook** (the PostgreSQL manual): a ``varlistentry`` (``<div class="variablelist">``'s
  ``<dt><span class="term">`` with its ``<dd>``): name = the term's first ``<code>``
  (``shared_buffers``, ``CONCURRENTLY``), kind ``setting`` for a ``varname``, ``option`` for an
  ``option``, else ``term``; a reference page's ``refnamediv`` ("CREATE INDEX — define a new
  index"): kind ``command``, signature the synopsis' first line; a row of a function table
  (``td.func_table_entry``): name = the signature's first ``<code class="function">`` (else its
  operator literal), summary its description, example its "Example(s)" paragraph.
  https://tdg.docbook.org/tdg/5.2/varlistentry.html
- **Markdown, Word and text** (uploaded documents), from the parsed sections: a definition list
  (a line ``Term`` followed by ``: description``, the PHP Markdown Extra / Pandoc syntax), and a
  heading ``name — summary`` (an em or en dash).

A document with none of these yields no entries; its chunks are indexed as before.
"""

from __future__ import annotations

import itertools
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path

from ingest.parsers.html_text import Element
from ingest.types import SIGNATURE_CHARS, Definition, Section

#: Sphinx object types kept, by domain (``<dl class="py function">``) → our kind.
SPHINX_KINDS = {
    "py": {
        "function": "function", "method": "method", "class": "class", "data": "data",
        "attribute": "attribute", "exception": "exception", "classmethod": "method",
        "staticmethod": "method", "decorator": "function", "property": "attribute",
    },
    "c": {"function": "function", "macro": "data", "type": "class", "member": "attribute",
          "var": "data"},
    "std": {"cmdoption": "option", "envvar": "envvar"},
}  # fmt: skip
#: DocBook ``<code class>`` of a varlistentry's term → kind (anything else: ``term``).
DOCBOOK_TERM_KINDS = {"varname": "setting", "option": "option", "envar": "envvar"}
#: Longest name kept: a longer "name" is a phrase, not a documented name.
NAME_CHARS = 80
#: Longest summary kept (its first sentence, cut at a word past this many characters).
SUMMARY_CHARS = 400

_SPACE = re.compile(r"\s+")
_PERMALINKS = re.compile(r"[¶#§\U0001f517\u2693]+$")
# A sentence ends at . ! ? before a space and a capital/opening character; "e.g. x" does not.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)[.!?](?=\s+[A-Z(\"'`]|\s*$)")
#: "name — summary" (an em dash U+2014 or an en dash U+2013 between spaces).
_DASH_HEADING = re.compile(
    r"^(?P<name>[^\s\u2014\u2013].{0,79}?)\s+[\u2014\u2013]\s+(?P<summary>\S.*)$"
)
_QUALIFIED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+")
_DL_DESCRIPTION = re.compile(r"^:[ \t]+(?P<text>\S.*)$")


def html_definitions(main: Element) -> tuple[Definition, ...]:
    """The definition entries of an HTML page's main content, in document order.

    Args:
        main: the page's main content element (its ``¶`` anchors may still be there).

    Returns:
        One entry per Sphinx object signature, DocBook varlistentry term, reference page and
        function table row; the first of two entries with the same name and anchor only.
    """
    found: list[Definition] = list(_module_heading(main))
    for el in main.iter("dl", "div", "td"):
        cls = (el.get("class") or "").split()
        if el.tag == "dl" and len(cls) >= 2 and cls[1] in SPHINX_KINDS.get(cls[0], {}):
            found.extend(_sphinx(el, SPHINX_KINDS[cls[0]][cls[1]]))
        elif el.tag == "dl" and "variablelist" in cls:
            found.extend(_varlist(el))
        elif el.tag == "div" and "refnamediv" in cls:
            found.extend(_refname(el))
        elif el.tag == "td" and "func_table_entry" in cls:
            found.extend(_function_row(el))
    return tuple(_unique(found))


def section_definitions(sections: Iterable[Section]) -> tuple[Definition, ...]:
    """The definition entries of a Markdown, Word or text document's sections: each
    ``Term`` / ``: description`` pair and each ``name — summary`` heading, in order."""
    found: list[Definition] = []
    for section in sections:
        if section.heading_path:
            m = _DASH_HEADING.match(section.heading_path[-1])
            if m and _is_name(m["name"]):
                found.append(
                    Definition(
                        name=m["name"].strip(),
                        kind="term",
                        signature=_cut(section.heading_path[-1], SIGNATURE_CHARS),
                        summary=first_sentence(m["summary"]),
                    )
                )
        lines = section.text.split("\n")
        for prev, line in itertools.pairwise(lines):
            m = _DL_DESCRIPTION.match(line)
            term = prev.strip()
            if m and term and not term.startswith(":") and _is_name(term):
                found.append(
                    Definition(
                        name=term,
                        kind="term",
                        signature=_cut(term, SIGNATURE_CHARS),
                        summary=first_sentence(m["text"]),
                    )
                )
    return tuple(_unique(found))


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (whitespace collapsed), at most about
    :data:`SUMMARY_CHARS` characters (cut at a word, with "…")."""
    flat = _flat(text)
    m = _SENTENCE_END.search(flat)
    sentence = flat[: m.end()] if m else flat
    return _cut(sentence, SUMMARY_CHARS)


# -- Sphinx --------------------------------------------------------------------------------


def _module_heading(main: Element) -> Iterator[Definition]:
    """A module's page: its ``h1`` "argparse — Parser for command-line options ..." with the
    ``module-argparse`` target Sphinx puts beside it."""
    h1 = next(main.iter("h1"), None)
    if h1 is None:
        return
    m = _DASH_HEADING.match(_PERMALINKS.sub("", _flat(_text(h1))).strip())
    if m is None:
        return
    name = m["name"].strip()
    anchor = f"module-{name}"
    if _is_name(name) and any(el.get("id") == anchor for el in main.iter()):
        yield Definition(name, "module", name, first_sentence(m["summary"]), anchor)


def _sphinx(dl: Element, kind: str) -> Iterator[Definition]:
    dd = next((c for c in dl if c.tag == "dd"), None)
    summary = _first_paragraph(dd)
    for dt in (c for c in dl if c.tag == "dt"):
        anchor = dt.get("id") or ""
        names = [
            _flat(_text(s))
            for s in dt.iter("span")
            if {"sig-prename", "sig-name"} & set((s.get("class") or "").split())
        ]
        # The option's name is its sig-name alone ("-m"; its prename is the argument).
        name = names[0] if kind in ("option", "envvar") and names else "".join(names)
        name = name.strip()
        # A method documented inside its class is written "create(env_dir)"; its anchor is its
        # qualified name (venv.EnvBuilder.create).
        if _QUALIFIED.fullmatch(anchor) and anchor.endswith(f".{name}"):
            name = anchor
        if name and anchor:
            yield Definition(name, kind, _signature(dt), summary, anchor)


# -- DocBook -------------------------------------------------------------------------------


def _varlist(dl: Element) -> Iterator[Definition]:
    terms: list[Element] = []
    for child in dl:
        if child.tag == "dt":
            terms.append(child)
            continue
        if child.tag != "dd":
            continue
        summary = _first_paragraph(child)
        for dt in terms:
            term = next((s for s in dt.iter("span") if s.get("class") == "term"), dt)
            code = next(iter(term.iter("code")), None)
            name = _flat(_text(code)) if code is not None else _signature(term)
            kind = DOCBOOK_TERM_KINDS.get((code.get("class") or "") if code is not None else "")
            anchor = dt.get("id") or next(
                (a.get("id") or "" for a in dt.iter("a") if a.get("id")), ""
            )
            if _is_name(name):
                yield Definition(name, kind or "term", _signature(term), summary, anchor)
        terms = []


def _refname(div: Element) -> Iterator[Definition]:
    title = next((s for s in div.iter("span") if s.get("class") == "refentrytitle"), None)
    para = next((p for p in div.iter("p")), None)
    if title is None or para is None:
        return
    name = _flat(_text(title))
    line = _flat(_text(para))
    summary = line.split(" — ", 1)[1] if " — " in line else line
    entry = div.getparent()
    signature = line
    if entry is not None:
        synopsis = next(
            (p for p in entry.iter("pre") if "synopsis" in (p.get("class") or "").split()), None
        )
        if synopsis is not None:
            first = next((ln for ln in _text(synopsis).split("\n") if ln.strip()), "")
            signature = _flat(first) or line
    anchor = (entry.get("id") or "") if entry is not None else ""
    if name:
        yield Definition(name, "command", _cut(signature, SIGNATURE_CHARS), summary, anchor)


def _function_row(td: Element) -> Iterator[Definition]:
    paras = [p for p in td if p.tag == "p"]
    signatures = [p for p in paras if "func_signature" in (p.get("class") or "").split()]
    rest = [p for p in paras if p not in signatures]
    if not signatures or not rest:
        return
    summary = first_sentence(_text(rest[0]))
    example = _flat(_text(rest[1])) if len(rest) > 1 else ""
    anchor = _anchor_above(td)
    for sig in signatures:
        codes = list(sig.iter("code"))
        named = next((c for c in codes if c.get("class") == "function"), None)
        if named is None:
            named = next((c for c in codes if c.get("class") == "literal"), None)
        if named is None:
            continue
        name = _flat(_text(named))
        if _is_name(name):
            yield Definition(
                name, "function", _signature(sig), summary, anchor, _cut(example, SIGNATURE_CHARS)
            )


# -- helpers -------------------------------------------------------------------------------


def _text(el: Element | None) -> str:
    return "" if el is None else "".join(el.itertext())


def _flat(text: str) -> str:
    return _SPACE.sub(" ", text).strip()


def _signature(el: Element) -> str:
    return _cut(_PERMALINKS.sub("", _flat(_text(el))).strip(), SIGNATURE_CHARS)


def _first_paragraph(dd: Element | None) -> str:
    if dd is None:
        return ""
    para = next((c for c in dd if c.tag == "p"), None)
    return first_sentence(_text(para if para is not None else dd))


def _anchor_above(el: Element) -> str:
    node: Element | None = el
    while node is not None:
        if node.get("id"):
            return str(node.get("id"))
        node = node.getparent()
    return ""


def _is_name(text: str) -> bool:
    """A documented name: short, one line, not a sentence."""
    text = text.strip()
    return 0 < len(text) <= NAME_CHARS and "\n" not in text and not text.endswith((".", ":"))


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[:limit].rsplit(" ", 1)[0]
    return f"{head}…"


def _unique(found: Iterable[Definition]) -> Iterator[Definition]:
    seen: set[tuple[str, str, str]] = set()
    for d in found:
        key = (d.name, d.anchor, d.signature)
        if key not in seen:
            seen.add(key)
            yield d


def count_entries(root: Path) -> tuple[int, int, Counter[str]]:
    """``(pages, entries, entries by kind)`` of every HTML page under ``root`` (``_sources``
    and ``_static`` left out; a page that does not parse counts as no page)."""
    from ingest.parsers import parse
    from ingest.types import ParseError

    pages, kinds = 0, Counter[str]()
    for path in sorted(root.rglob("*.html")):
        if {"_sources", "_static"} & set(path.parts):
            continue
        try:
            doc = parse(path.read_bytes(), filename=path.name)[0]
        except ParseError:
            continue
        pages += 1
        kinds.update(d.kind for d in doc.definitions)
    return pages, sum(kinds.values()), kinds
