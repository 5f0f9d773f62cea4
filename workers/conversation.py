"""Follow-up questions: a conversation's last question rewritten into a standalone one.

Retrieval and evidence are per question, so a follow-up such as "And how do I change it?" has to
carry what "it" is. It is rewritten from the conversation's earlier *questions* only (never the
answers' text: quoting an earlier answer makes retrieval find the same passages again and the
same quotes come back re-ordered), in the manner of the "condense question" step of
conversational retrieval (e.g. LlamaIndex's ``CondenseQuestionChatEngine``; Vakulenko et al.
2021, "Question Rewriting for Conversational Question Answering"), here without a model:

1. A question that stands on its own (no anaphor such as "it", "that", "them"; no leading "and",
   "what about"; at least :data:`MIN_CONTENT_WORDS` content words) is returned as it is.
2. Otherwise the anaphor is replaced with the topic of the last earlier question when that
   question names one in the common "What is <topic> ...?" / "Which <topic> does ...?" forms,
   and the earlier questions follow after :data:`CONTEXT_MARKER`::

       How do I change the TCP port? | context: Which TCP port does the PostgreSQL server
       listen on by default?

The part before the marker is the question asked (what kind of answer it wants comes from it
alone, :func:`split_context`); the context's words help retrieval and evidence scoring find what
the question is about.

The conversation travels on the query event as its own field
(:attr:`topics.queries.QueryRequest.conversation`, the earlier turns' questions and answers);
``query`` stays what the user typed. Every stage reads the question it answers through
:func:`question_of` (the same rewrite, made once per distinct conversation), and the evidence
stage reads :func:`last_answer` so that a follow-up is not answered with the passage the user
has just been shown.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from topics.queries import QueryRequest
from workers.evidence.lexical import NAME_CUES, STOPWORDS, answer_type, identifiers

#: Separates the rewritten question from the earlier questions it follows.
CONTEXT_MARKER = " | context: "
#: Earlier questions carried as context, most recent last.
MAX_CONTEXT_QUESTIONS = 2
#: A question with fewer content words than this leans on the conversation.
MIN_CONTENT_WORDS = 3
#: A question with an anaphor but at least this many content words says what it is about
#: ("How can I launch another program and get whatever it printed?").
SELF_CONTAINED_WORDS = 5
#: Characters kept of the context (the question itself is never cut).
MAX_CONTEXT_CHARS = 600

#: Words that point back at something earlier ("that" and "this" only closing a clause, where
#: they are no relative pronoun or determiner: "change that?", not "a folder that gets wiped").
_ANAPHOR = re.compile(
    r"\b(?:it|its|them|they|their|the same|the former|the latter|which one|that one)\b"
    r"|\b(?:that|this|these|those|there)(?=\s*(?:[?.!,;]|$))",
    re.IGNORECASE,
)
#: The anaphors the topic replaces (a possessive such as "its" stays: the context carries it).
_REPLACEABLE = re.compile(r"\b(?:it|them)\b|\b(?:that|this)(?=\s*(?:[?.!,;]|$))", re.IGNORECASE)
_LEADING = re.compile(
    r"^\s*(?:and|but|also|so|then|ok(?:ay)?|what about|how about|and what about|"
    r"and how about|what if|and if)\b[\s,]*",
    re.IGNORECASE,
)
#: Words that add to what was asked before ("How do I also see ...", "remove it again").
_ALSO = re.compile(r"\b(?:also|too|again|instead|as well)\b", re.IGNORECASE)
#: The topic a question names, by its form: "What is the default maxsize of the cache ...?" ->
#: "the default maxsize of the cache ..."; "Which TCP port does the server listen on?" ->
#: "TCP port".
_TOPIC_FORMS = (
    re.compile(r"^\s*(?:what|which)\s+(?:is|are|was|were)\s+(?P<topic>.+?)\s*\??\s*$", re.I),
    # "What does the VACUUM command do?" -> "the VACUUM command"
    re.compile(
        r"^\s*what\s+(?:does|do|did)\s+(?P<topic>.+?)\s+"
        r"(?:do|mean|return|contain|produce|hold|show)\s*\??\s*$",
        re.I,
    ),
    # "How do I create a new database from the command line?" -> "a new database from ..."
    re.compile(
        r"^\s*how\s+(?:do|can|should|would)\s+(?:i|you|we|one)\s+\w+\s+(?P<topic>.+?)\s*\??\s*$",
        re.I,
    ),
    re.compile(
        r"^\s*(?:what|which)\s+(?!(?:does|do|did|is|are|can|should|will|would|has|have)\b)"
        r"(?P<topic>(?:\S+\s+){0,4}?\S+)\s+"
        r"(?:does|do|did|is|are|can|should|will|would|has|have)\b",
        re.I,
    ),
)
#: The default a topic asks for, before the thing it is the default of: "the default value
#: of", "the default maxsize of" (a default of a setting, a parameter or an argument: a later
#: "it" is that thing). "The default work_mem" stays: "the default isolation level" is a
#: setting of its own.
_VALUE_OF = re.compile(r"^(?:the\s+|a\s+)?default\s+(?:\w+\s+)?of\s+", re.IGNORECASE)
#: "which one" / "what one": the kind of thing the earlier question asked for stands in for
#: "one" ("And which one changes it?" after "Which function of the os module returns ...?" asks
#: for a function).
_ONE = re.compile(r"\b(which|what)\s+one\b", re.IGNORECASE)
_WORD = re.compile(r"[A-Za-z_][\w.\-]*")
#: Function and question words (the evidence stage's stop words and a few of conversation).
_FUNCTION_WORDS = STOPWORDS | {"ok", "okay", "please", "thanks"}


def content_words(text: str) -> list[str]:
    """Words of ``text`` that are not function or question words (lower-case)."""
    return [w.lower() for w in _WORD.findall(text) if w.lower() not in _FUNCTION_WORDS]


def is_follow_up(question: str) -> bool:
    """Whether ``question`` leans on earlier turns (see the module docstring, step 1)."""
    if _LEADING.match(question) or _ALSO.search(question):
        return True
    words = len(content_words(question))
    anaphor = _ANAPHOR.search(question)
    if anaphor and words < SELF_CONTAINED_WORDS:
        return True
    # An anaphor before any content word is what the question is about ("Does it block other
    # sessions while it runs?"); after one, it may point inside the question ("launch another
    # program and get whatever it printed").
    if anaphor and not content_words(question[: anaphor.start()]):
        return True
    return words < MIN_CONTENT_WORDS


def topic_of(question: str) -> str:
    """The topic a question names in the forms of :data:`_TOPIC_FORMS`, else "". A question
    for the default of something is about that thing: its topic leaves the default out ("the
    default value of the shared_buffers setting" → "the shared_buffers setting"), so that "And
    how do I change it?" asks how to change the setting, not its default
    (:data:`_VALUE_OF`)."""
    for form in _TOPIC_FORMS:
        match = form.match(question)
        if match:
            topic = match["topic"].strip().rstrip("?").strip()
            topic = _VALUE_OF.sub("", topic, count=1) or topic
            if not content_words(topic):
                continue
            if not re.match(r"(?:the|a|an|my|its|this|that)\b", topic, re.I):
                topic = f"the {topic}"
            return topic
    return ""


def kind_asked(question: str) -> str:
    """The kind of thing a "which <kind>" question asks for (``function``, ``option``, ...:
    :data:`workers.evidence.lexical.NAME_CUES`), lower-case; else ""."""
    match = NAME_CUES.search(question)
    return (match[3] or "").lower() if match else ""


def split_context(text: str) -> tuple[str, str]:
    """``(question, context)`` of a rewritten question (``context`` "" when there is none)."""
    question, _, context = text.partition(CONTEXT_MARKER)
    return question, context


def standalone_question(
    history: Sequence[str],
    question: str,
    *,
    named: Sequence[str] = (),
    in_conversation: bool = False,
) -> str:
    """``question`` rewritten to stand alone, given the earlier questions of its conversation.

    Args:
        history: the earlier *user questions* of the conversation, oldest first (answers are
            not taken). Blank entries are ignored.
        question: the last question.
        named: names the last answer gave (:func:`answer_names`), added to the context: what
            an "it" most likely points at is what the user has just been told.
        in_conversation: the question was asked in a conversation (it came with its turns):
            the context follows it even when its words stand alone (step 1 then keeps the
            question, not the context).

    Returns:
        ``question`` itself (stripped, its lines kept) when there is no history, or when it
        stands alone and ``in_conversation`` is false; else the (rewritten) question followed by
        :data:`CONTEXT_MARKER`, the last :data:`MAX_CONTEXT_QUESTIONS` earlier questions (their
        own context removed) and ``named``.
    """
    asked = question.strip()
    question = " ".join(asked.split())
    earlier = [split_context(" ".join(h.split()))[0] for h in history if h.strip()]
    if not earlier:
        return asked
    if is_follow_up(question):
        rewritten = _LEADING.sub("", question, count=1) or question
        rewritten = rewritten[:1].upper() + rewritten[1:]
        kind = next((k for k in map(kind_asked, reversed(earlier)) if k), "")
        if kind:
            rewritten = _ONE.sub(lambda m: f"{m[1]} {kind}", rewritten, count=1)
        topic = next((t for t in map(topic_of, reversed(earlier)) if t), "")
        if topic:
            rewritten = _REPLACEABLE.sub(lambda _m: topic, rewritten, count=1)
    elif in_conversation:
        rewritten = question
    else:
        return asked
    context = " ".join([*earlier[-MAX_CONTEXT_QUESTIONS:], *named])[-MAX_CONTEXT_CHARS:]
    return f"{rewritten}{CONTEXT_MARKER}{context}"


#: Names of the last answer carried as context (:func:`answer_names`).
MAX_ANSWER_NAMES = 3
#: Characters of the last answer its names are read from (its opening: what it answered with).
ANSWER_OPENING_CHARS = 200


def answer_names(answer: str) -> tuple[str, ...]:
    """The code names the opening of ``answer`` gives (its first
    :data:`ANSWER_OPENING_CHARS` characters; at most :data:`MAX_ANSWER_NAMES`, in order,
    :func:`workers.evidence.lexical.identifiers`): ``"functools.lru_cache(user_function) ..."``
    → ``("functools.lru_cache", ...)``. Only names, never the answer's prose: the prose would
    bring back the passage it was quoted from."""
    return tuple(dict.fromkeys(identifiers(answer[:ANSWER_OPENING_CHARS])))[:MAX_ANSWER_NAMES]


def asks_for_a_name(question: str) -> bool:
    """Whether ``question`` asks for a name or a way to do something ("How do I ...", "Which
    function ..."; :func:`workers.evidence.lexical.answer_type`): the questions a definition
    entry can answer."""
    return answer_type(split_context(question)[0]).name


def question_of(request: QueryRequest) -> str:
    """The question the pipeline answers for ``request``: its ``query`` made standalone by its
    ``conversation`` (:func:`standalone_question` with the turns' questions, ``in_conversation``,
    and the names of the last answer, :func:`answer_names`); ``query`` itself when there is no
    conversation. The same text for every stage (retrieval, rerank, evidence, generation, the
    caches' keys)."""
    if not request.conversation:
        return request.query
    questions = tuple(t.question for t in request.conversation)
    return _standalone(questions, request.query, answer_names(last_answer(request)))


@functools.lru_cache(maxsize=4096)
def _standalone(questions: tuple[str, ...], query: str, named: tuple[str, ...]) -> str:
    return standalone_question(questions, query, named=named, in_conversation=True)


def last_answer(request: QueryRequest) -> str:
    """The answer the user was shown for the conversation's last turn ("" when there is none
    or the producer did not send it)."""
    return request.conversation[-1].answer if request.conversation else ""
