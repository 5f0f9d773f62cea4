"""Training pairs for the learned reranker, from what a tenant already has (issue 50).

Every pair group is one query, its candidate passages (written as the rerank pool writes them,
:func:`bench.rerank.export.passage_text`) and a 0/1 label per passage. Sources:

``structure.*`` -- the documents' own structure, which every tenant's corpus has:

- ``structure.definition``: a definition entry's name and summary (docs/definitions.md) against
  the chunk of its page that holds the summary;
- ``structure.heading``: a section heading (the last part of a chunk's heading path, its
  numbering dropped) against that section's chunks;
- ``structure.howto``: an instruction sentence ("To create a table, use ...") asked as "How do I
  create a table?", and an example's introducing sentence (a line ending in ``:`` followed by a
  line of code), against the chunk holding it;
- ``structure.table``: a table row's first cell against the chunk holding the row (the HTML
  parser writes a row as its cells joined by ``" | "``).

Hard negatives: the query's fused hits (BM25 + kNN, reciprocal rank fusion, the retrieval pool's
own search) that are not a positive, then other chunks of the same page.

``questions.<set>`` -- the labelled questions of sets that are dev sets or already judged blind
(:mod:`bench.rerank.judged`; never a set not yet judged): the question's fused candidates, a
positive being a candidate of an expected page whose passage matches an answer pattern.

Folds split by page (``page`` of a group: the manual page, ``corpus:path``, or the document id),
so no page of the held-out fold is trained on. A group's ``fused`` is the number of leading
passages that are the fused list in its order (the baseline the model is measured against).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.evaluation.questions import REFUSAL_KINDS, load_questions, page_of
from bench.rerank.export import passage_text
from bench.rerank.judged import check_trainable, load_registry, set_key
from ragstream.settings import PROJECT_ROOT

if TYPE_CHECKING:
    from elasticsearch import Elasticsearch

    from ragstream.settings import Settings
    from topics.retrieved import Candidate

__all__ = [
    "DATA_ROOT",
    "FOLDS",
    "TRAINING_SETS",
    "Chunk",
    "Group",
    "fold_of",
    "mine_structure",
    "page_key",
    "read_groups",
    "write_groups",
]

#: Where ``ragstream rerank data`` writes ``<tenant>.jsonl``.
DATA_ROOT = PROJECT_ROOT / ".local" / "rerank-data"
#: Pages are hashed into this many folds; fold 0 is held out.
FOLDS = 5
#: The labelled sets trained on (registry keys, bench/evaluation/judged.json); each must be a dev
#: set or judged blind (tests/unit/test_rerank_sets.py).
TRAINING_SETS: tuple[str, ...] = (
    "shared/eval/questions.jsonl",
    "bench/evaluation/questions.dev.jsonl",
    "bench/evaluation/questions.sample.jsonl",
    "bench/evaluation/questions.fresh.jsonl",
    "bench/evaluation/questions.newuser.jsonl",
    "bench/evaluation/questions.tenant.jsonl",
    "bench/evaluation/questions.blind-2026-12-04.jsonl",
    "bench/evaluation/questions.blind-2026-12-04b.jsonl",
    "bench/evaluation/questions.blind-2026-12-04c.jsonl",
    "bench/evaluation/questions.blind-2026-12-05.jsonl",
    "bench/evaluation/questions.blind-2026-12-07.jsonl",
)

_NUMBERING = re.compile(
    r"^\s*(?:Appendix [A-Z]\.|Chapter \d+\.|Part [IVX]+\.|[A-Z]?\.?\d+(?:\.\d+)*\.?|[A-Z]\.)\s+"
)
#: Headings that name a kind of section, not a subject (the reference pages' parts): no query.
GENERIC_HEADINGS = frozenset(
    [
        "see also",
        "description",
        "examples",
        "example",
        "notes",
        "options",
        "parameters",
        "compatibility",
        "synopsis",
        "usage",
        "environment",
        "files",
        "diagnostics",
        "outputs",
        "return value",
        "arguments",
        "overview",
        "introduction",
        "history",
        "bugs",
        "authors",
        "author",
        "exit status",
        "caveats",
        "details",
        "summary",
        "footnotes",
    ]
)
_INSTRUCTION = re.compile(
    r"(?:^|(?<=[.!?]\s)|(?<=\n))(?:For example, )?[Tt]o ([a-z][\w ,'()./-]{6,90}?), "
    r"(?:use|run|call|type|add|set|write|issue|execute|invoke|pass|specify"
    r"|you (?:can|could|must|should|need))\b"
)
_PROSE = re.compile(r"^(?:[A-Z][a-z]|[Tt]o |For example)")
_CODE_LINE = re.compile(
    r"^\s*(?:\$ |>>> |[A-Z]{3,}[ ;(]|[a-z_][\w.]*\(|[a-z_]+ -|#"
    r"|import |from |def |class |pg_|psql|python)"
)


@dataclass(frozen=True, slots=True)
class Chunk:
    """One indexed chunk: ``passage`` as the model scores it; ``page`` the fold key."""

    chunk_id: str
    doc_id: str
    chunk_no: int
    title: str
    text: str
    page: str

    @property
    def passage(self) -> str:
        """``title\\ntext`` (:func:`bench.rerank.export.passage_text`)."""
        return passage_text(self.title, self.text)


@dataclass(slots=True)
class Group:
    """A query and its labelled candidates.

    ``passages[i]`` has ``labels[i]`` (1 relevant, 0 not); the first ``fused`` passages are the
    fused list in its order (0: none, the group has no fused baseline); ``fold`` in
    ``[0, FOLDS)``, 0 held out.
    """

    query: str
    source: str
    page: str
    passages: list[str]
    labels: list[int]
    fused: int = 0
    fold: int = 0


def page_key(location: str) -> str:
    """A page's fold key: ``corpus:path`` for a manual page (``_sources`` mapped to the page),
    else the document id itself."""
    ref = page_of(location)
    return str(ref) if ref is not None else location


def fold_of(page: str) -> int:
    """The fold of ``page``: a stable hash (sha1) of the key, modulo :data:`FOLDS`."""
    return int(hashlib.sha1(page.encode(), usedforsecurity=False).hexdigest()[:8], 16) % FOLDS


def _norm(text: str) -> str:
    return " ".join(text.split()).lower()


def heading_of(title: str) -> str:
    """The last part of a heading path, without its numbering (``"36.2. Managing Database
    Connections"`` -> ``"Managing Database Connections"``)."""
    last = title.rsplit(" > ", 1)[-1]
    return _NUMBERING.sub("", last).strip()


def howto_queries(text: str) -> list[tuple[str, str]]:
    """``(kind, query)`` pairs mined from a chunk's text: instruction sentences asked as
    "How do I ...?" (kind ``howto``) and example-introducing lines (``example``)."""
    out: list[tuple[str, str]] = []
    for m in _INSTRUCTION.finditer(text):
        out.append(("howto", f"How do I {m.group(1).strip()}?"))
    lines = [line for line in text.split("\n") if line.strip()]
    for line, following in itertools.pairwise(lines):
        intro = line.strip()
        prose = _PROSE.match(intro) and not _CODE_LINE.match(intro) and len(intro.split()) >= 4
        code_follows = intro.endswith(":") and _CODE_LINE.match(following)
        if prose and code_follows and 12 <= len(intro) <= 200:
            said = intro.removeprefix("For example, ").rstrip(":").strip()
            to = re.match(r"[Tt]o ([^,;]+)$", said)
            out.append(("howto", f"How do I {to.group(1)}?") if to else ("example", said))
    return out


def table_rows(text: str) -> list[str]:
    """The first cells of a chunk's table rows (lines of ``" | "``-joined cells)."""
    cells = []
    for line in text.split("\n"):
        parts = [p.strip() for p in line.split(" | ")]
        if "  |" in line or "|  " in line:  # a program's output (aligned columns), not a table
            continue
        first = parts[0]
        if len(parts) >= 2 and 3 <= len(first) <= 80 and re.search(r"[A-Za-z]{3}", first):
            cells.append(first)
    return cells


def scan_tenant(
    es: Elasticsearch, alias: str, tenant: str
) -> tuple[list[Chunk], list[dict[str, Any]]]:
    """Every chunk and every definition entry of ``tenant`` in ``alias`` (a scroll, no vectors).

    Returns:
        ``(chunks, definitions)``; a definition is ``{"doc_id", "name", "summary", "signature"}``.
    """
    from elasticsearch.helpers import scan

    chunks: list[Chunk] = []
    definitions: list[dict[str, Any]] = []
    query = {"query": {"term": {"tenant": tenant}}}
    fields = ["doc_id", "source", "chunk_no", "title", "text", "entry", "definition"]
    for hit in scan(es, index=alias, query=query, _source=fields, size=1000):
        src = hit["_source"]
        doc_id = str(src.get("doc_id", ""))
        if src.get("entry") == "definition":
            d = src.get("definition") or {}
            definitions.append(
                {
                    "doc_id": doc_id,
                    "name": str(d.get("name", "")),
                    "summary": str(d.get("summary", "")),
                    "signature": str(d.get("signature", "")),
                }
            )
            continue
        location = str(src.get("source") or doc_id)
        chunks.append(
            Chunk(
                hit["_id"],
                doc_id,
                int(src.get("chunk_no", 0)),
                str(src.get("title") or ""),
                str(src.get("text", "")),
                page_key(location),
            )
        )
    chunks.sort(key=lambda c: (c.doc_id, c.chunk_no))
    return chunks, definitions


@dataclass(frozen=True, slots=True)
class Seed:
    """A mined query and its positive chunks, before candidates are added."""

    query: str
    source: str
    page: str
    positives: frozenset[str]


def _definition_seeds(
    by_doc: dict[str, list[Chunk]], definitions: Sequence[dict[str, Any]]
) -> list[Seed]:
    """A definition's ``name: summary`` against the (at most two) chunks of its page that hold
    the summary's first 80 characters."""
    out = []
    for d in definitions:
        summary = _norm(d["summary"])
        if len(summary) < 15 or not d["name"]:
            continue
        probe = summary[:80]
        pos = frozenset(c.chunk_id for c in by_doc.get(d["doc_id"], []) if probe in _norm(c.text))
        if pos and len(pos) <= 2:
            page = by_doc[d["doc_id"]][0].page
            out.append(Seed(f"{d['name']}: {d['summary']}", "structure.definition", page, pos))
    return out


def _page_seeds(doc_chunks: Sequence[Chunk]) -> list[Seed]:
    """A page's headings (of pages with two or more sections), instructions, examples and
    table rows."""
    out = []
    titles: dict[str, set[str]] = defaultdict(set)
    for c in doc_chunks:
        titles[c.title].add(c.chunk_id)
    for title, ids in titles.items() if len(titles) >= 2 else ():
        heading = heading_of(title)
        if len(heading.split()) >= 2 and heading.lower() not in GENERIC_HEADINGS and len(ids) <= 3:
            out.append(Seed(heading, "structure.heading", doc_chunks[0].page, frozenset(ids)))
    for c in doc_chunks:
        one = frozenset({c.chunk_id})
        out += [Seed(q, f"structure.{kind}", c.page, one) for kind, q in howto_queries(c.text)]
        out += [Seed(cell, "structure.table", c.page, one) for cell in table_rows(c.text)]
    return out


def mine_structure(
    chunks: Sequence[Chunk],
    definitions: Sequence[dict[str, Any]],
    *,
    per_source: int,
    seed: int = 0,
) -> list[Seed]:
    """Queries and positives from the documents' structure, at most ``per_source`` of each
    source (a seeded sample)."""
    by_doc: dict[str, list[Chunk]] = defaultdict(list)
    for c in chunks:
        by_doc[c.doc_id].append(c)
    found: dict[str, list[Seed]] = defaultdict(list)
    for s in _definition_seeds(by_doc, definitions):
        found[s.source].append(s)
    for doc_chunks in by_doc.values():
        for s in _page_seeds(doc_chunks):
            found[s.source].append(s)
    rng = random.Random(seed)
    out: list[Seed] = []
    for source in sorted(found):
        seeds = found[source]
        rng.shuffle(seeds)
        out += seeds[:per_source]
    return out


def question_seeds(
    tenant_corpora: set[str] | None = None,
) -> tuple[list[tuple[str, Any]], dict[str, int]]:
    """The answerable questions of :data:`TRAINING_SETS`, as ``(set key, question)``, after
    checking every set against the judged registry; and the questions per set.

    Raises:
        ConfigurationError: a set is not judged (:func:`bench.rerank.judged.check_trainable`).
    """
    check_trainable(list(TRAINING_SETS), load_registry())
    out: list[tuple[str, Any]] = []
    counts: dict[str, int] = {}
    for key in TRAINING_SETS:
        base = PROJECT_ROOT.parent if key.startswith("shared/") else PROJECT_ROOT
        path = base / key
        if not path.is_file():
            continue
        assert set_key(path) == key
        qs = [q for q in load_questions(path) if q.kind not in REFUSAL_KINDS and q.expected_pages]
        if tenant_corpora is not None:
            qs = [q for q in qs if q.corpus in tenant_corpora]
        counts[key] = len(qs)
        out += [(key, q) for q in qs]
    return out, counts


def fused_lists(
    settings: Settings,
    es: Elasticsearch,
    tenant: str,
    queries: Sequence[str],
    say: Callable[[str], None],
) -> list[list[Candidate]]:
    """Each query's fused candidates (``rerank.top_n`` of them), as the retrieval pool searches:
    the query embedder, then :meth:`HybridRetriever.search_batch` (BM25 + kNN, RRF), 64 a batch.

    Raises:
        EmbeddingModelMismatchError: the index was built with another embedding model.
    """
    import datetime as dt

    from bench.evaluation.modes import ModeRunner
    from ingest.factory import build_embedder
    from topics.queries import QueryRequest

    embedder = build_embedder(settings, role="query")
    runner = ModeRunner(es, settings.elasticsearch.index_alias, settings)
    runner.hybrid.check_model(embedder.model_id, embedder.dim)
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    top_n = settings.rerank.top_n
    out: list[list[Candidate]] = []
    for start in range(0, len(queries), 64):
        batch = list(queries[start : start + 64])
        reqs = [
            QueryRequest(tenant=tenant, query=q, deadline=deadline, top_n=top_n, top_k=top_n)
            for q in batch
        ]
        out += runner.fused(reqs, embedder.embed(batch))
        if start % 640 == 0:
            say(f"fused lists {start + len(batch)} of {len(queries)}")
    return out


def _structure_group(
    seed: Seed,
    *,
    cands: Sequence[Candidate],
    by_doc: dict[str, list[Chunk]],
    by_id: dict[str, Chunk],
    negatives: int,
    rng: random.Random,
) -> Group:
    ids = {c.chunk_id for c in cands}
    listed = [(passage_text(c.title, c.text), int(c.chunk_id in seed.positives)) for c in cands]
    n_fused = len(cands)
    if not any(label for _, label in listed):  # the positive is not retrieved: add it last
        listed += [(by_id[i].passage, 1) for i in sorted(seed.positives) if i in by_id]
        n_fused = 0
    doc = by_id[next(iter(seed.positives))].doc_id
    others = [c for c in by_doc[doc] if c.chunk_id not in seed.positives and c.chunk_id not in ids]
    rng.shuffle(others)
    return _trimmed(seed, listed, n_fused, others, negatives)


def set_source(key: str) -> str:
    """A question set's source name: ``questions.<stem>`` (``questions.dev``,
    ``questions.blind-2026-12-05``; the shared set is ``questions.shared``)."""
    stem = Path(key).name.removesuffix(".jsonl").removeprefix("questions").lstrip(".")
    return f"questions.{stem or 'shared'}"


def _asked(q: Any) -> str:
    """The question as the evaluation asks it: a follow-up made standalone from its history."""
    if not q.history:
        return str(q.question)
    from workers.conversation import standalone_question

    return standalone_question(q.history, q.question)


def _question_group(key: str, q: Any, cands: Sequence[Candidate], negatives: int) -> Group | None:
    pages = {f"{q.corpus}:{p}" for p in q.expected_pages}
    patterns = [re.compile(p, re.IGNORECASE) for p in q.answer_patterns]
    listed = []
    for c in cands:
        text = passage_text(c.title, c.text)
        on_page = page_key(c.source or c.doc_id) in pages
        listed.append((text, int(on_page and any(p.search(text) for p in patterns))))
    if not any(label for _, label in listed):
        return None
    seed = Seed(_asked(q), set_source(key), sorted(pages)[0], frozenset())
    return _trimmed(seed, listed, len(cands), [], negatives)


def build_groups(
    settings: Settings,
    es: Elasticsearch,
    tenant: str,
    *,
    per_source: int = 600,
    negatives: int = 7,
    say: Callable[[str], None] = print,
) -> tuple[list[Group], dict[str, Any]]:
    """All groups of ``tenant``: structure seeds and labelled questions, with their fused
    candidates (the retrieval pool's hybrid search) as hard negatives.

    Args:
        per_source: structure queries kept per source.
        negatives: negatives kept per training group (the best-ranked fused non-positives
            first, then other chunks of the same page); a held-out group keeps its whole fused
            list.

    Returns:
        ``(groups, stats)``: ``stats`` counts chunks, groups and pairs by source, questions per
        set, queries whose positive is in their fused list (``retrieved``; a question without
        one is ``dropped``: no label), and held-out groups with a fused list (the metrics').

    Raises:
        ConfigurationError: a training set is not judged.
        EmbeddingModelMismatchError: the index was built with another embedding model.
    """
    alias = settings.elasticsearch.index_alias
    say(f"reading the chunks of tenant {tenant} from {alias}")
    chunks, definitions = scan_tenant(es, alias, tenant)
    say(f"{len(chunks)} chunks, {len(definitions)} definition entries")
    by_id = {c.chunk_id: c for c in chunks}
    by_doc: dict[str, list[Chunk]] = defaultdict(list)
    for c in chunks:
        by_doc[c.doc_id].append(c)
    seeds = mine_structure(chunks, definitions, per_source=per_source)
    corpora = {c.page.split(":", 1)[0] for c in chunks if ":" in c.page}
    questions, set_counts = question_seeds(corpora)
    say(f"{len(seeds)} structure queries, {len(questions)} labelled questions")
    queries = [s.query for s in seeds] + [_asked(q) for _, q in questions]
    fused = fused_lists(settings, es, tenant, queries, say)
    rng = random.Random(1)
    groups = [
        _structure_group(s, cands=c, by_doc=by_doc, by_id=by_id, negatives=negatives, rng=rng)
        for s, c in zip(seeds, fused, strict=False)
    ]
    retrieved: Counter[str] = Counter(
        s.source
        for s, c in zip(seeds, fused, strict=False)
        if any(x.chunk_id in s.positives for x in c)
    )
    dropped: Counter[str] = Counter()
    for (key, q), cands in zip(questions, fused[len(seeds) :], strict=True):
        group = _question_group(key, q, cands, negatives)
        if group is None:
            dropped[set_source(key)] += 1
        else:
            retrieved[group.source] += 1
            groups.append(group)
    stats = {
        "chunks": len(chunks),
        "definitions": len(definitions),
        "groups": dict(Counter(g.source for g in groups)),
        "pairs": dict(Counter(g.source for g in groups for _ in g.labels)),
        "sets": set_counts,
        "dropped": dict(dropped),
        "retrieved": dict(retrieved),
        "held_out_with_fused_list": dict(Counter(g.source for g in groups if g.fused)),
    }
    return groups, stats


def _trimmed(
    seed: Seed, listed: list[tuple[str, int]], n_fused: int, others: Sequence[Chunk], negatives: int
) -> Group:
    """A held-out group with a fused list keeps it whole (the metrics rank it); any other keeps
    its positives and ``negatives`` negatives, fused ones first."""
    fold = fold_of(seed.page)
    if n_fused and fold == 0:
        kept = listed
    else:
        pos = [x for x in listed if x[1]]
        neg = [x for x in listed if not x[1]][: max(0, negatives - 2)]
        neg += [(c.passage, 0) for c in others[: negatives - len(neg)]]
        kept, n_fused = pos + neg, 0
    passages = [p for p, _ in kept]
    return Group(seed.query, seed.source, seed.page, passages, [y for _, y in kept], n_fused, fold)


def write_groups(groups: Sequence[Group], path: Path) -> None:
    """One JSON object a line (:class:`Group`'s fields)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as f:
        for g in groups:
            f.write(json.dumps(asdict(g)) + "\n")


def read_groups(path: Path) -> Iterator[Group]:
    """The groups :func:`write_groups` wrote."""
    with path.open() as f:
        for line in f:
            if line.strip():
                yield Group(**json.loads(line))
