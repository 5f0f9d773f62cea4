"""Issue 22, fifth pass: the sentence stating a default leads a question for one; an identifier
counts only as a whole name; a question for an option opens with the span naming one; "See
also" boxes and a page's field lines are no evidence."""

from __future__ import annotations

import pytest

from tests.unit.test_evidence import P
from workers.evidence import select
from workers.evidence.answer import AnswerPolicy, compose
from workers.evidence.segment import Unit
from workers.evidence.select import EvidenceSelector, Weights, states_default

RECURSION = (
    "Previously this limit was fixed when you compiled Python, but in 2.0 the maximum "
    "recursion depth can be read and modified using sys.getrecursionlimit() and "
    "sys.setrecursionlimit(). The default value is 1000, and a rough maximum value for a given "
    "platform can be found by running a new script."
)


def _unit(text: str, kind: str = "sentence") -> Unit:
    return Unit(text=text, start=0, end=len(text), kind=kind, block=0)


@pytest.mark.parametrize(
    "text",
    [
        "The default is five minutes (5min).",
        "It defaults to -1, indicating that the value of maintenance_work_mem is used.",
        "The default value is 1000, and a rough maximum value can be found.",
        "A value of zero (the default) disables the timeout.",
        "width (default 80) specifies the desired maximum number of characters per line.",
        "By default, NAMEDATALEN is 64 so the maximum identifier length is 63 bytes.",
        "In PostgreSQL the default is ordinarily READ COMMITTED.",
    ],
)
def test_statements_of_a_default_are_recognised(text: str) -> None:
    assert states_default(_unit(text), set())


def test_a_signature_states_the_default_of_an_asked_argument_and_an_example_does_not() -> None:
    signature = "subprocess.run(args, *, stdin=None, capture_output=False, timeout=None)"
    assert states_default(_unit(signature, "term"), {"timeout"})
    assert not states_default(_unit(signature, "term"), {"maxsize"})
    example = "@lru_cache(maxsize=32)\ndef get_pep(num):"
    assert not states_default(_unit(example, "code"), {"maxsize"})
    assert not states_default(_unit("This parameter controls the default level."), set())


def _lead(question: str, text: str, weight: float) -> str:
    selector = EvidenceSelector(None, Weights(default_statement=weight))
    [evidence] = selector.select([(question, [P(text)])])
    return evidence.spans[0].text


def test_the_statement_of_the_default_leads_a_question_for_a_default() -> None:
    question = "What is the default recursion limit in Python?"
    # Lexical scores only here (no embedder): 0.5 bridges what the served selector's cosine
    # similarity narrows (there 0.2 suffices, docs/evaluation.md).
    assert _lead(question, RECURSION, 0.0).startswith("Previously")  # without the rule
    assert _lead(question, RECURSION, 0.5).startswith("The default value is 1000")
    # A question that does not ask for a default is not moved.
    other = "How can the recursion limit be read and modified in Python?"
    assert _lead(other, RECURSION, 0.5).startswith("Previously")


def test_a_sentence_about_a_default_is_not_the_statement_of_one() -> None:
    text = "This parameter controls the default isolation level of each new transaction."
    assert not states_default(_unit(text), set())
    assert states_default(_unit("leaving the maxsize at its default value of 128"), set())


@pytest.mark.parametrize(
    "question",
    [
        "What transaction isolation level does a new transaction get unless told otherwise?",
        "Unless you specify one, which encoding does open() use?",
        "Which port does SMTP.connect use when I pass a host but no port?",
        "If I never touch checkpoint_timeout, how often does PostgreSQL force a checkpoint?",
        "How much disk cache does the planner assume when effective_cache_size was never set?",
        "How many connections does a stock PostgreSQL server allow?",
    ],
)
def test_unless_told_otherwise_asks_for_a_default(question: str) -> None:
    from workers.evidence.lexical import answer_type

    assert select.DEFAULT_FOCUS in answer_type(question).focus
    assert select.DEFAULT_FOCUS not in answer_type("What does it return unless it fails?").focus
    no_default = "Why does it print a warning but no traceback when it fails?"
    assert select.DEFAULT_FOCUS not in answer_type(no_default).focus


def test_a_field_line_of_a_page_is_no_definition_term(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.evidence import segment as seg

    text = (
        "Source code: Lib/json/tool.py\n\n"
        "The json.tool module provides a simple command line interface to pretty-print JSON."
    )
    sentence = next(u for u in seg.segment(text) if u.text.startswith("The json.tool"))
    assert sentence.head == ""  # the field does not frame the paragraph after it
    monkeypatch.setattr(seg, "FIELD_LINES", False)
    sentence = next(u for u in seg.segment(text) if u.text.startswith("The json.tool"))
    assert sentence.head == "Source code: Lib/json/tool.py"
    monkeypatch.setattr(seg, "FIELD_LINES", True)
    term = seg.segment("checkpoint_timeout (integer)\n\nThe default is five minutes.")
    assert term[1].head == "checkpoint_timeout (integer)"  # a real term still heads


def test_a_see_also_box_is_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    from workers.evidence import segment as seg

    text = (
        "The csv module reads and writes sequences.\n\n"
        "See also\n\n"
        "PEP 305 - CSV File API\n\n"
        "The Python Enhancement Proposal which proposed this addition to Python.\n\n"
        "Module Contents\n\n"
        "The csv module defines the following functions."
    )
    quoted = [u.text for u in seg.segment(text)]
    assert quoted == [
        "The csv module reads and writes sequences.",
        "Module Contents",
        "The csv module defines the following functions.",
    ]
    # A box of prose alone loses only that prose.
    prose = "See also\n\nThe tutorial explains it.\n\nThe module defines two functions."
    assert [u.text for u in seg.segment(prose)] == ["The module defines two functions."]
    monkeypatch.setattr(seg, "SEE_ALSO_BOXES", False)
    assert "PEP 305 - CSV File API" in [u.text for u in seg.segment(text)]


def test_a_question_for_an_option_leads_with_the_span_that_names_one() -> None:
    from workers.evidence.answer import AnswerPolicy, compose

    intro = P(
        "pg_dumpall backs up each database in a given cluster, and also preserves cluster-wide "
        "data such as role and tablespace definitions.",
        chunk_id="a",
        doc_id="backup-dump",
    )
    option = P(
        "Cluster-wide data can be dumped alone using the pg_dumpall --globals-only option.",
        chunk_id="b",
        doc_id="backup-dump",
    )
    question = "Which pg_dumpall option backs up just the role and tablespace definitions?"
    [ev] = EvidenceSelector(None).select([(question, [intro, option])])
    assert ev.leads_with_value
    assert ev.spans[0].text.startswith("pg_dumpall backs up")  # the best span ...
    answer = compose(ev, AnswerPolicy(max_spans=2, max_words=200, value_spans=2))
    assert answer.text.startswith("Cluster-wide data can be dumped alone")  # ... does not lead


SMTP_CONNECT = (
    "SMTP.connect(host='localhost', port=0)\n\n"
    "Connect to a host on a given port. "
    "The defaults are to connect to the local host at the standard SMTP port (25)."
)


def test_a_signature_default_counts_less_than_a_stated_one() -> None:
    signature = _unit("SMTP.connect(host='localhost', port=0)", "term")
    stated = _unit("The defaults are to connect to the local host at the SMTP port (25).")
    assert states_default(signature, {"port"}) == select.SIGNATURE_DEFAULT < 1.0
    assert states_default(stated, {"port"}) == 1.0
    question = "Which port does SMTP.connect use when I don't pass a port?"
    assert _lead(question, SMTP_CONNECT, 0.5).startswith("The defaults are")


ISOLATION = (
    "SERIALIZABLE is the default transaction isolation level in the standard. "
    "In PostgreSQL the default is ordinarily READ COMMITTED, but you can change it."
)


def test_a_sentence_about_the_standard_does_not_lead_unless_the_standard_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from workers.evidence import lexical

    question = "Which isolation level does a new transaction get by default?"
    assert lexical.about_standard(ISOLATION.split(". ", maxsplit=1)[0], question)
    assert not lexical.about_standard("It is specified in the SQL standard.", question)
    assert not lexical.about_standard("Output is always in the standard form.", question)
    # Lexical scores only, a passage of two sentences: the first holds more of the question's
    # words, so the penalty is shown at 0.5 (the served pointer weight 0.2 with the cosine and
    # the whole compatibility note decides the manual's case, docs/evaluation.md).
    selector = EvidenceSelector(None, Weights(default_statement=0.2, pointer=0.5))

    def lead(q: str) -> str:
        [evidence] = selector.select([(q, [P(ISOLATION)])])
        return evidence.spans[0].text

    assert lead(question).startswith("In PostgreSQL")
    assert lead("Which isolation level is the default in the SQL standard?").startswith("SERIAL")
    monkeypatch.setattr(select, "about_standard", lambda text, question: False)  # the rule off
    assert lead(question).startswith("SERIALIZABLE")


#: The served weights of the unit score (``evidence.w_*`` settings).
SERVED = Weights(label=0.4, value_type=0.3, default_statement=0.2, release_notes=0.2)
#: A definition cut by the chunker: the second chunk starts inside the first one's overlap,
#: after the term, and holds the default.
CACHE_TERM = "effective_cache_size (integer)\n\n"
CACHE_HEAD = (
    "Sets the planner's assumption about the effective size of the disk cache that is "
    "available to a single query. This is factored into estimates of the cost of using an "
    "index; a higher value makes it more likely index scans will be used. "
)
CACHE_TAIL = (
    "The system also does not assume data remains in the disk cache between queries. "
    "If this value is specified without units, it is taken as blocks. "
)
CACHE_NEXT = "The default is 4 gigabytes (4GB). (If BLCKSZ is not 8kB, the default value scales.)"


def test_a_passage_continuing_another_takes_its_definition_term(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    question = (
        "How much disk cache does the planner assume when effective_cache_size was never set?"
    )
    first = P(CACHE_TERM + CACHE_HEAD + CACHE_TAIL, chunk_id="a", doc_id="runtime-config-query")
    second = P(CACHE_TAIL + CACHE_NEXT, chunk_id="b", doc_id="runtime-config-query")
    units = select.carry_heads(
        [first, second], [select.segment(first.text), select.segment(second.text)]
    )
    assert {u.head for u in units[1]} == {"effective_cache_size (integer)"}
    [ev] = EvidenceSelector(None, SERVED).select([(question, [first, second])])
    assert compose(ev, AnswerPolicy()).text.startswith(
        "effective_cache_size (integer) / The default is 4 gigabytes (4GB)."
    )
    # Another document's passage, or a one-line example over the overlap, lends no head.
    other = P(second.text, chunk_id="b", doc_id="elsewhere")
    assert not any(
        u.head
        for u in select.carry_heads(
            [first, other], [select.segment(first.text), select.segment(other.text)]
        )[1]
    )
    example = P("The basic usage is:\n\npsql -X -f dumpfile postgres\n\n" + CACHE_TAIL, doc_id="d2")
    after = P(CACHE_TAIL + CACHE_NEXT, chunk_id="b", doc_id="d2")
    assert not any(
        u.head
        for u in select.carry_heads(
            [example, after], [select.segment(example.text), select.segment(after.text)]
        )[1]
    )
    monkeypatch.setattr(select, "CARRY_HEADS", False)
    [ev] = EvidenceSelector(None, SERVED).select([(question, [first, second])])
    assert not compose(ev, AnswerPolicy()).text.startswith(
        "effective_cache_size (integer) / The default"
    )
