"""The evidence stage on small hand-written passages: segmentation, selection, answers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from topics.answers import NOT_IN_DOCUMENTS
from workers.evidence.answer import AnswerPolicy, compose, quote
from workers.evidence.lexical import answer_type, identifiers, terms, type_match
from workers.evidence.segment import segment, split_sentences
from workers.evidence.select import EvidenceSelector, Weights


@dataclass(frozen=True)
class P:
    text: str
    title: str = ""
    chunk_id: str = "c"
    doc_id: str = "d"


LOCKS = (
    "deadlock_timeout (integer)\n"
    "This is the amount of time to wait on a lock before checking to see if there is a "
    "deadlock condition. The check for deadlock is relatively expensive, so the server doesn't "
    "run it every time it waits for a lock. We optimistically assume that deadlocks are not "
    "common in production applications and just wait on the lock for a while before checking "
    "for a deadlock. Increasing this value reduces the amount of time wasted in needless "
    "deadlock checks, but slows down reporting of real deadlock errors. If this value is "
    "specified without units, it is taken as milliseconds. The default is one second (1s), "
    "which is probably about the smallest value you would want in practice."
)
LIMITS = (
    "Table K.1. PostgreSQL Limitations\n\n"
    "Item | Upper Limit | Comment\n"
    "database size | unlimited |\n"
    "number of databases | 4,294,950,911 |\n"
    "columns per table | 1600 | further limited by tuple size fitting on a single page\n"
    "field size | 1 GB |"
)
SUBPROCESS = (
    "Run the command described by args. Wait for command to complete.\n\n"
    ">>> subprocess.run(['ls', '-l'], capture_output=True)\n"
    "CompletedProcess(args=['ls', '-l'], returncode=0, stdout=b'...', stderr=b'')\n\n"
    "If capture_output is true, stdout and stderr will be captured."
)


def test_units_keep_exact_offsets() -> None:
    for text in (LOCKS, LIMITS, SUBPROCESS):
        for unit in segment(text):
            assert text[unit.start : unit.end] == unit.text


def test_sentences_do_not_split_at_abbreviations_or_versions() -> None:
    line = "Use a tuple, e.g. (1, 2), here. It was added in 3.11. Then 42 follows."
    assert [line[a:b] for a, b in split_sentences(line)] == [
        "Use a tuple, e.g. (1, 2), here.",
        "It was added in 3.11.",
        "Then 42 follows.",
    ]


def test_code_block_stays_whole_and_table_rows_carry_their_header() -> None:
    code = [u for u in segment(SUBPROCESS) if u.kind == "code"]
    assert len(code) == 1 and code[0].text.startswith(">>> subprocess.run")
    assert "CompletedProcess" in code[0].text
    rows = [u for u in segment(LIMITS) if u.kind == "row"]
    columns = next(u for u in rows if u.text.startswith("columns per table"))
    assert columns.context == "Item | Upper Limit | Comment"


def test_terms_stem_words_and_keep_identifiers_whole() -> None:
    assert "block" in terms("blocked blocking")
    assert "shared_buffers" in terms("What is shared_buffers?")
    assert "os.getcwd" in terms("call os.getcwd() now")
    assert identifiers("Use --globals-only or typing.override") == [
        "globals-only",
        "typing.override",
    ]


def test_a_default_value_inside_a_long_paragraph_is_found() -> None:
    selector = EvidenceSelector(None)
    [ev] = selector.select(
        [("What is the default deadlock timeout before a deadlock check?", [P(LOCKS)])]
    )
    assert "(1s)" in ev.spans[0].text
    assert LOCKS[ev.spans[0].start : ev.spans[0].end] == ev.spans[0].text


def test_a_table_row_is_found_and_quoted_with_its_header() -> None:
    selector = EvidenceSelector(None)
    other = P("A table has rows. Rows are stored in pages of 8 kB.", chunk_id="x")
    [ev] = selector.select([("How many columns can a table have at most?", [other, P(LIMITS)])])
    best = ev.spans[0]
    assert best.text.startswith("columns per table | 1600") and best.n == 2
    answer = compose(ev, AnswerPolicy())
    assert answer.text.startswith("Item: columns per table; Upper Limit: 1600; Comment: further")
    assert "[2]" in answer.text


PARTS = "\n".join(
    ["# Spare parts", "", "| Part | Serial | Location |", "|------|:------:|---------:|"]
    + [f"| part {n} | SN-{1000 + n} | shelf {n % 7} |" for n in range(300)]
    + ["| backup generator | GX-5531 | basement |"]
)


def test_a_markdown_table_row_is_quoted_with_its_column_names_never_its_delimiter() -> None:
    """Issue 39: a question over a 300-row Markdown table was answered with the delimiter row
    and unrelated rows instead of the row's cells with their column names."""
    assert all(not set(u.text) <= set("|-: ") for u in segment(PARTS))
    selector = EvidenceSelector(None)
    [ev] = selector.select([("What is the serial of the backup generator?", [P(PARTS)])])
    answer = compose(ev, AnswerPolicy())
    assert answer.text.startswith(
        "Part: backup generator; Serial: GX-5531; Location: basement [1]"
    ), answer.text
    assert "---" not in answer.text


def test_a_code_block_can_be_the_evidence() -> None:
    selector = EvidenceSelector(None)
    [ev] = selector.select(
        [("How do I run ls -l with subprocess.run and capture its output?", [P(SUBPROCESS)])]
    )
    assert any(s.text.startswith(">>> subprocess.run") for s in ev.spans)


EXAMPLES = (
    "Examples\n\n"
    "To create the database demo using the default database server:\n\n"
    "$ createdb demo\n\n"
    "To create the database demo using the server on host eden, port 5000:\n\n"
    "$ createdb -p 5000 -h eden -T template0 -e demo"
)


def test_a_line_that_introduces_an_example_is_quoted_with_it() -> None:
    [ev] = EvidenceSelector(None).select(
        [("How do I create the database demo on the default server?", [P(EXAMPLES)])]
    )
    lead = ev.spans[0]
    assert lead.text.startswith("To create the database demo using the default")
    assert lead.text.endswith("$ createdb demo")  # the example the colon announces
    assert EXAMPLES[lead.start : lead.end] == lead.text


class FakeEmbedder:
    """Unit vectors by keyword: texts about locks point one way, everything else another."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # type: ignore[type-arg]
        self.calls.append(len(texts))
        rows = [[1.0, 0.0] if "lock" in t.lower() else [0.0, 1.0] for t in texts]
        return np.asarray(rows, dtype=np.float32)


def test_one_embedding_call_for_the_whole_batch() -> None:
    fake = FakeEmbedder()
    selector = EvidenceSelector(fake, dense_top=4)
    out = selector.select(
        [("How long to wait on a lock?", [P(LOCKS)]), ("Columns per table?", [P(LIMITS)])]
    )
    assert len(fake.calls) == 1
    assert fake.calls[0] == 2 + 4 + 4
    assert len(out) == 2


def test_missing_identifier_refuses_and_strong_evidence_answers() -> None:
    selector = EvidenceSelector(None)
    [absent, present] = selector.select(
        [
            ("Which columns does the pg_stat_io view have?", [P(LOCKS)]),
            ("What does deadlock_timeout default to?", [P(LOCKS)]),
        ]
    )
    assert absent.missing == ("pg_stat_io",)
    refused = compose(absent, AnswerPolicy())
    assert refused.refused and refused.text == NOT_IN_DOCUMENTS
    assert refused.reason == "missing:pg_stat_io"
    answered = compose(present, AnswerPolicy())
    assert not answered.refused and "[1]" in answered.text


def test_weak_evidence_refuses_and_the_answer_keeps_its_word_budget() -> None:
    selector = EvidenceSelector(None)
    [ev] = selector.select([("What is the capital of France?", [P(LOCKS)])])
    assert compose(ev, AnswerPolicy(min_confidence=ev.confidence + 0.01)).refused
    policy = AnswerPolicy(max_words=40, max_spans=5, keep_ratio=0.0)
    answer = compose(ev, policy)
    assert sum(s.words for s in answer.spans) <= 40 or len(answer.spans) == 1


@pytest.mark.parametrize("text", ["", "   \n\n  "])
def test_blank_passages_give_no_evidence(text: str) -> None:
    [ev] = EvidenceSelector(None).select([("anything?", [P(text)])])
    assert ev.spans == () and compose(ev, AnswerPolicy()).reason == "no_evidence"


SETTINGS = (
    "autovacuum_naptime (integer)\n\n"
    "Specifies the minimum delay between autovacuum runs on any given database. "
    "The default is one minute (1min).\n\n"
    "autovacuum_vacuum_threshold (integer)\n\n"
    "Specifies the minimum number of updated tuples needed to trigger a VACUUM. "
    "The default is 50 tuples."
)


def test_a_definition_term_heads_the_block_of_its_description() -> None:
    units = segment(SETTINGS)
    assert [u.kind for u in units][:3] == ["term", "sentence", "sentence"]
    assert units[0].block == units[1].block == units[2].block
    assert units[3].kind == "term" and units[3].block == units[4].block != units[0].block


def test_a_value_sentence_is_found_through_its_term() -> None:
    selector = EvidenceSelector(None, Weights(block=0.8, lexical=0.3))
    [ev] = selector.select([("What is the default of autovacuum_naptime?", [P(SETTINGS)])])
    value = next(s for s in ev.spans if "one minute" in s.text)
    assert value.context == "autovacuum_naptime (integer)"
    assert ev.spans.index(value) < next(i for i, s in enumerate(ev.spans) if "50 tuples" in s.text)
    text, _ = quote([value], AnswerPolicy())
    assert text == "autovacuum_naptime (integer) / The default is one minute (1min). [1]"


def test_a_sentence_names_the_identifier_of_its_term_and_number_words_are_values() -> None:
    text = (
        "statement_timeout (integer)\n\n"
        "Abort any statement that takes more than the specified amount of time. "
        "A value of zero (the default) disables the timeout.\n\n"
        "Setting statement_timeout in postgresql.conf is not recommended because it would "
        "affect all sessions."
    )
    selector = EvidenceSelector(None, Weights(block=0.8, lexical=0.3))
    question = "What is statement_timeout set to by default?"
    [ev] = selector.select([(question, [P(text)])])
    assert ev.spans[0].text == "A value of zero (the default) disables the timeout."
    kind = answer_type(question)
    assert type_match(kind, "zero (the default)", ["zero", "default"], False) == 1.0


def test_a_table_cut_by_chunking_has_no_header_row() -> None:
    text = "the first day of the month)\nIYYY | ISO 8601 week-numbering year\nIW | ISO week number"
    units = segment(text)
    assert units[0].kind == "item"
    assert [(u.kind, u.context) for u in units[1:]] == [("row", ""), ("row", "")]


@pytest.mark.parametrize(
    ("question", "default"),
    [
        ("What line width does pprint use if I don't pass width?", True),
        ("Out of the box, what level is the root logger set to?", True),
        ("What tolerance applies when rel_tol is not passed?", True),
        ("If I run pg_dump without choosing a format, what do I get?", True),
        ("How do I build an index without locking out writes?", False),
        ("What does the width argument of pprint do?", False),
    ],
)
def test_a_question_that_leaves_an_argument_unspecified_asks_for_its_default(
    question: str, default: bool
) -> None:
    assert ("default" in answer_type(question).focus) == default


def test_a_product_name_is_no_missing_identifier_but_a_code_name_is() -> None:
    selector = EvidenceSelector(None)
    [ev] = selector.select([("How long does PostgreSQL wait on a lock?", [P(LOCKS)])])
    assert ev.missing == () and not compose(ev, AnswerPolicy()).refused
    [ev] = selector.select([("What does the uuidv7() function return?", [P(LOCKS)])])
    assert ev.missing == ("uuidv7",)


def test_cache_keys_change_with_the_answer_configuration() -> None:
    import datetime as dt

    from ragstream.settings import EvidenceSettings, Settings
    from topics.queries import QueryRequest
    from workers.caches import answer_config, exact_key

    base = Settings()
    other = base.model_copy(update={"evidence": EvidenceSettings(tier_mode="llm")})
    assert answer_config(base) != answer_config(other)
    assert answer_config(base) == answer_config(Settings())
    request = QueryRequest(tenant="t", query="q?", deadline=dt.datetime.now(dt.UTC))
    assert exact_key(request, 1, answer_config(base)) != exact_key(request, 1, answer_config(other))


def test_cache_keys_change_with_the_code_that_composes_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import workers.caches as caches
    from ragstream.settings import Settings

    (tmp_path / "evidence").mkdir()
    rule = tmp_path / "evidence" / "select.py"
    rule.write_text("WEIGHT = 0.3\n")
    (tmp_path / "routing.py").write_text("TIER = 'evidence'\n")
    names = ("evidence", "routing.py", "absent.py")
    before = caches.code_digest(tmp_path, names)
    assert caches.code_digest(tmp_path, names) == before
    rule.write_text("WEIGHT = 0.4\n")  # a new evidence rule
    assert caches.code_digest(tmp_path, names) != before
    assert caches.answer_code() == caches.code_digest(
        Path(caches.__file__).parent, caches.ANSWER_CODE
    )
    base = caches.answer_config(Settings())
    monkeypatch.setattr(caches, "answer_code", lambda: "another")
    assert caches.answer_config(Settings()) != base


def test_an_option_the_question_names_is_no_answer() -> None:
    from workers.evidence.lexical import question_tokens

    question = "Besides --clean, which pg_dump option drops the objects before creating them?"
    kind = answer_type(question)
    asked = question_tokens(question)
    assert kind.named == "option" and "clean" in asked
    assert type_match(kind, "Use --clean to drop them.", ["clean"], False, asked) == 0.0
    assert type_match(kind, "Add --if-exists to it.", ["exist"], False, asked) == 1.0


def test_how_do_i_is_asked_anywhere() -> None:
    question = "I need to add an index to a busy table. How do I build it without locking writes?"
    kind = answer_type(question)
    assert kind.name  # "How do I" starts the question's second sentence
    text = "This method is invoked by specifying the concurrently option of create_index()."
    assert type_match(kind, text, terms(text), False, frozenset()) == 1.0
    plain = "Creating an index can interfere with regular operation of a database."
    assert type_match(kind, plain, terms(plain), False, frozenset()) == 0.0


def test_which_kind_questions_prefer_a_term_that_declares_that_kind() -> None:
    from workers.evidence.lexical import declares

    assert answer_type("In asyncio, which class lets you spawn tasks?").named == "class"
    assert answer_type("Which enum base class creates str members?").named == "class"
    assert answer_type("How do I sort a list?").named == ""
    assert declares("class", "class asyncio.TaskGroup")
    assert not declares("class", "asyncio.create_task(coro, *, name=None)")
    assert declares("function", "asyncio.create_task(coro, *, name=None)")
    assert declares("option", "-g, --globals-only")
    assert declares("setting", "max_connections (integer)")
    assert not declares("exception", "class ValueError")


def test_a_section_or_table_number_is_no_value() -> None:
    kind = answer_type("Which TCP port does the server listen on by default?")
    ref = "The server negotiates SSL with the client; see Section 21.1 and Table 19.2."
    val = "Port number 5432 has been registered with IANA as the customary TCP port."
    assert type_match(kind, ref, terms(ref), False) < type_match(kind, val, terms(val), False)


def test_an_answer_quotes_further_spans_only_from_the_first_ones_document() -> None:
    passages = [
        P(LOCKS, title="Lock Management", chunk_id="locks-1", doc_id="locks"),
        P("The default is 128 connections for pools. " * 2, chunk_id="pool-1", doc_id="pool"),
        P(LIMITS, title="Limits", chunk_id="locks-2", doc_id="locks"),
    ]
    [ev] = EvidenceSelector(None).select([("What does deadlock_timeout default to?", passages)])
    assert ev.spans[0].doc_id == "locks" and any(s.doc_id == "pool" for s in ev.spans)
    answer = compose(ev, AnswerPolicy(max_spans=10, max_words=1000, value_spans=10))
    # The same spans, the value statement of the lead's passage first (value_first).
    assert answer.spans[0].n == ev.spans[0].n and "one second" in answer.spans[0].text
    assert sorted(answer.spans, key=ev.spans.index) == [s for s in ev.spans if s.doc_id == "locks"]
    mixed = compose(
        ev, AnswerPolicy(max_spans=10, max_words=1000, value_spans=10, same_document=False)
    )
    assert sorted(mixed.spans, key=ev.spans.index) == list(ev.spans)


LOCK_SETTINGS = (
    "max_pred_locks_per_relation (integer)\n\n"
    "This controls how many pages or tuples of a single relation can be predicate-locked "
    "before the lock is promoted to covering the whole relation. The default is -2.\n\n"
    "deadlock_timeout (integer)\n\n"
    "This is the amount of time to wait on a lock before checking for a deadlock condition. "
    "The default is one second (1s)."
)


def test_the_label_of_a_value_says_which_setting_it_belongs_to() -> None:
    question = "By default, how long until a deadlock check is made?"
    passages = [P(LOCK_SETTINGS)]
    [plain] = EvidenceSelector(None, Weights(label=0.0)).select([(question, passages)])
    [labelled] = EvidenceSelector(None, Weights(label=2.0)).select([(question, passages)])

    def rank(ev: object, needle: str) -> int:
        spans = ev.spans
        return next(i for i, s in enumerate(spans) if needle in s.text)

    assert rank(labelled, "one second") < rank(labelled, "default is -2")
    assert rank(labelled, "one second") <= rank(plain, "one second")
    assert labelled.spans[rank(labelled, "one second")].context == "deadlock_timeout (integer)"


def test_a_which_option_question_wants_an_option_and_a_header_row_is_never_a_span() -> None:
    kind = answer_type("Which pg_dumpall option dumps only the roles?")
    asked = frozenset({"pg_dumpall"})
    prose = "pg_dumpall backs up each database of a cluster."
    option = "Dump only global objects with the pg_dumpall --globals-only option."
    assert type_match(kind, prose, terms(prose), False, asked) == 0.0
    assert type_match(kind, option, terms(option), False, asked) == 1.0
    [ev] = EvidenceSelector(None).select([("Which item has an upper limit of 1600?", [P(LIMITS)])])
    assert all(s.text != "Item | Upper Limit | Comment" for s in ev.spans)


def test_an_answer_renders_on_one_line_and_shows_a_context_once() -> None:
    [ev] = EvidenceSelector(None).select([("What does deadlock_timeout default to?", [P(LOCKS)])])
    answer = compose(ev, AnswerPolicy(max_spans=3, max_words=200))
    assert "\n" not in answer.text
    contexts = [s.context for s in answer.spans if s.context]
    for context in set(contexts):
        assert answer.text.count(context) == 1


def test_a_value_question_gets_a_shorter_answer() -> None:
    passages = [P(LOCKS, chunk_id="a", doc_id="locks"), P(LOCKS, chunk_id="b", doc_id="locks")]
    [value] = EvidenceSelector(None).select([("What does deadlock_timeout default to?", passages)])
    [other] = EvidenceSelector(None).select([("Why is the deadlock check expensive?", passages)])
    assert value.asks_value and not other.asks_value
    policy = AnswerPolicy(max_spans=3, max_words=1000, value_spans=1)
    assert len(compose(value, policy).spans) == 1
    assert len(compose(other, policy).spans) == 3


def test_the_gate_refuses_unknown_names_and_passages_far_from_the_question() -> None:
    far = P(LOCKS)
    [paris] = EvidenceSelector(None).select([("What is the weather in Paris today?", [far])])
    assert paris.unknown_names == ("paris",)
    assert compose(paris, AnswerPolicy(refuse_unknown_names=True)).reason == "unknown:paris"
    assert not compose(paris, AnswerPolicy(refuse_unknown_names=False)).refused

    @dataclass(frozen=True)
    class Scored(P):
        knn_score: float | None = None

    [ev] = EvidenceSelector(None).select(
        [("How long is deadlock_timeout?", [Scored(LOCKS, knn_score=0.8)])]
    )
    assert ev.relevance == 0.8
    assert compose(ev, AnswerPolicy(min_relevance=0.83)).reason == "off_topic:relevance=0.800"
    assert not compose(ev, AnswerPolicy(min_relevance=0.75)).refused


def test_a_word_outside_the_vocabulary_that_no_passage_holds_is_an_unknown_name() -> None:
    from workers.evidence.lexical import known_word, uncommon_words

    vocabulary = frozenset({"configure", "reverse", "proxy", "front", "restart", "bother", "stop"})
    assert known_word("restarting", vocabulary) and known_word("bothers", vocabulary)
    assert known_word("stopped", vocabulary) and not known_word("nginx", vocabulary)
    # One typing error away from a known word is no name: a misspelt question is not refused.
    assert known_word("confgure", vocabulary) and known_word("proxxy", vocabulary)
    assert uncommon_words("Is nginx.conf used by my_app?", vocabulary) == []  # code, not prose
    question = "How do I configure nginx as a reverse proxy in front of it?"
    assert uncommon_words(question, vocabulary) == ["nginx"]
    assert uncommon_words(question, frozenset()) == []  # no vocabulary: the rule is off
    far = P(LOCKS)
    [ev] = EvidenceSelector(None, vocabulary=vocabulary).select([(question, [far])])
    assert ev.unknown_names == ("nginx",)
    assert compose(ev, AnswerPolicy(refuse_unknown_names=True)).reason == "unknown:nginx"
    [plain] = EvidenceSelector(None).select([(question, [far])])
    assert plain.unknown_names == ()
    # A passage that holds the word answers for it: it is a word of the documents.
    held = P(LOCKS + "\n\nnginx can sit in front of the server.")
    [ok] = EvidenceSelector(None, vocabulary=vocabulary).select([(question, [held])])
    assert ok.unknown_names == ()


def test_a_sentence_that_points_elsewhere_does_not_lead() -> None:
    from workers.evidence.lexical import is_pointer

    assert is_pointer("For more information on planning, see the ANALYZE documentation.")
    assert is_pointer("See Section 14.1.") and is_pointer("PEP 305 - CSV File API")
    assert is_pointer("Forks a child; see also fork().")
    assert not is_pointer("You can use the EXPLAIN command to see what query plan is chosen.")
    text = (
        "For more information on the query plan, see the EXPLAIN documentation. "
        "You can use the EXPLAIN command to see the query plan."
    )
    question = "How can I see the query plan?"
    [ev] = EvidenceSelector(None).select([(question, [P(text)])])
    assert ev.spans[0].text.startswith("You can use"), [s.text for s in ev.spans]
    [ev] = EvidenceSelector(None, Weights(pointer=0.0)).select([(question, [P(text)])])
    assert ev.spans[0].text.startswith("For more information")


def test_a_unit_holding_more_of_the_focus_words_fits_better() -> None:
    kind = answer_type("How many digits is the default limit?")
    assert kind.focus == {"default", "limit"}
    both, one = "The default limit is 4300 digits.", "It uses 30-bit digits by default."
    assert type_match(kind, both, terms(both), False) > type_match(kind, one, terms(one), False)


def test_the_vocabulary_is_english_and_the_embedding_models_whole_words(tmp_path: Path) -> None:
    import json

    from ingest.factory import _model_words, build_vocabulary
    from ragstream.settings import Settings

    model = {
        "type": "WordPiece",
        "unk_token": "[UNK]",
        "continuing_subword_prefix": "##",
        "max_input_chars_per_word": 100,
        "vocab": {"[UNK]": 0, "[CLS]": 1, "proxy": 2, "##x": 3, "1600": 4, "zzyzxq": 5},
    }
    (tmp_path / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": model}))
    settings = Settings.model_validate({"embedding": {"onnx_dir": str(tmp_path)}})
    assert _model_words(settings) == {"proxy", "zzyzxq"}
    words = build_vocabulary(settings)
    # Everyday English (the questions the model's 22,000 words made the gate refuse) is known;
    # names of other software are not.
    assert {"coworker", "reorders", "zzyzxq", "proxy"} <= words
    assert not {"nginx", "conda", "mysql"} & words
    off = Settings.model_validate(
        {"embedding": {"onnx_dir": str(tmp_path)}, "evidence": {"refuse_uncommon_words": False}}
    )
    assert build_vocabulary(off) == frozenset()  # the gate off reads nothing
    (tmp_path / "tokenizer.json").unlink()
    assert _model_words(settings) == frozenset()
    (tmp_path / "vocab.txt").write_text("[PAD]\nproxy\n##x\nfront\n")
    assert _model_words(settings) == {"proxy", "front"}


def test_an_answer_budget_is_part_of_the_cache_key() -> None:
    import datetime as dt

    from topics.queries import QueryRequest
    from workers.caches import exact_key

    request = QueryRequest(tenant="t", query="q?", deadline=dt.datetime.now(dt.UTC))
    short = request.model_copy(update={"max_tokens": 1})
    assert exact_key(request, 1) != exact_key(short, 1)
    assert exact_key(short, 1) == exact_key(request.model_copy(update={"max_tokens": 1}), 1)


def test_a_term_quoted_alone_is_not_repeated_as_the_next_spans_context() -> None:
    from workers.evidence.answer import render_spans
    from workers.evidence.select import Span

    term = "timeit.timeit(stmt='pass', number=1000000)"
    spans = [
        Span(1, "c", "d", 0, len(term), term, 2.0, kind="term"),
        Span(1, "c", "d", 50, 90, "Run number executions of the statement.", 1.5, context=term),
    ]
    text = render_spans(spans)
    assert text.count(term) == 1
    assert text == f"{term} [1] Run number executions of the statement. [1]"


def test_a_value_answer_opens_with_the_value_statement_of_its_lead_passage() -> None:
    from workers.evidence.answer import value_first
    from workers.evidence.select import Span

    about = Span(1, "c", "d", 0, 40, "Maximum time between automatic WAL checkpoints.", 2.0,
                 context="checkpoint_timeout (integer)", fit=0.0)  # fmt: skip
    value = Span(1, "c", "d", 41, 80, "The default is five minutes (5min).", 1.8,
                 context="checkpoint_timeout (integer)", fit=1.0)  # fmt: skip
    other = Span(2, "e", "x", 0, 30, "The default is one minute (1min).", 1.9, fit=1.0)
    assert value_first((about, value)) == (value, about)
    assert value_first((about, other)) == (about, other)  # another document: no support
    # The next chunk of the lead's document states it: it leads.
    nxt = Span(2, "e", "d", 0, 30, "The default is five minutes (5min).", 1.9, fit=1.0)
    assert value_first((about, nxt)) == (nxt, about)
    assert value_first((value, about)) == (value, about)
    passages = [P("checkpoint_timeout (integer)\n\nMaximum time between automatic WAL "
                  "checkpoints, in seconds. The default is five minutes (5min).")]  # fmt: skip
    [ev] = EvidenceSelector(None).select([("By default, how much time may pass between two "
                                           "automatic WAL checkpoints?", passages)])  # fmt: skip
    assert ev.leads_with_value
    answer = compose(ev, AnswerPolicy(max_spans=2, max_words=200, value_spans=2))
    assert answer.text.startswith("checkpoint_timeout (integer) / The default is five minutes")
    [how] = EvidenceSelector(None).select([("How do I check how much disk space a database "
                                            "takes?", passages)])  # fmt: skip
    assert how.asks_value and not how.leads_with_value  # a way is asked for, not a value


def test_a_value_question_leads_with_a_sentence_that_holds_a_value() -> None:
    """ "Which TCP port ... by default?": sentences about "the same TCP port" cover the
    question's words better than the one that states the port; the value weight lifts it."""
    passages = [
        P("The server will listen for both normal and SSL connections on the same TCP port, "
          "and will negotiate with any connecting client whether to use SSL.", doc_id="ssl"),
        P("Port number 5432 has been registered with IANA as the customary TCP port number "
          "for servers supporting this protocol.", doc_id="protocol"),
    ]  # fmt: skip
    question = "Which TCP port does the server listen on by default?"
    [plain] = EvidenceSelector(None, Weights(value_type=0.0)).select([(question, passages)])
    [value] = EvidenceSelector(None, Weights(value_type=1.0)).select([(question, passages)])
    assert "5432" not in plain.spans[0].text
    assert "5432" in value.spans[0].text


CONFIGPARSER = (
    "The section in the INI file is called [defaults] and the key name is the same as the "
    "environment variable.\n\n"
    "Essentially, the file consists of sections, each of which contains keys with values. "
    "configparser classes can read and write such files."
)


def test_a_sentence_that_names_its_pages_subject_names_a_thing() -> None:
    from workers.evidence.select import subject_name

    assert subject_name("configparser — Configuration file parser > Quick Start") == "configparser"
    assert subject_name("EXPLAIN — show the execution plan of a statement") == "explain"
    assert subject_name("20.12. Lock Management") == ""
    how = answer_type("How do I read settings from an .ini style config file with sections?")
    text = "configparser classes can read and write such files."
    assert type_match(how, text, terms(text), False, subject="configparser") == 1.0
    assert type_match(how, text, terms(text), False) == 0.0  # a plain word is no identifier
    page = P(CONFIGPARSER, title="configparser — Configuration file parser > Quick Start")
    [ev] = EvidenceSelector(None).select(
        [("How do I read settings from an INI file that has sections and keys?", [page])]
    )
    assert "configparser classes" in ev.spans[0].text


POLICIES = (
    "A session that is going to modify rows of a table must hold a lock on the table.\n\n"
    "This policy lets every user modify only their own rows:\n\n"
    "CREATE POLICY own_rows ON accounts\n"
    "    USING (owner = current_user);"
)


def test_a_line_introducing_an_example_fits_as_the_example_and_renders_its_lines(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The intro line holds no name, its example does: scored as the two quoted together, it
    fits a how-to question; the answer keeps the example's lines under the intro."""
    import workers.evidence.select as select

    question = "How do I make sure each user can modify only their own rows in a table?"

    def intro_fit() -> float:
        scored, *_ = EvidenceSelector(None)._lexical(question, [P(POLICIES)], [segment(POLICIES)])
        return next(s.fit for s in scored if s.unit.text.startswith("This policy"))

    assert intro_fit() == 1.0
    policy = POLICIES.split("\n\n", 1)[1]
    [ev] = EvidenceSelector(None).select([(question, [P(policy)])])
    lead = ev.spans[0]
    assert lead.kind == select.EXAMPLE and lead.text.endswith("(owner = current_user);")
    text = compose(ev, AnswerPolicy()).text
    assert text.startswith(
        "This policy lets every user modify only their own rows:\n"
        "CREATE POLICY own_rows ON accounts\n    USING"
    ), text
    monkeypatch.setattr(select, "INTRO_FIT", False)
    assert intro_fit() == 0.0


def test_a_span_under_another_or_an_unknown_term_does_not_support_a_termed_lead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import workers.evidence.answer as answer
    from workers.evidence.select import Span

    def span(n: int, text: str, context: str = "", doc: str = "config") -> Span:
        return Span(n, f"c{n}", doc, 0, len(text), text, 1.0, context, "sentence", 1.0)

    lead = span(4, "The default is typically 100 connections.", "max_connections (integer)")
    same = span(4, "This parameter can only be set at server start.", "max_connections (integer)")
    orphan = span(2, "The default value is three connections.")  # its chunk cut its term off
    text, chosen = quote([lead, orphan, same], AnswerPolicy())
    assert chosen == (lead, same) and "three" not in text, text
    monkeypatch.setattr(answer, "SAME_TERM", False)
    assert quote([lead, orphan, same], AnswerPolicy())[1] == (lead, orphan, same)


def test_another_row_of_its_table_does_not_follow_a_row_lead(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Issue 39: "What is the serial number of the fire pump controller?" over a parts table
    was answered by the controller's row and then an unrelated row that matched only by the
    header every row carries."""
    import workers.evidence.answer as answer
    from workers.evidence.select import Span

    header = "| Part | Serial | Location |"

    def row(text: str, score: float, context: str = header) -> Span:
        return Span(1, "c1", "parts", 0, len(text), text, score, context, "row", 1.0)

    lead = row("| fire pump controller | FP-2207 | plant room B2 |", 1.0)
    other = row("| valve actuator 143 | VA-1143 | store 3 |", 0.9)
    text, chosen = quote([lead, other], AnswerPolicy())
    assert chosen == (lead,) and text == (
        "Part: fire pump controller; Serial: FP-2207; Location: plant room B2 [1]"
    ), text
    monkeypatch.setattr(answer, "ONE_ROW", False)
    assert quote([lead, other], AnswerPolicy())[1] == (lead, other)


def test_code_starts_its_own_lines_and_a_quote_ending_in_a_colon_is_marked_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import workers.evidence.answer as answer
    from workers.evidence.answer import render_spans
    from workers.evidence.select import Span

    code = Span(1, "c", "d", 0, 20, ">>> x = 1\n>>> x + 1\n2", 1.0, kind="code")
    intro = "leaving the maxsize at its default value of 128:"
    after = Span(1, "c", "d", 30, 80, intro, 0.9)
    text = render_spans([code, after])
    assert text == f">>> x = 1\n>>> x + 1\n2 [1]\n{intro[:-1]} … [1]"
    monkeypatch.setattr(answer, "DANGLING_COLON", False)
    assert render_spans([after]).endswith("of 128: [1]")


def test_an_example_quoted_already_is_not_quoted_again_with_its_intro() -> None:
    text = (
        "Then:\n\n"
        ">>> delta = date.today() - member_since  # the difference between two dates\n"
        ">>> print(delta.days)  # in days\n16075"
    )
    question = "How do I print the difference between two dates in days?"
    [ev] = EvidenceSelector(None).select([(question, [P(text)])])
    quoted = [s.text for s in ev.spans]
    assert sum(t.count(">>> delta") for t in quoted) == 1, quoted


def test_a_one_line_example_that_reads_as_code_is_an_intro_lines_example(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import workers.evidence.select as select

    text = (
        "The basic usage of this command is:\n\n"
        "pg_dump dbname > dumpfile\n\n"
        "The following options are supported:\n\n"
        "Dump only the data, not the schema\n"
    )
    units = segment(text)
    assert select._example(units, 0) is units[1]  # reads as code: pg_dump
    assert select._example(units, 2) is None  # a prose item is no example
    [ev] = EvidenceSelector(None).select([("How do I back up a database?", [P(text)])])
    usage = next(s for s in ev.spans if s.text.startswith("The basic usage"))
    assert usage.kind == select.EXAMPLE and usage.text.endswith("pg_dump dbname > dumpfile")
    assert compose(ev, AnswerPolicy()).text.count("pg_dump dbname > dumpfile") == 1
    monkeypatch.setattr(select, "LINE_EXAMPLES", False)
    assert select._example(units, 0) is None


def test_a_ddl_statement_no_passage_writes_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    import workers.evidence.select as select
    from workers.evidence.lexical import statement_names

    assert statement_names("Can CREATE CLUSTER or ALTER  SYSTEM do it? create table") == [
        "create cluster",
        "alter system",
    ]
    initdb = P("initdb creates a new PostgreSQL database cluster.\n\nUse CREATE\nPOLICY to add.")
    question = "How do I set up multi-master replication with the CREATE CLUSTER command?"
    [absent, present] = EvidenceSelector(None).select(
        [(question, [initdb]), ("How do I add a policy with CREATE POLICY?", [initdb])]
    )
    assert absent.missing == ("create cluster",) and compose(absent, AnswerPolicy()).refused
    assert present.missing == ()  # written across a line break, still written
    monkeypatch.setattr(select, "STATEMENTS", False)
    assert EvidenceSelector(None).select([(question, [initdb])])[0].missing == ()


def test_a_sentence_two_passages_hold_is_quoted_once() -> None:
    # A definition entry and its page's chunk state the same description: the answer quotes it
    # once and goes on to what else the passages say.
    about = "Sets the amount of memory the database server uses for shared memory buffers."
    entry = P(f"shared_buffers (integer)\n{about}", chunk_id="e", doc_id="runtime-config")
    chunk = P(
        f"shared_buffers (integer)\n{about} This parameter can only be set at server start.",
        chunk_id="c",
        doc_id="runtime-config",
    )
    [ev] = EvidenceSelector(None).select(
        [("How much memory do shared buffers use?", [entry, chunk])]
    )
    texts = [" ".join(s.text.split()) for s in ev.spans]
    assert sum(about in t for t in texts) == 1, texts
    assert any("server start" in t for t in texts)
