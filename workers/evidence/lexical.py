"""Lexical signals of evidence scoring: terms, stems, identifiers and IDF.

Terms are lower-cased words; prose words are reduced to their Snowball (Porter 2) English stem
(PyStemmer, Porter 1980 / Snowball 2001), so "blocked" matches "blocks". Identifiers
(``shared_buffers``, ``os.getcwd``, ``--globals-only``, ``gen_random_uuid()``) are kept whole
*and* split into their parts, so an exact identifier scores above a loose word match.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import Stemmer  # type: ignore[import-not-found]

#: English function words and question words that carry no topic (a short list in the spirit of
#: the SMART stop list, Salton 1971, plus the cue words of questions).
# fmt: off
STOPWORDS = frozenset({
    "a", "an", "the", "and", "or", "but", "if", "of", "to", "in", "on", "at", "by", "for", "with",
    "from", "as", "into", "onto", "about", "over", "under", "is", "are", "was", "were", "be",
    "been", "being", "am", "do", "does", "did", "doing", "done", "have", "has", "had", "having",
    "can", "could", "may", "might", "must", "shall", "should", "will", "would", "it", "its",
    "this", "that", "these", "those", "there", "here", "what", "which", "who", "whom", "whose",
    "when", "where", "why", "how", "i", "me", "my", "we", "our", "you", "your", "he", "she",
    "they", "them", "their", "his", "her", "not", "no", "nor", "so", "than", "too", "very", "s",
    "t", "just", "also", "only", "own", "same", "such", "both", "each", "few", "more", "most",
    "other", "some", "any", "all", "up", "down", "out", "off", "again", "further", "then", "once",
    "one", "ones", "get", "gets", "got", "use", "used", "using", "want", "need", "like", "make",
    "makes", "way", "ways", "something", "anything", "thing", "things", "tell", "give", "instead",
})
# fmt: on
#: Dotted abbreviations of prose, not code ("i.e", "e.g").
ABBREVIATIONS = frozenset({"i.e", "e.g", "etc", "cf", "vs", "a.k.a", "w.r.t"})
_TOKEN = re.compile(
    r"(?<![\w-])--?[a-z][\w-]*|[a-z_]\w*(?:\.[a-z_]\w*)*(?:\(\))?|\d+(?:[.,]\d+)*", re.I
)


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


def is_identifier(token: str) -> bool:
    """Whether ``token`` looks like code: has ``_``, ``.``, ``()``, a leading ``-`` or inner
    capitals (``StrEnum``, ``TaskGroup``)."""
    if token[:1].isdigit():
        return False  # a number or a version ("3.11"), not code
    return bool(
        "_" in token
        or "." in token.strip(".")
        or token.endswith("()")
        or token.startswith("-")
        or re.search(r"[a-z][A-Z]", token)
    )


def terms(text: str) -> list[str]:
    """The scoring terms of ``text``: stems of content words, identifiers whole and in parts.

    Returns:
        Terms in text order, with repeats; stop words and one-letter words left out (a new
        list; the terms of a text are kept in a cache of :data:`TERMS_CACHE` texts, as the same
        passages come back for many questions).
    """
    return list(_terms(text))


#: Texts whose :func:`terms` are kept (a passage's units, titles and labels): about 12 MB when
#: full of the manuals' sentences (7.6 MB of terms, measured with tracemalloc, and the texts).
TERMS_CACHE = 16384


@lru_cache(maxsize=TERMS_CACHE)
def _terms(text: str) -> tuple[str, ...]:
    stem = _stemmer().stemWord
    out: list[str] = []
    for raw in _TOKEN.findall(text):
        token = raw.lower()
        if is_identifier(raw):
            whole = token.removesuffix("()").lstrip("-")
            out.append(whole)
            parts = [p for p in re.split(r"[._\-]+", whole) if len(p) > 1]
            if len(parts) > 1:
                out.extend(stem(p) for p in parts if p not in STOPWORDS)
            continue
        if token in STOPWORDS or len(token) < 2:
            continue
        out.append(token if token[0].isdigit() else stem(token))
    return tuple(out)


def is_strong_identifier(token: str) -> bool:
    """Whether ``token`` is unmistakably code: ``_``, an inner ``.``, ``()`` or a leading
    ``-``. A capital inside a word alone is not enough: "PostgreSQL" and "JavaScript" are
    names of products, not of functions."""
    return (
        is_identifier(token)
        and not token[:1].isdigit()
        and bool(
            "_" in token or "." in token.strip(".") or token.endswith("()") or token.startswith("-")
        )
    )


def strong_identifiers(text: str) -> list[str]:
    """:func:`identifiers` that :func:`is_strong_identifier` accepts (lower-case, ``()`` and
    leading dashes removed)."""
    found = [raw for raw in _TOKEN.findall(text) if is_strong_identifier(raw)]
    names = [raw.lower().removesuffix("()").lstrip("-") for raw in found]
    return [name for name in names if len(name) >= 3 and name not in ABBREVIATIONS]


#: A DDL statement as the PostgreSQL manual names its reference pages: a verb and its object in
#: capitals (``CREATE POLICY``, ``ALTER SYSTEM``).
_STATEMENT = re.compile(r"\b(CREATE|ALTER|DROP)\s+([A-Z]{2,})\b")


def statement_names(text: str) -> list[str]:
    """The DDL statements ``text`` names in capitals, lower-case ("create cluster"): a statement
    that exists has a reference page under that name, so passages that never write it are
    about something else (a question about a ``CREATE CLUSTER`` command PostgreSQL does not
    have)."""
    return [f"{verb} {noun}".lower() for verb, noun in _STATEMENT.findall(text)]


#: A name as prose writes it: a capitalised word (``Paris``, ``MongoDB``), a word with an inner
#: capital (``iPhone``) or an acronym (``NBA``).
_NAME = re.compile(r"\b(?:[A-Z][a-z]+[A-Z]?\w*|[a-z]+[A-Z]\w*|[A-Z]{2,}[a-z]?)\b")


def proper_names(text: str) -> list[str]:
    """Names a question mentions that are not code (lower-case): capitalised words other than
    a sentence's first, words with an inner capital, acronyms; stop words and the names of
    :func:`strong_identifiers` left out. A question about ``MongoDB`` or ``Paris`` over
    passages that never name it is about something else: the passages were found for its
    other, common words."""
    code = set(strong_identifiers(text))
    out: list[str] = []
    for match in _NAME.finditer(text):
        word = match.group(0)
        before = text[: match.start()].rstrip()
        first = not before or before.endswith((".", "?", "!", ":", '"', "(")) or before[-1:] == ","
        inner = bool(re.search(r"[a-z][A-Z]", word))
        if first and not inner and not word.isupper():
            continue
        low = word.lower()
        if low in STOPWORDS or low in code or len(low) < 2:
            continue
        out.append(low)
    return out


#: A lower-case prose word of four letters or more (not part of a dotted, dashed or called name).
_PLAIN_WORD = re.compile(r"(?<![\w.\-])[a-z]{4,}(?![\w.\-(])")
#: Endings folded before a word is looked up in a vocabulary ("restarting" -> "restart",
#: "bothers" -> "bother", "stopped" -> "stop"): a word-piece vocabulary holds base forms.
_INFLECTIONS = ("ing", "ers", "es", "ed", "er", "ly", "s", "d")


#: A sentence that sends the reader elsewhere instead of stating something: "For more information
#: on query planning ..., see the ANALYZE documentation.", "See Section 20.4.", "... ; see also
#: fork()", a "PEP 305 - CSV File API" reference line.
_POINTER = re.compile(
    r"^\s*(?:for (?:more|further|additional) (?:information|details)|see\b|refer to\b)"
    r"|(?:^|[,;:]\s*)see (?:also )?(?:(?:section|chapter|table|the)\b|[\w.]+\(\))"
    r"|\bPEP \d+ - ",
    re.IGNORECASE,
)


def is_pointer(text: str) -> bool:
    """Whether ``text`` points to another place rather than answering (:data:`_POINTER`)."""
    return _POINTER.search(text) is not None


#: A sentence about what the SQL standard says rather than what the system does: "SERIALIZABLE
#: is the default transaction isolation level in the standard." beside "In PostgreSQL the
#: default is ordinarily READ COMMITTED" (the PostgreSQL manual's compatibility notes set the
#: two side by side). Not "is specified in the SQL standard" (:data:`_CONFORMS`), which says the
#: system follows it, nor "in the standard form".
_STANDARD = re.compile(
    r"\b(?:in|by|according to|per) the (?:SQL )?standard\b(?!\s+(?:form|library|input|output))"
    r"|\bthe (?:SQL )?standard (?:says|requires|specifies|allows|defines|mandates)\b",
    re.IGNORECASE,
)
_CONFORMS = re.compile(
    r"\b(?:specified|defined|described|included|listed|required|present|mentioned)\s+"
    r"(?:in|by)\s+the\s+(?:SQL\s+)?standard\b",
    re.IGNORECASE,
)


#: The first part of a release-notes page's title ("What's New in Python 2.4", "E.1. Release
#: 15.20"): what changed in one version, long ago for most of them.
_RELEASE_NOTES = re.compile(r"^(?:What.s New\b|(?:[A-Z]\.\d+\.\s+)?Release \d)", re.IGNORECASE)
#: A question about versions or changes ("Which class introduced in Python 3.11 ...?", "What
#: changed in ...?"): release notes answer it. Not "changes" alone: "changing the copy also
#: changes the original" asks how things are.
_VERSION_CUES = re.compile(
    r"\d+\.\d+|\b(?:new|newer|older|versions?|introduced|added|deprecated|since|removed|"
    r"releases?|history|(?:what|has|have)\s+changed|changed\s+in)\b",
    re.IGNORECASE,
)


def is_release_notes(title: str) -> bool:
    """Whether a passage's ``title`` is a release-notes page's (:data:`_RELEASE_NOTES`)."""
    return _RELEASE_NOTES.search(title.split(" > ", 1)[0].strip()) is not None


def asks_about_versions(question: str) -> bool:
    """Whether ``question`` asks about versions or changes (:data:`_VERSION_CUES`)."""
    return _VERSION_CUES.search(question) is not None


def about_standard(text: str, question: str) -> bool:
    """Whether ``text`` tells what the SQL standard says (:data:`_STANDARD`, not
    :data:`_CONFORMS`) when ``question`` does not ask about the standard: it answers for another
    subject than the one asked about."""
    if "standard" in question.lower() or _CONFORMS.search(text):
        return False
    return _STANDARD.search(text) is not None


def known_word(word: str, vocabulary: frozenset[str]) -> bool:
    """Whether ``word`` (lower-case) or its base form is in ``vocabulary``: the word itself,
    the word without an inflection of :data:`_INFLECTIONS` (plus a final "e", or less a doubled
    consonant), "-ies" as "-y", or a word one typing error away (:func:`_one_edit`)."""
    if word in vocabulary:
        return True
    for ending in _INFLECTIONS:
        base = word.removesuffix(ending)
        if base != word and len(base) >= 3:
            if base in vocabulary or f"{base}e" in vocabulary:
                return True
            if base[-1:] == base[-2:-1] and base[:-1] in vocabulary:
                return True
    if word.endswith("ies") and f"{word[:-3]}y" in vocabulary:
        return True
    return any(e in vocabulary for e in _one_edit(word))


def near_word(word: str, text: str) -> bool:
    """Whether ``text`` (lower-case) holds ``word`` misspelt by one edit (:func:`_one_edit`),
    as a whole word ("postgress" for "postgres") or, for six letters or more, as the start of
    one ("autoincremnt" for "autoincrementing")."""
    held = set(re.findall(r"[a-z]+", text))
    n = len(word)
    starts = {h[:k] for h in held for k in (n - 1, n, n + 1) if k >= 6 and len(h) > k}
    return bool(({word} | _one_edit(word)) & (held | starts))


def _one_edit(word: str) -> set[str]:
    """Every string one deletion, transposition, replacement or insertion of a lower-case
    letter away from ``word`` (Norvig, "How to Write a Spelling Corrector", 2007): a misspelt
    word ("databse", "creat") is a known word, not an unknown name."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    return (
        {a + b[1:] for a, b in splits if b}
        | {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
        | {a + c + b[1:] for a, b in splits if b for c in letters}
        | {a + c + b for a, b in splits for c in letters}
    )


def uncommon_words(text: str, vocabulary: frozenset[str]) -> list[str]:
    """The lower-case prose words of ``text`` that ``vocabulary`` does not know
    (:func:`known_word`), stop words left out; [] when ``vocabulary`` is empty.

    ``vocabulary`` is a list of common English (:func:`ingest.factory.build_vocabulary`:
    pyspellchecker's 160,572 words and the embedding model's word pieces): "nginx" and "conda"
    are not in it, "coworker" and "reorders" are. Such a word that no passage holds
    (:func:`near_word` forgives a typo) names a thing the passages do not cover, as a
    capitalised name does (:func:`proper_names`)."""
    if not vocabulary:
        return []
    words = dict.fromkeys(_PLAIN_WORD.findall(text))
    return [w for w in words if w not in STOPWORDS and not known_word(w, vocabulary)]


def holds_word(text: str, word: str) -> bool:
    """Whether ``word`` stands in ``text`` as a whole word (not inside another: "paris" is not
    in "comparison"); both as given, no case folding."""
    return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None


def identifiers(text: str) -> list[str]:
    """The code-like tokens of ``text`` (lower-case, ``()`` and leading dashes removed), of three
    characters or more (``-X`` is an option, but ``x`` matches everything)."""
    found = [raw for raw in _TOKEN.findall(text) if is_identifier(raw)]
    names = [raw.lower().removesuffix("()").lstrip("-") for raw in found]
    return [name for name in names if len(name) >= 3 and name not in ABBREVIATIONS]


def idf(documents: Sequence[Iterable[str]]) -> dict[str, float]:
    """Inverse document frequency of every term over ``documents`` (BM25's smoothed form,
    Robertson & Zaragoza 2009: ``ln(1 + (N - df + 0.5) / (df + 0.5))``)."""
    df: Counter[str] = Counter()
    for doc in documents:
        df.update(set(doc))
    n = len(documents)
    return {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in df.items()}


def coverage(
    query: Sequence[str],
    unit: Iterable[str],
    weights: dict[str, float],
    default: float | None = None,
) -> float:
    """IDF-weighted share of the query's distinct terms that ``unit`` contains, in [0, 1].

    ``default``: the weight of a term ``weights`` lacks, ``max(weights.values())`` (1.0 for no
    weights) when ``None``; a caller scoring many units against one ``weights`` passes it
    once (:func:`top_weight`)."""
    wanted = set(query)
    if not wanted:
        return 0.0
    have = set(unit)
    if default is None:
        default = top_weight(weights)
    total = sum(weights.get(t, default) for t in wanted)
    return sum(weights.get(t, default) for t in wanted & have) / total if total else 0.0


def top_weight(weights: dict[str, float]) -> float:
    """The weight :func:`coverage` and :func:`stated_share` give a term ``weights`` lacks: the
    largest (a term no passage has is as rare as can be), 1.0 for no weights."""
    return max(weights.values(), default=1.0)


def stated_share(
    query: Sequence[str],
    unit: Iterable[str],
    weights: dict[str, float],
    default: float | None = None,
) -> float:
    """IDF-weighted share of the query's distinct terms that ``unit`` states, in [0, 1].

    As :func:`coverage`, but a term also counts as stated by a term it begins or that begins
    it when the shorter of the two has at least :data:`STATED_PREFIX` letters (the stemmer
    keeps "contractor" and "contract", "allowance" and "allow" apart: derived words of one
    stem name the same thing in a question and in the sentence that answers it).
    """
    wanted = set(query)
    if not wanted:
        return 0.0
    have = set(unit)
    if default is None:
        default = top_weight(weights)
    total = sum(weights.get(t, default) for t in wanted)
    found = sum(weights.get(t, default) for t in wanted if _stated(t, have))
    return found / total if total else 0.0


#: Letters two terms must share for one to state the other (:func:`stated_share`).
STATED_PREFIX = 5


def _stated(term: str, have: set[str]) -> bool:
    if term in have:
        return True
    if len(term) < STATED_PREFIX or term[0].isdigit():
        return False
    return any(len(h) >= STATED_PREFIX and (h.startswith(term) or term.startswith(h)) for h in have)


#: Questions that ask for a value (a number, a size, a duration, a default setting).
VALUE_CUES = re.compile(
    r"\b(how (long|many|much|large|big|often)|maximum|minimum|max|min|limit|size|length|"
    r"number of|precision|timeout|port|default)\b",
    re.IGNORECASE,
)
#: Questions that ask for a name (a function, an option, a command) or a way to do something.
NAME_CUES = re.compile(
    r"\b(which|what)\s+(\w+\s+){0,3}?(function|class|method|module|option|command|operator|"
    r"view|decorator|exception|setting|parameter|keyword|attribute|item|statement|clause|tool|"
    r"program|variable|flag|base class|string)s?\b"
    r"|(?:^|[.?!:]\s+)how (do|can|should|would) (i|you)\b",
    re.IGNORECASE,
)
#: Questions that leave an argument or a setting unspecified ask for its default ("if I don't
#: pass width", "without choosing a format", "out of the box", "when rel_tol is not passed", "a
#: host but no port?", "if I never touch checkpoint_timeout", "when effective_cache_size was
#: never set", "a stock server").
OMITTED_CUES = re.compile(
    r"\b(out of the box|(do not|don't|doesn't|does not|never|didn't|did not)\s+(\w+\s+)?"
    r"(pass|give|specify|set|say|choose|change|provide|supply|touch|modify|configure|alter|"
    r"adjust|tune|override)\w*|"
    r"without\s+(passing|giving|specifying|setting|choosing|changing|providing|supplying|"
    r"touching|modifying|configuring|adjusting|tuning)|"
    r"(is|are|was|were|has been|have been)\s+(not|never)\s+(passed|given|specified|set|"
    r"supplied|provided|changed|touched|modified|configured|adjusted|tuned)|omit\w*|"
    r"\bstock\b|fresh(ly)? install\w*|"
    r"give[sn]? no|with no\s+\w+\s+(given|specified)|but no\s+\w+\s*[?,]|unspecified|"
    r"unless\s+(\w+\s+){0,3}?(otherwise|specif\w*|giv\w*|set|told|ask\w*|pass\w*|choos\w*))",
    re.IGNORECASE,
)
#: Words that name what kind of value is asked for; a unit that repeats one is about that value.
FOCUS_WORDS = frozenset({"default", "maximum", "minimum", "limit", "lowest", "highest"})
#: Every value of a text: numbers in digits and English number words ("one minute", "zero",
#: "one million"): manuals spell small values out.
_VALUES = re.compile(
    r"\d+(?:[.,]\d+)*|\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
    r"twenty|thirty|fifty|hundred|thousand|million|billion|half|twice|none|null)\b",
    re.IGNORECASE,
)
#: A reference to a part of a document or another document ("see Section 21.1", "Table 8.13",
#: "PEP 8", "bpo-32314"): its number is no value of the text.
_REFERENCE = re.compile(
    r"\b(?:section|chapter|table|figure|example|appendix|part|step|pep|bpo|gh-issue|issue)"
    r"[\s\xa0-]*\d+(?:\.\d+)*",
    re.IGNORECASE,
)
#: Most words of a table row's first cell that still make it a name of its own.
LABEL_NAME_WORDS = 3


@dataclass(frozen=True, slots=True)
class AnswerType:
    """The expected answer type of a question (the answer-type matching of factoid QA systems,
    e.g. Harabagiu et al. 2000, "FALCON", TREC-9).

    Attributes:
        value: the question asks for a value (a unit holding a number fits).
        name: the question asks for a name or a way (a unit holding an identifier or code fits).
        focus: stems of the focus words the question uses ("default", "maximum", ...); "default"
            also when it leaves an argument or setting unspecified (:data:`OMITTED_CUES`).
        named: the kind of thing a "which <kind>" question asks for ("class", "function",
            "option", ...), lower-case; "" for other questions.
    """

    value: bool
    name: bool
    focus: frozenset[str]
    named: str = ""


def answer_type(question: str) -> AnswerType:
    """The expected answer type of ``question`` (cue words; see :class:`AnswerType`)."""
    stem = _stemmer().stemWord
    words = {w.lower() for w in re.findall(r"[a-z]+", question, re.IGNORECASE)}
    focus = {stem(w) for w in words & FOCUS_WORDS}
    if OMITTED_CUES.search(question):
        focus.add(stem("default"))
    cue = NAME_CUES.search(question)
    named = (cue.group(3) or "").lower().removeprefix("base ") if cue else ""
    return AnswerType(
        value=bool(VALUE_CUES.search(question)),
        name=bool(cue),
        focus=frozenset(focus),
        named=named,
    )


#: How a manual's definition term declares a thing of each kind: Sphinx writes "class X(...)",
#: "exception X", "@decorator", "f(args)"; PostgreSQL "name (type)" for settings and "-x,
#: --long" for options.
_DECLARES = {
    "class": re.compile(r"^\s*class\s+\S"),
    "exception": re.compile(r"^\s*exception\s+\S"),
    "function": re.compile(r"^\s*(?:async\s+)?[\w.]+\s*\("),
    "method": re.compile(r"^\s*(?:async\s+)?[\w.]+\s*\("),
    "decorator": re.compile(r"^\s*@|^\s*[\w.]+\s*\("),
    "option": re.compile(r"^\s*-"),
    "flag": re.compile(r"^\s*-"),
    "setting": re.compile(r"^\s*\w+\s+\((?:integer|boolean|string|enum|real|floating point)\)"),
    "parameter": re.compile(r"^\s*\w+\s+\((?:integer|boolean|string|enum|real|floating point)\)"),
}


def declares(named: str, term: str) -> bool:
    """Whether the definition term ``term`` declares a thing of the kind ``named`` (see
    :data:`_DECLARES`); False for kinds without a declaration form."""
    form = _DECLARES.get(named)
    return bool(form and form.search(term))


def type_match(
    kind: AnswerType,
    text: str,
    unit_terms: Iterable[str],
    is_code: bool,
    asked: frozenset[str] = frozenset(),
    *,
    label: str = "",
    subject: str = "",
) -> float:
    """How well a unit fits the answer type, in [0, 1]: the mean of the checks that apply (a
    number, in digits or words, for a value; an identifier or code for a name; the share of the
    focus words it holds: dev +1, the other sets unchanged, against any one of them).

    A table row's ``label`` (its first cell, e.g. ``allballs`` in a table of special input
    strings) is a name of its own, and so is the ``subject`` of the unit's page (lower-case, as
    :func:`workers.evidence.select.subject_name` reads it from the title: ``configparser`` of
    "configparser — Configuration file parser") where the unit names it as a word:
    "configparser classes can read and write such files" names the module a how-to question
    wants, though a plain word is no identifier.

    A question for an option or a flag ("Which pg_dumpall option ...") wants an option
    (``--globals-only``), not any name, and not one it names itself (``asked``: its names, as
    :func:`question_tokens` gives them; the "novelty" filter of answer extraction, Prager et al.
    2000). That filter for every value and name (``NOVEL_ANSWERS``) changed 10 of 248 answers
    and none of their judgements, and was removed (docs/evaluation.md, "The selector's rules").
    """
    checks: list[float] = []
    if kind.value:
        values = {v.lower() for v in _VALUES.findall(_REFERENCE.sub(" ", text))}
        checks.append(bool(values))
    if kind.name:
        names = {
            t.lower().removesuffix("()").lstrip("-")
            for t in _TOKEN.findall(text)
            if is_identifier(t)
        }
        if label and len(label.split()) <= LABEL_NAME_WORDS:
            names.add(label.lower().strip())
        if subject and holds_word(text.lower(), subject):
            names.add(subject)
        if kind.named in ("option", "flag"):
            names = {t.lower().lstrip("-") for t in _TOKEN.findall(text) if t.startswith("-")}
            checks.append(bool(names - asked))
        else:
            checks.append(is_code or bool(names))
    if kind.focus:
        # The share of the focus words held: "the default limit" wants a sentence about the
        # default limit ("The default limit is 4300 digits") over one about a default alone.
        checks.append(len(kind.focus & set(unit_terms)) / len(kind.focus))
    return sum(checks) / len(checks) if checks else 0.0


def question_tokens(question: str) -> frozenset[str]:
    """The names of ``question`` as :func:`type_match` compares them (lower-case; identifiers
    without ``()`` or leading dashes)."""
    return frozenset(
        t.lower().removesuffix("()").lstrip("-")
        for t in _TOKEN.findall(question)
        if is_identifier(t)
    )
