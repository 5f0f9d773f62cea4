"""Client-side English stemming for the BM25 fields ``text_stemmed`` and ``title_stemmed``.

The Elasticsearch distribution run here (``integ-test-zip``) has no ``analysis-common`` module:
no ``stemmer`` filter and no ``english`` analyzer. So the text is stemmed here, before it is
indexed, into a second field analysed by the built-in ``whitespace`` analyzer, and a question is
stemmed the same way before it is matched against that field (:func:`stem_text` on both sides).

Words are the runs of letters and digits (``shared_buffers`` gives ``shared`` and ``buffer``;
identifiers are matched whole by the unstemmed ``text``/``title`` fields), lower-cased, the 33
stop words of Lucene's ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` left out, and every other word
reduced to its Snowball English (Porter 2) stem with PyStemmer (Porter 1980; Snowball 2001).
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer  # type: ignore[import-not-found]

#: Lucene ``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET`` (33 words).
# fmt: off
STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is", "it",
    "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there", "these",
    "they", "this", "to", "was", "will", "with",
})
# fmt: on
#: Runs of letters and digits (``_`` and punctuation split words).
_WORD = re.compile(r"[^\W_]+")
#: Longest word kept (Lucene's standard tokenizer cuts tokens at 255 characters).
_MAX_WORD = 255


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def stem_words(text: str) -> list[str]:
    """The stems of ``text``'s words, in text order, stop words left out.

    Returns:
        Lower-case Snowball English stems (digits kept as they are), repeats kept.
    """
    words = [w for w in _WORD.findall(text.lower()) if w not in STOP_WORDS and len(w) <= _MAX_WORD]
    return list(_stemmer().stemWords(words))


def stem_text(text: str) -> str:
    """:func:`stem_words` joined by single spaces: the value of a ``*_stemmed`` field, and the
    query text matched against one (``""`` when no word is left)."""
    return " ".join(stem_words(text))


def stemmed_fields(title: str | None, text: str) -> dict[str, str]:
    """``{"title_stemmed": ..., "text_stemmed": ...}`` of a chunk's title and text."""
    return {"title_stemmed": stem_text(title or ""), "text_stemmed": stem_text(text)}
