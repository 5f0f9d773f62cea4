"""HTML: the main content only, split into sections by ``h1``..``h6``.

Tuned on the Python 3.11 manual (Sphinx: ``div.body[role=main]``) and the PostgreSQL 15 manual
(DocBook XSL: no main marker, ``div.navheader``/``div.navfooter`` around the content, XHTML with
an ``<?xml?>`` declaration), with a generic fallback for other pages.
"""

from __future__ import annotations

import re

import lxml.html  # type: ignore[import-untyped,unused-ignore]
from lxml import etree  # type: ignore[import-untyped,unused-ignore]

from ingest.parsers.decoding import decode_bytes
from ingest.parsers.definitions import html_definitions
from ingest.parsers.html_text import HEADING_LEVELS, SKIP_ATTR, Element, TextExtractor
from ingest.parsers.text import EMPTY, clean_line, first_line
from ingest.types import MetaValue, ParsedDocument, ParseError, Section

# Never content: removed from the whole tree before anything else.
_NEVER_CONTENT = (
    "script", "style", "noscript", "template", "svg", "iframe", "object", "embed", "canvas",
    "button", "input", "select", "textarea", "datalist", "dialog", "audio", "video", "map",
    "link", "meta", "head",
)  # fmt: skip
# Where the main content is, most explicit first; the largest match of the first that has text.
_MAIN_XPATHS = (
    "//*[@role='main']",
    "//main",
    "//article",
    "//*[@id='content' or @id='main-content' or @id='main']",
    "//*[contains(concat(' ', normalize-space(@class), ' '), ' content ')]",
    "//*[contains(concat(' ', normalize-space(@class), ' '), ' body ')]",
)
_BOILERPLATE_ROLES = frozenset(
    {"navigation", "search", "banner", "contentinfo", "menu", "menubar", "toolbar"}
)
# Containers judged by class/id; a class token matches when one of its -/_ parts is listed.
_HEURISTIC_TAGS = ("div", "ul", "ol", "table", "section")
_BOILERPLATE_PART = re.compile(
    r"^(?:nav\w*|\w*sidebar\w*|breadcrumbs?|footer|header|masthead|search\w*|menu|menubar"
    r"|topbar|toolbar|related|pager|pagination|skiplink|cookies?|banner|share|social)$"
)
_BOILERPLATE_ID = re.compile(
    r"^(?:(?:site|page|main|top|global)[-_]?)?"
    r"(?:nav|navbar|navigation|sidebar|footer|header|menu|breadcrumbs?|search|searchbox)$"
)
_TOC_CLASSES = frozenset({"toc", "toctree-wrapper", "contents", "table-of-contents"})
_ANCHOR_TEXT = frozenset({"¶", "#", "§", "🔗", "⚓"})
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*>")
_CONTROL = re.compile(r"[\x00-\x08\x0e-\x1f\x7f]")
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.I)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml[^>]+encoding\s*=\s*["']([A-Za-z0-9_.:-]+)""")
# " — Python 3.11.2 documentation", " | Acme Docs" (em dash, en dash, bar, middle dot, hyphen).
_TITLE_SUFFIX = re.compile(
    "\\s+[\u2014\u2013|\u00b7-]\\s+[^\u2014\u2013|\u00b7]*"
    "\\b(?:documentation|docs|manual|wiki)\\b[^\u2014\u2013|\u00b7]*$",
    re.IGNORECASE,
)


def parse_html(data: bytes, *, charset: str | None = None) -> ParsedDocument:
    """Parse an HTML page into its main content's sections.

    The main content is the first of ``[role=main]``, ``<main>``, ``<article>``, ``#content``,
    ``.content``, ``.body`` that has text (the largest match), else ``<body>``. Inside it,
    navigation, page headers/footers, search boxes, breadcrumbs, sidebars, tables of contents
    and "¶" permalink anchors are left out (a TOC is kept only if nothing else has text).
    Section heading paths are the enclosing ``h1``..``h6`` texts; ``<pre>`` keeps its
    whitespace; tables become one line per row with cells joined by ``" | "``.

    Args:
        data: the page's bytes.
        charset: the charset the sender declared (MIME parameter), if any; else the page's
            own ``<meta charset>`` or ``<?xml encoding?>`` is used when it is not UTF-8.

    Returns:
        One document; ``title`` is ``<title>`` without a " — Site documentation" suffix, else
        the first ``h1``, else the first heading, else the first line; ``metadata["lang"]`` is
        ``<html lang>`` when present.

    Raises:
        ParseError: undecodable, or no text in the page.
    """
    declared = charset or _declared_charset(data[:4096])
    markup = _CONTROL.sub("", _XML_DECLARATION.sub("", decode_bytes(data, declared=declared)))
    if not markup.strip():
        raise ParseError(EMPTY)
    try:
        root = lxml.html.document_fromstring(markup)
    except etree.ParserError as exc:
        raise ParseError(EMPTY if "empty" in str(exc).lower() else f"invalid HTML: {exc}") from exc
    title = _title(root)
    metadata: dict[str, MetaValue] = {}
    lang = clean_line(root.get("lang") or root.get("xml:lang") or "")
    if lang:
        metadata["lang"] = lang
    etree.strip_elements(root, etree.Comment, etree.ProcessingInstruction, with_tail=False)
    etree.strip_elements(root, *_NEVER_CONTENT, with_tail=False)
    main, explicit = _main_content(root)
    definitions = html_definitions(main)
    _mark_boilerplate(main, explicit=explicit)
    extractor = TextExtractor(frozenset({"boilerplate", "anchor", "toc"}), title=title).run(main)
    if not extractor.sections.has_text:
        extractor = TextExtractor(frozenset({"boilerplate", "anchor"}), title=title).run(main)
    sections = purpose_headings(extractor.sections.build())
    return ParsedDocument(
        title=title or _first_heading(main, extractor) or first_line(sections[0].text),
        sections=sections,
        content_type="html",
        metadata=metadata,
        definitions=definitions,
    )


#: Longest "NAME — purpose" line taken as a reference page's heading (DocBook's refnamediv is
#: one short line; a longer one is prose).
PURPOSE_LINE_CHARS = 200


def purpose_headings(sections: tuple[Section, ...]) -> tuple[Section, ...]:
    """``sections`` with a reference page's bare name heading replaced by its purpose line.

    A reference page names its subject in its first heading and says what it is for in the line
    right under it: the PostgreSQL manual's DocBook pages have the heading "EXPLAIN" and the
    line "EXPLAIN — show the execution plan of a statement" (a ``refnamediv``). Sphinx puts both
    in the heading ("atexit — Exit handlers"). The heading becomes that line in every section of
    the page, so every chunk's title says what its subject does: a how-to question ("How can I
    see the execution plan ...?") meets the purpose's words in the title of each passage of
    the page. The line stays in the text. Other pages are returned unchanged.
    """
    first = next((s for s in sections if s.text.strip()), None)
    if first is None or not first.heading_path:
        return sections
    name = first.heading_path[0]
    line = first.text.lstrip().partition("\n")[0].strip()
    if (
        len(first.heading_path) != 1
        or " — " in name
        or not line.startswith(f"{name} — ")
        or len(line) > PURPOSE_LINE_CHARS
    ):
        return sections
    return tuple(
        Section((line, *s.heading_path[1:]), s.text) if s.heading_path[:1] == (name,) else s
        for s in sections
    )


def _declared_charset(head: bytes) -> str | None:
    match = _XML_ENCODING.match(head) or _META_CHARSET.search(head)
    return match[1].decode("ascii") if match else None


def _title(root: Element) -> str:
    element = root.find("head/title")
    title = clean_line(element.text_content()) if element is not None else ""
    stripped = _TITLE_SUFFIX.sub("", title).strip()
    return stripped or title


def _first_heading(main: Element, extractor: TextExtractor) -> str:
    """The first ``h1`` of the content, else its first heading of any level."""
    h1 = main.find(".//h1")
    title = clean_line(extractor.one_line(h1)) if h1 is not None else ""
    return title or (extractor.sections.headings[0] if extractor.sections.headings else "")


def _main_content(root: Element) -> tuple[Element, bool]:
    """Return ``(main element, found by a main-content selector)``; else ``(<body>, False)``."""
    for xpath in _MAIN_XPATHS:
        candidates = [(len(el.text_content().strip()), el) for el in root.xpath(xpath)]
        if candidates:
            size, best = max(candidates, key=lambda pair: pair[0])
            if size:
                return best, True
    body = root.find("body")
    return (body if body is not None else root), False


def _mark_boilerplate(main: Element, *, explicit: bool) -> None:
    """Set ``SKIP_ATTR`` on the non-content elements under ``main`` (``main`` itself is kept)."""
    main_size = len(main.text_content())
    for element in main.iter("nav", "footer", "aside", "header", "form"):
        if element is not main and _semantic_is_boilerplate(element, main_size, explicit=explicit):
            element.set(SKIP_ATTR, "boilerplate")
    for element in main.xpath(".//*[@role or @hidden]"):
        if element.get("hidden") is not None or element.get("role") in _BOILERPLATE_ROLES:
            element.set(SKIP_ATTR, "boilerplate")
    for element in main.iter(*_HEURISTIC_TAGS):
        if element is not main and not element.get(SKIP_ATTR):
            _mark_container(element, main_size)
    for anchor in main.iter("a"):
        if _is_permalink(anchor):
            anchor.set(SKIP_ATTR, "anchor")


def _mark_container(element: Element, main_size: int) -> None:
    if _is_toc(element):
        element.set(SKIP_ATTR, "toc")
    elif _named_boilerplate(element) and _small_or_links(element, main_size):
        element.set(SKIP_ATTR, "boilerplate")


def _is_permalink(anchor: Element) -> bool:
    """Sphinx ``a.headerlink`` and other "¶"/"#" self-links next to headings."""
    if "headerlink" in (anchor.get("class") or "").split():
        return True
    href = anchor.get("href") or ""
    return href.startswith("#") and anchor.text_content().strip() in _ANCHOR_TEXT


def _semantic_is_boilerplate(element: Element, main_size: int, *, explicit: bool) -> bool:
    """``nav``/``footer`` always; ``aside`` outside an explicit main (inside, it is a note or
    footnote unless mostly links); ``header`` unless it holds a heading of the content;
    ``form`` unless it wraps most of the page (ASP.NET wraps whole pages in one)."""
    tag = element.tag
    if tag in {"nav", "footer"}:
        return True
    if tag == "form":
        return _small_or_links(element, main_size)
    if tag == "aside":
        return not explicit or _link_density(element) >= 0.5
    has_heading = any(True for _ in element.iter(*HEADING_LEVELS))
    return not has_heading or _link_density(element) >= 0.5


def _is_toc(element: Element) -> bool:
    classes = set((element.get("class") or "").lower().split())
    return bool(classes & _TOC_CLASSES) and element.tag in {"div", "ul", "ol", "section"}


def _named_boilerplate(element: Element) -> bool:
    if _BOILERPLATE_ID.match((element.get("id") or "").lower()):
        return True
    for token in (element.get("class") or "").lower().split():
        if any(_BOILERPLATE_PART.match(part) for part in re.split(r"[-_]", token)):
            return True
    return False


def _small_or_links(element: Element, main_size: int) -> bool:
    """Drop a named container only if it is mostly links, or small and without headings, so a
    wrapper named e.g. ``page-header-wrapper`` around the whole content survives."""
    if _link_density(element) >= 0.5:
        return True
    has_heading = any(True for _ in element.iter(*HEADING_LEVELS))
    return not has_heading and len(element.text_content()) * 2 <= main_size


def _link_density(element: Element) -> float:
    """Share of the element's characters that are link text (0.0 for an empty element: 1.0)."""
    total = len(element.text_content().strip())
    if not total:
        return 1.0
    linked = sum(len(a.text_content().strip()) for a in element.iter("a"))
    return linked / total
