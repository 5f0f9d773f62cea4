"""Document parsers: detection, decoding, each format's structure, and their failure modes.

Fixtures live in ``tests/fixtures/parsers/``; PDFs are built here byte by byte. The last tests
run on the Python 3.11 and PostgreSQL 15 HTML manuals when the Debian doc packages are
installed (python3.11-doc, postgresql-doc-15) and are skipped otherwise.
"""

from __future__ import annotations

import io
import random
import unicodedata
from pathlib import Path

import pytest
from pypdf import PdfReader, PdfWriter

from ingest.parsers import detect_content_type, parse
from ingest.types import ParsedDocument, ParseError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "parsers"
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
POSTGRES_DOCS = Path("/usr/share/doc/postgresql-doc-15/html")

MULTILINGUAL = (
    "Multilingual sample\n"
    "中文：你好，世界。日本語：こんにちは。한국어: 안녕하세요.\n"
    "العربية: مرحبا بالعالم\n"
    "עברית: שלום עולם\n"
    "Emoji: 👩\u200d💻 🎉 🇯🇵 ✅"
)


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def parse_one(data: bytes, **kwargs: str) -> ParsedDocument:
    documents = parse(data, **kwargs)
    assert len(documents) == 1
    return documents[0]


def paths(document: ParsedDocument) -> list[tuple[str, ...]]:
    return [section.heading_path for section in document.sections]


def make_pdf(pages: list[list[str]], *, title: str | None = None) -> bytes:
    """A minimal PDF (Helvetica text, one line per string) with a correct xref table."""
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(len(pages)))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    for i, lines in enumerate(pages):
        ops = " ".join(f"({line}) Tj 0 -16 Td" for line in lines)
        stream = f"BT /F1 12 Tf 72 720 Td {ops} ET".encode() if lines else b""
        objects.append(
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            b"/Resources << /Font << /F1 3 0 R >> >> /Contents %d 0 R >>" % (5 + 2 * i)
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    info = ""
    if title is not None:
        objects.append(f"<< /Title ({title}) >>".encode())
        info = f" /Info {len(objects)} 0 R"
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    trailer = f"<< /Size {len(objects) + 1} /Root 1 0 R{info} >>".encode()
    out += b"trailer\n%s\nstartxref\n%d\n%%%%EOF\n" % (trailer, xref)
    return bytes(out)


def encrypt_pdf(data: bytes, *, user_password: str) -> bytes:
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    return buffer.getvalue()


# --- detection ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/plain; charset=utf-8", "text"),
        ("TEXT/MARKDOWN", "markdown"),
        ("text/html", "html"),
        ("application/xhtml+xml", "html"),
        ("application/pdf", "pdf"),
        ("application/json", "json"),
        ("application/x-ndjson", "jsonl"),
        ("markdown", "markdown"),
        ("md", "markdown"),
        ("jsonl", "jsonl"),
        ("ndjson", "jsonl"),
    ],
)
def test_content_type_wins_over_extension_and_content(content_type: str, expected: str) -> None:
    assert detect_content_type(b"{}", filename="x.pdf", content_type=content_type) == expected


@pytest.mark.parametrize(
    ("filename", "expected"),
    [
        ("notes.TXT", "text"),
        ("a/b/readme.text", "text"),
        ("guide.md", "markdown"),
        ("guide.markdown", "markdown"),
        ("C:\\docs\\page.HTM", "html"),
        ("page.html", "html"),
        ("paper.pdf", "pdf"),
        ("data.json", "json"),
        ("data.jsonl", "jsonl"),
        ("data.ndjson", "jsonl"),
    ],
)
def test_extension_used_without_content_type(filename: str, expected: str) -> None:
    assert detect_content_type(b"plain words", filename=filename) == expected


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"%PDF-1.7\n...", "pdf"),
        (b"  <!DOCTYPE html><html><body><p>x</p></body></html>", "html"),
        (b"<div>fragment</div>", "html"),
        (b'{"text": "a"}', "json"),
        (b'{\n  "text": "a"\n}', "json"),
        (b'[{"text": "a"}]', "json"),
        (b'{"text": "a"}\n{"text": "b"}\n', "jsonl"),
        (b"just words\n", "text"),
        ("\ufeffnur Wörter".encode("utf-16"), "text"),
    ],
)
def test_sniffing_without_name_or_type(data: bytes, expected: str) -> None:
    assert detect_content_type(data) == expected


def test_octet_stream_falls_back_to_the_extension() -> None:
    assert detect_content_type(b"x", filename="a.md", content_type="application/octet-stream") == (
        "markdown"
    )


def test_unknown_content_type_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="unsupported content type 'image/png'"):
        parse(b"\x89PNG\r\n", content_type="image/png")


def test_unrecognisable_binary_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="unsupported content type"):
        parse(b"PK\x03\x04\x00\x00\x08\x00binary zip body", filename="report.xlsx")


def test_a_docx_name_on_other_bytes_is_a_corrupt_docx() -> None:
    with pytest.raises(ParseError, match="corrupt DOCX: not a zip package"):
        parse(b"PK\x03\x04\x00\x00\x08\x00binary zip body", filename="report.docx")


# --- decoding and normalisation -------------------------------------------------------------


@pytest.mark.parametrize("name", ["multilingual_utf8.txt", "multilingual_utf16.txt"])
def test_cjk_rtl_and_emoji_survive_unicode_encodings(name: str) -> None:
    document = parse_one(fixture(name), filename=name)
    assert document.text == MULTILINGUAL
    assert document.title == "Multilingual sample"


def test_utf8_with_bom_and_utf32_decode_exactly() -> None:
    assert parse_one(b"\xef\xbb\xbf" + MULTILINGUAL.encode(), content_type="text").text == (
        MULTILINGUAL
    )
    utf32 = "\ufeff".encode("utf-32-le") + MULTILINGUAL.encode("utf-32-le")
    assert parse_one(utf32, content_type="text").text == MULTILINGUAL


def test_gb18030_is_detected() -> None:
    data = fixture("chinese_gb18030.txt")
    with pytest.raises(UnicodeDecodeError):
        data.decode("utf-8")
    document = parse_one(data, filename="chinese_gb18030.txt")
    assert document.text == data.decode("gb18030").strip("\n")
    assert document.title == "标题：编码检测测试"


def test_shift_jis_is_detected() -> None:
    data = fixture("japanese_shift_jis.txt")
    document = parse_one(data, filename="japanese_shift_jis.txt")
    assert document.text == data.decode("shift_jis").strip("\n")
    assert "カタカナとひらがな" in document.text


def test_declared_charset_parameter_is_used() -> None:
    text = "Привет, мир. Это проверка кодировки windows-1251."
    document = parse_one(text.encode("cp1251"), content_type="text/plain; charset=windows-1251")
    assert document.text == text


def test_text_is_normalised() -> None:
    raw = "Title line\r\n\r\n\r\n\r\nbody\x00 text   \rnext\n\n\n\ncafe\u0301\n"
    document = parse_one(raw.encode(), content_type="text")
    assert document.text == "Title line\n\nbody text\nnext\n\ncafé"
    assert unicodedata.is_normalized("NFC", document.text)
    assert document.sections[0].heading_path == ()


def test_plain_text_title_is_first_non_empty_line_cut_to_200() -> None:
    long_line = "é" * 250
    document = parse_one(f"\n   \n{long_line}\nrest".encode(), filename="a.txt")
    assert document.title == "é" * 200
    assert document.content_type == "text"


@pytest.mark.parametrize("content_type", [None, "text", "markdown", "html", "json", "jsonl", "pdf"])
@pytest.mark.parametrize("data", [b"", b"  \n\t\r\n  "])
def test_empty_file_says_document_is_empty(content_type: str | None, data: bytes) -> None:
    with pytest.raises(ParseError, match="document is empty"):
        parse(data, content_type=content_type)


@pytest.mark.parametrize(
    ("content_type", "data"),
    [
        ("text", "\ufeff \x00 \r\n".encode()),
        ("markdown", b"---\ntitle: only front matter\n---\n\n"),
        ("html", b"<html><body><div> </div><p>\n</p></body></html>"),
        ("jsonl", b"\n\n   \n"),
    ],
)
def test_no_text_after_extraction_says_document_is_empty(content_type: str, data: bytes) -> None:
    with pytest.raises(ParseError, match="document is empty"):
        parse(data, content_type=content_type)


def test_html_without_text_is_empty() -> None:
    with pytest.raises(ParseError, match="document is empty"):
        parse(b"<html><body><nav><a href='/'>Home</a></nav><script>x()</script></body></html>")


# --- Markdown -------------------------------------------------------------------------------


def test_markdown_sections_fences_and_front_matter() -> None:
    document = parse_one(fixture("guide.md"), filename="guide.md")
    assert document.content_type == "markdown"
    assert document.title == "Guide: Markdown"
    assert document.metadata == {"author": "Ada", "version": 3, "draft": False}
    assert paths(document) == [
        (),
        ("Top Title",),
        ("Top Title", "Install"),
        ("Top Title", "Setext Heading"),
        ("Top Title", "Setext Heading", "Deep"),
        ("Another Top",),
    ]
    install = document.sections[2].text
    assert "# not a heading\npip install ragstream" in install
    assert "## also not a heading" in install
    assert document.sections[4].text == "Deep text with C# mention."
    assert "---" not in document.text and "author" not in document.text


def test_markdown_title_falls_back_to_h1_then_heading_then_line() -> None:
    assert parse_one(b"intro\n\n## Sub\n\ntext\n\n# Main\n\nx", content_type="md").title == "Main"
    assert parse_one(b"intro\n\n## Sub\n\ntext", content_type="md").title == "Sub"
    assert parse_one(b"\nFirst line\nsecond", content_type="md").title == "First line"


def test_markdown_rule_after_blank_line_and_hashtags_are_not_headings() -> None:
    document = parse_one(b"# T\n\npara\n\n---\n\n#hashtag and more\n", content_type="md")
    assert paths(document) == [("T",)]
    assert document.sections[0].text == "para\n\n---\n\n#hashtag and more"


def test_markdown_of_headings_only_keeps_them_as_text() -> None:
    document = parse_one(b"# Title\n\n## Part\n", content_type="md")
    assert (document.title, paths(document), document.text) == ("Title", [()], "Title\nPart")


def test_markdown_unclosed_fence_runs_to_the_end() -> None:
    document = parse_one(b"# A\n\n```\n# inside\n", content_type="md")
    assert paths(document) == [("A",)]
    assert "# inside" in document.text


# --- HTML -----------------------------------------------------------------------------------


def test_html_keeps_main_content_only() -> None:
    document = parse_one(fixture("page.html"), filename="page.html")
    text = document.text
    assert "Intro paragraph with bold text and a link." in text
    assert "Café — 東京 — مرحبا — 👍" in text
    for boilerplate in [
        "SCRIPT_TEXT", "STYLE_TEXT", "LOGO_TEXT", "NAV_LINK", "BREADCRUMB", "SEARCH_",
        "QUICK_SEARCH", "SIDEBAR_LINK", "PREVIOUS_PAGE_LINK", "NEXT_PAGE_LINK",
        "RELATED_ASIDE", "FOOTER_TEXT", "¶",
    ]:  # fmt: skip
        assert boilerplate not in text
    assert document.title == "Guide de test"
    assert document.metadata == {"lang": "fr"}


def test_html_heading_paths_and_layout() -> None:
    document = parse_one(fixture("page.html"), content_type="text/html")
    assert paths(document) == [
        ("Guide de test",),
        ("Guide de test", "Installation"),
        ("Guide de test", "Installation", "Options"),
        ("Guide de test", "Usage"),
    ]
    install, options, usage = (s.text for s in document.sections[1:])
    assert "First paragraph.\n\nSecond paragraph." in install
    assert "alpha\nbeta" in install
    assert "def main():\n    return 42" in install
    assert options == "Name | Default\ntimeout | 30 s"
    assert usage.startswith("Line one\nLine two")
    assert "Admonition text." in usage  # a note box's own heading does not open a section


def test_html_wrapper_named_header_is_not_dropped() -> None:
    document = parse_one(fixture("wrapper.html"), filename="wrapper.html")
    assert paths(document) == [("Real Article",)]
    assert "This is the real content of the page." in document.text
    assert "A second paragraph" in document.text
    for boilerplate in ["NAVBAR_HOME", "NAVBAR_X", "FOOTER_ID_TEXT"]:
        assert boilerplate not in document.text


def test_docbook_style_page() -> None:
    document = parse_one(fixture("docbook.html"), filename="docbook.html")
    assert document.title == "3.2. Widgets"
    assert paths(document) == [("3.2. Widgets",), ("3.2. Widgets", "3.2.1. Sizes")]
    assert document.sections[0].text.startswith("Widgets hold widget_count items.")
    assert "Admonition body." in document.text
    for boilerplate in ["Prev", "Next", "Home", "NAVHEADER", "NAVFOOTER", "TOC_ENTRY"]:
        assert boilerplate not in document.text


def test_html_toc_only_page_keeps_its_toc() -> None:
    page = b"<html><body><h1>Contents</h1><div class='toc'><ul><li>Part one</li></ul></div>"
    document = parse_one(page, content_type="html")
    assert "Part one" in document.text


def test_html_inline_elements_do_not_split_words_and_blocks_do_not_glue() -> None:
    page = (
        b"<p><span>abs</span><span>(</span><em>x</em><span>)</span></p>"
        b"<div>one</div><div>two</div><dl><dt>term</dt><dd>definition</dd></dl>"
    )
    assert parse_one(page, content_type="html").text == "abs(x)\n\none\ntwo\n\nterm\ndefinition"


def test_html_meta_charset_is_honoured() -> None:
    body = "<html><head><meta charset='shift_jis'><title>日本語</title></head><body><p>テスト</p>"
    document = parse_one(body.encode("shift_jis"), filename="ja.html")
    assert document.title == "日本語"
    assert document.text == "テスト"


# --- JSON and JSONL -------------------------------------------------------------------------


def test_jsonl_records_metadata_and_ids() -> None:
    documents = parse(fixture("records.jsonl"), filename="records.jsonl")
    assert [d.doc_id for d in documents] == ["doc-1", "42", None]
    assert [d.title for d in documents] == ["One", "Second record", "Third without id"]
    first, second, _ = documents
    assert first.text == "First record — 東京 👍"
    assert first.content_type == "jsonl"
    assert first.metadata == {"lang": "ja", "score": 0.5, "tags": '["a", "b"]', "published": True}
    assert second.text == "Second record\nwith CRLF"
    assert second.metadata == {"nested": '{"k": 1}', "extra": None}


def test_jsonl_bad_line_fails_the_file_naming_the_line() -> None:
    with pytest.raises(ParseError, match=r"^line 3: invalid JSON"):
        parse(fixture("bad_line.jsonl"), filename="bad_line.jsonl")


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"text": "a"}\n{"title": "no text"}', r"line 2: text field 'text' is missing"),
        (b'{"text": 5}', r"line 1: text field 'text' is int, not a string"),
        (b'{"text": "a"}\n[1, 2]', r"line 2: expected a JSON object, got list"),
        (b'{"id": "x", "text": "a"}\n{"id": "x", "text": "b"}', r"line 2: duplicate doc_id 'x'"),
        (b'{"id": true, "text": "a"}', r"line 1: id must be a string or an integer"),
        (b'{"text": "   "}', r"line 1: document is empty"),
        (b'{"text": NaN}', r"line 1: invalid JSON"),
    ],
)
def test_jsonl_record_errors(body: bytes, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse(body, content_type="jsonl")


def test_json_list_with_custom_text_field() -> None:
    documents = parse(fixture("records.json"), filename="records.json", json_text_field="body")
    assert [(d.doc_id, d.text, d.metadata) for d in documents] == [
        ("a", "Alpha body", {"category": "x"}),
        ("b", "Beta body", {"category": "y"}),
    ]
    assert all(d.content_type == "json" for d in documents)


def test_json_single_object_and_errors() -> None:
    (document,) = parse(b'{"doc_id": "z", "text": "Zed", "n": 1}', content_type="json")
    assert (document.doc_id, document.text, document.metadata) == ("z", "Zed", {"n": 1})
    with pytest.raises(ParseError, match="record 2: expected a JSON object"):
        parse(b'[{"text": "a"}, "b"]', content_type="json")
    with pytest.raises(ParseError, match="invalid JSON"):
        parse(b'{"text": ', content_type="json")
    with pytest.raises(ParseError, match="document is empty"):
        parse(b"[]", content_type="json")


# --- PDF ------------------------------------------------------------------------------------


def test_pdf_one_section_per_page_with_title() -> None:
    data = make_pdf([["Hello PDF world", "second line"], [], ["Page three text"]], title="Doc T")
    document = parse_one(data, filename="x.pdf")
    assert document.content_type == "pdf"
    assert document.title == "Doc T"
    assert paths(document) == [("page 1",), ("page 3",)]
    assert "Hello PDF world" in document.sections[0].text
    assert "second line" in document.sections[0].text
    assert document.metadata == {"page_count": 3}


def test_pdf_title_falls_back_to_first_line() -> None:
    assert parse_one(make_pdf([["Opening words"]]), content_type="pdf").title == "Opening words"


def test_pdf_without_text_layer_is_an_error() -> None:
    with pytest.raises(ParseError, match="no text layer"):
        parse(make_pdf([[]]), content_type="application/pdf")


@pytest.mark.parametrize(
    "data",
    [b"%PDF-1.4\nthis is not a pdf body at all", make_pdf([["Hello"]])[:150], b"%PDF-"],
)
def test_corrupt_pdf_is_a_parse_error(data: bytes) -> None:
    with pytest.raises(ParseError, match="PDF"):
        parse(data, filename="broken.pdf")


def test_password_protected_pdf_is_refused() -> None:
    data = encrypt_pdf(make_pdf([["Secret text"]]), user_password="secret")
    with pytest.raises(ParseError, match="encrypted"):
        parse(data, filename="locked.pdf")


def test_pdf_with_empty_user_password_is_read() -> None:
    data = encrypt_pdf(make_pdf([["Readable text"]]), user_password="")
    assert "Readable text" in parse_one(data, filename="open.pdf").text


# --- robustness -----------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text", "markdown", "html", "pdf", "json", "jsonl"])
def test_garbage_raises_only_parse_error(content_type: str) -> None:
    rng = random.Random(f"garbage-{content_type}")
    samples = [bytes(rng.randrange(256) for _ in range(size)) for size in (1, 17, 600)]
    samples += [fixture("page.html")[:333], fixture("records.jsonl")[:77], make_pdf([["x"]])[:-9]]
    for data in samples:
        try:
            documents = parse(data, content_type=content_type)
        except ParseError:
            continue
        assert documents and all(d.sections for d in documents)


# --- the real manuals -----------------------------------------------------------------------


def _manual_page(root: Path, name: str) -> bytes:
    if not root.is_dir():
        pytest.skip(f"{root} is absent (install the Debian doc package to run this test)")
    return (root / name).read_bytes()


def test_python_manual_builtin_functions() -> None:
    document = parse_one(_manual_page(PYTHON_DOCS, "library/functions.html"), filename="f.html")
    text = document.text
    assert document.title == "Built-in Functions"
    assert document.metadata == {"lang": "en"}
    assert "abs(x)\n\nReturn the absolute value of a number." in text
    assert "def all(iterable):\n    for element in iterable:" in text
    for boilerplate in [
        "Navigation", "Quick search", "Previous topic", "Next topic", "Show Source",
        "Report a Bug", "Table of Contents", "Python Software Foundation", "¶",
    ]:  # fmt: skip
        assert boilerplate not in text
    assert all(path[0] == "Built-in Functions" for path in paths(document))
    assert "Note that the parser only accepts the Unix-style end of line" in text  # footnote


def test_postgres_manual_lock_management() -> None:
    page = _manual_page(POSTGRES_DOCS, "runtime-config-locks.html")
    document = parse_one(page, filename="runtime-config-locks.html")
    assert "Lock Management" in document.title
    assert paths(document) == [("20.12. Lock Management",)]
    assert document.text.startswith("deadlock_timeout (integer)\n\nThis is the amount of time")
    assert "max_pred_locks_per_page" in document.text
    for boilerplate in ["Prev", "Next", "Home", "Up", "Client Connection Defaults"]:
        assert boilerplate not in document.text


def test_postgres_manual_reference_page_and_note_boxes() -> None:
    select = parse_one(_manual_page(POSTGRES_DOCS, "sql-select.html"), content_type="html")
    assert paths(select)[:3] == [("SELECT",), ("SELECT", "Synopsis"), ("SELECT", "Description")]
    assert "[ WITH [ RECURSIVE ] with_query [, ...] ]\nSELECT [ ALL | DISTINCT" in select.text
    lexical = parse_one(_manual_page(POSTGRES_DOCS, "sql-syntax-lexical.html"), filename="l.html")
    assert not any("Caution" in path or "Note" in path for path in paths(lexical))
    assert (
        "4.1. Lexical Structure",
        "4.1.2. Constants",
        "4.1.2.4. Dollar-Quoted String Constants",
    ) in paths(lexical)
    assert "Operator/Element | Associativity | Description\n. | left |" in lexical.text


REFENTRY = (
    "<html><head><title>EXPLAIN</title></head><body><div id='docContent'>"
    "<div class='refentry'><div class='titlepage'><h1>EXPLAIN</h1></div>"
    "<div class='refnamediv'><p>EXPLAIN — show the execution plan of a statement</p></div>"
    "<div class='refsynopsisdiv'><h2>Synopsis</h2><pre>EXPLAIN [ ANALYZE ] statement</pre></div>"
    "<div class='refsect1'><h2>Description</h2><p>This command displays the plan.</p></div>"
    "</div></div></body></html>"
).encode()


def test_a_reference_pages_heading_becomes_its_purpose_line() -> None:
    (doc,) = parse(REFENTRY, content_type="text/html")
    purpose = "EXPLAIN — show the execution plan of a statement"
    assert [s.heading_path for s in doc.sections] == [
        (purpose,),
        (purpose, "Synopsis"),
        (purpose, "Description"),
    ]
    assert doc.sections[0].text.startswith(purpose)  # the line stays in the text


@pytest.mark.parametrize(
    "body",
    [
        # A heading followed by prose that starts with its name is no purpose line.
        "<h1>EXPLAIN</h1><p>EXPLAIN shows the plan. It is long enough to be prose.</p>",
        # Sphinx already writes "name — purpose" in the heading.
        "<h1>atexit — Exit handlers</h1><p>atexit — Exit handlers again</p>",
        # A chapter heading over other text.
        "<h1>20.12. Lock Management</h1><p>deadlock_timeout (integer)</p>",
    ],
)
def test_other_pages_keep_their_headings(body: str) -> None:
    page = f"<html><body><main>{body}</main></body></html>".encode()
    (doc,) = parse(page, content_type="text/html")
    heading = body.split("<h1>")[1].split("</h1>", maxsplit=1)[0]
    assert doc.sections[0].heading_path == (heading,)
