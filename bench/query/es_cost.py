"""``ragstream bench es-cost``: where Elasticsearch's share of an answer goes (issue 37).

The retrieval pool sends one ``_msearch`` per batch of questions: per question a BM25 search
and a kNN search (:meth:`workers.retrieval.hybrid.HybridRetriever._searches`, the exact bodies
built here). Over ``--questions`` of real question sets, embedded once beforehand:

1. **Profile** (Elasticsearch's profile API, ``"profile": true``, each question's two searches
   once): the BM25 search's query phase (its query tree's time, rewrite and collectors), the
   kNN search's vector search (the ``dfs.knn`` section: Elasticsearch runs a top-level ``knn``
   as a DFS phase before the query phase) and its query phase over the k hits found, and each
   search's fetch phase (loading ``_source`` of the hits); ``took`` of each search beside them.
   https://www.elastic.co/guide/en/elasticsearch/reference/8.19/search-profile.html
2. **Variants**, each one question per ``_msearch`` (as the pool at one client) over every
   question, after 10 untimed: Elasticsearch's process CPU time (``/proc``, its idle
   background subtracted) per question, the wall time of a call, and this process's own CPU
   time per question (the client: building the request, HTTP, parsing the JSON response).
   ``today`` are the pool's bodies; the others change one thing (``--variants``):
   ``bm25-only``/``knn-only`` (one of the two searches), ``no-source`` (no ``_source`` fetched:
   the fetch phase's floor), ``candidates-100``/``candidates-50`` (``num_candidates``),
   ``no-stop-words`` (the BM25 query's unstemmed clauses without stop words), ``one-search``
   (BM25 and kNN in one search, scores summed: the request shape of fusion in Elasticsearch),
   ``batch-8`` (eight questions per ``_msearch``) and ``no-source-mget`` (no ``_source``, then
   one ``_mget`` of the 30 passages the fused list keeps). Each variant's kNN lists are
   compared with a near-exhaustive search (recall@k, :func:`knn_recall`).

The profile runs after the variants, on caches as warm as a running pool's; profiling adds its
own instrumentation, so its phases are shares, not costs. Read-only against the configured
alias; Elasticsearch's request cache never serves these (it caches ``size: 0`` requests only).
"""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from ragstream.settings import Settings

Body = list[dict[str, Any]]
#: The variants of (2), in order: name → what it does to one question's four ``_msearch`` lines
#: (header, BM25 body, header, kNN body).
VARIANTS: dict[str, Callable[[Body], Body]] = {}


def _variant(name: str) -> Callable[[Callable[[Body], Body]], Callable[[Body], Body]]:
    def register(fn: Callable[[Body], Body]) -> Callable[[Body], Body]:
        VARIANTS[name] = fn
        return fn

    return register


@_variant("today")
def _today(body: Body) -> Body:
    return body


@_variant("bm25-only")
def _bm25_only(body: Body) -> Body:
    return body[:2]


@_variant("knn-only")
def _knn_only(body: Body) -> Body:
    return body[2:]


@_variant("no-source")
def _no_source(body: Body) -> Body:
    out = copy.deepcopy(body)
    out[1]["_source"] = False
    out[3]["_source"] = False
    return out


@_variant("one-search")
def _one_search(body: Body) -> Body:
    """BM25 and kNN in one search (a top-level ``knn`` beside ``query``): Elasticsearch sums a
    hit's two scores and fetches one list of ``size`` hits. Its ranking is that sum, not the
    pool's RRF (the integ-test distribution has no ``rrf`` retriever: "unknown retriever
    [rrf]"), so this prices the request shape only."""
    out = copy.deepcopy(body[:2])
    out[1]["knn"] = copy.deepcopy(body[3]["knn"])
    return out


def _candidates(n: int) -> Callable[[Body], Body]:
    def change(body: Body) -> Body:
        out = copy.deepcopy(body)
        knn = out[3]["knn"]
        knn["num_candidates"] = max(n, knn["k"])
        return out

    return change


VARIANTS["candidates-100"] = _candidates(100)
VARIANTS["candidates-50"] = _candidates(50)


@_variant("no-stop-words")
def _no_stop_words(body: Body) -> Body:
    """The unstemmed BM25 clauses without stop words (``retrieval.bm25_stop_words`` false:
    :func:`workers.retrieval.query.without_stop_words`; the stemmed ones never have them)."""
    from workers.retrieval.query import without_stop_words

    out = copy.deepcopy(body)
    for clause in out[1]["query"]["bool"]["should"]:
        ((field, match),) = clause["match"].items()
        if not field.endswith("_stemmed"):
            match["query"] = without_stop_words(match["query"])
    return out


#: Variants of (2) that change the calls, not a body: ``batch-8`` (eight questions per
#: ``_msearch``) and ``no-source-mget`` (both searches without ``_source``, then one ``_mget`` of
#: the :data:`MGET_IDS` first distinct hits, taken from the two lists in turn: the fused list's
#: length, ``retrieval.top_n``; the shape of fetching only the passages the next stage reads).
CALL_SHAPES = ("batch-8", "no-source-mget")
MGET_IDS = 30


#: Vector index types a copy of the index can be built with (``--copies``): ``hnsw`` (today's
#: float HNSW: the control, built and merged the same way as the others) and Elasticsearch
#: 8.19's quantised HNSW, int8 scalar quantisation and better binary quantisation (BBQ), each
#: searched with the same ``k`` and ``num_candidates``.
#: https://www.elastic.co/guide/en/elasticsearch/reference/8.19/dense-vector.html#dense-vector-index-options
COPY_TYPES = ("hnsw", "int8_hnsw", "bbq_hnsw")


def make_copy(es: Any, alias: str, index_type: str) -> str:
    """A copy of the index behind ``alias`` whose ``embedding`` is indexed as ``index_type``
    (same ``m`` and ``ef_construction``), filled by the client's scroll and bulk
    (:func:`elasticsearch.helpers.scan`, :func:`~elasticsearch.helpers.bulk`) and force-merged
    to one segment like the live index after ``ragstream index optimize``; returns its name
    (deleted again when it fails).

    Raises:
        elasticsearch.ApiError: the type is refused (a licence or version without it).
    """
    from elasticsearch import helpers

    source = next(iter(es.indices.get_alias(name=alias).body))
    found = es.indices.get(index=source).body[source]
    props = found["mappings"]["properties"]
    options = dict(props["embedding"].get("index_options") or {})
    options["type"] = index_type
    props["embedding"]["index_options"] = options
    name = f"bench-es-cost-{index_type.replace('_', '-')}-{int(time.time())}"
    keep = {"number_of_shards", "number_of_replicas", "analysis", "refresh_interval"}
    index_settings = {k: v for k, v in found["settings"]["index"].items() if k in keep}
    es.indices.create(index=name, mappings=found["mappings"], settings=index_settings)
    try:
        # Client-side (scroll + bulk): the integ-test distribution has no reindex module (and
        # helpers.reindex asks for data streams, which it has not either).
        docs = (
            {"_index": name, "_id": hit["_id"], "_source": hit["_source"]}
            for hit in helpers.scan(es, index=source, size=500, request_timeout=600)
        )
        helpers.bulk(es, docs, chunk_size=500, request_timeout=600)
        es.indices.refresh(index=name)
        es.indices.forcemerge(index=name, max_num_segments=1, request_timeout=3600)
    except BaseException:
        es.indices.delete(index=name, ignore_unavailable=True)
        raise
    return name


def _on_index(name: str) -> Callable[[Body], Body]:
    def change(body: Body) -> Body:
        return [{**line, "index": name} if "index" in line else line for line in body]

    return change


def _ns(section: Mapping[str, Any]) -> float:
    """A profile section's own time (``time_in_nanos``) in ms."""
    return float(section.get("time_in_nanos", 0)) / 1e6


def profile_split(bm25: Mapping[str, Any], knn: Mapping[str, Any]) -> dict[str, float]:
    """One question's searches, profiled, split into phases (ms; summed over shards).

    Args:
        bm25: the BM25 search's response with ``profile``.
        knn: the kNN search's response with ``profile``.

    Returns:
        ``{"bm25_query", "bm25_fetch", "bm25_took", "knn_search", "knn_query", "knn_fetch",
        "knn_took"}``: ``*_query`` is each search's query phase (query tree, rewrite,
        collectors), ``knn_search`` the DFS phase's vector search, ``*_fetch`` the fetch
        phase, ``*_took`` Elasticsearch's ``took`` of the whole search.
    """

    def query_phase(shard: Mapping[str, Any]) -> float:
        total = 0.0
        for search in shard.get("searches", []):
            total += sum(_ns(q) for q in search.get("query", []))
            total += float(search.get("rewrite_time", 0)) / 1e6
            total += sum(_ns(c) for c in search.get("collector", []))
        return total

    def knn_phase(shard: Mapping[str, Any]) -> float:
        total = 0.0
        for k in (shard.get("dfs") or {}).get("knn", []):
            total += sum(_ns(q) for q in k.get("query", []))
            total += float(k.get("rewrite_time", 0)) / 1e6
            total += sum(_ns(c) for c in k.get("collector", []))
        return total

    def fetch(shard: Mapping[str, Any]) -> float:
        return _ns(shard.get("fetch") or {})

    b = bm25.get("profile", {}).get("shards", [])
    k = knn.get("profile", {}).get("shards", [])
    return {
        "bm25_query": sum(query_phase(s) for s in b),
        "bm25_fetch": sum(fetch(s) for s in b),
        "bm25_took": float(bm25.get("took", 0)),
        "knn_search": sum(knn_phase(s) for s in k),
        "knn_query": sum(query_phase(s) for s in k),
        "knn_fetch": sum(fetch(s) for s in k),
        "knn_took": float(knn.get("took", 0)),
    }


#: ``num_candidates`` of the reference search (Elasticsearch's maximum).
REFERENCE_CANDIDATES = 10_000


def exact_knn_ids(es: Any, body: Body) -> list[str]:
    """The ids of the reference ``k`` nearest chunks of one question's kNN search
    (``body[3]``): the same search with ``num_candidates`` :data:`REFERENCE_CANDIDATES`, at
    which HNSW visits all but exhaustively a few tens of thousands of vectors. A brute-force
    ``script_score`` would be exact, but the integ-test distribution has no painless
    scripting ("script_lang not supported [painless]")."""
    knn = {**body[3]["knn"], "num_candidates": REFERENCE_CANDIDATES}
    search = {"size": knn["k"], "_source": False, "knn": knn}
    found = es.search(index=body[2]["index"], body=search).body
    return [h["_id"] for h in found["hits"]["hits"]]


def knn_recall(
    name: str,
    calls: Sequence[Body],
    answers: Sequence[Sequence[Mapping[str, Any]]],
    exact: Sequence[Sequence[str]],
) -> float | None:
    """Mean share of the reference ``k`` nearest chunks (:func:`exact_knn_ids`) that a variant's
    kNN search returned (recall@k), or ``None`` for a variant without a kNN search."""
    got: list[list[str]] = []
    for call, responses in zip(calls, answers, strict=True):
        searches = call[1::2]
        got += [
            [h["_id"] for h in r.get("hits", {}).get("hits", [])]
            for s, r in zip(searches, responses, strict=True)
            if "knn" in s
        ]
    if not got or len(got) != len(exact):
        return None
    shares = [len(set(g) & set(e)) / len(e) for g, e in zip(got, exact, strict=True) if e]
    return round(sum(shares) / len(shares), 4) if shares else None


def _mean(rows: Sequence[Mapping[str, float]]) -> dict[str, float]:
    keys = rows[0].keys() if rows else ()
    return {k: round(sum(r[k] for r in rows) / len(rows), 2) for k in keys}


def measure_es_cost(
    settings: Settings,
    questions: Sequence[str],
    *,
    variants: Sequence[str] = (*VARIANTS, *CALL_SHAPES),
    copies: Sequence[str] = (),
    tenant: str = "default",
    idle_s: float = 3.0,
    repeat: int = 3,
    pool: tuple[Any, Any] | None = None,
) -> dict[str, Any]:
    """Run (1) and (2) of the module docstring over ``questions``, (2) ``repeat`` times with
    the variants in turn (:func:`median_run` of each), with the retrieval pool's ``(embedder,
    retriever)`` (``pool``; default: built from ``settings``).

    Returns:
        ``{"questions", "index_alias", "profile": {phase: mean ms}, "variants": {name:
        {"es_core_ms", "client_core_ms", "wall_ms", "response_kb", "knn_recall"}}}`` (per
        question; ``knn_recall``: :func:`knn_recall`).

    Raises:
        ValueError: no questions, or an unknown variant.
        RuntimeError: Elasticsearch's process cannot be found (it must run on this machine).
    """
    from bench.query.cpu import cpu_seconds, listening_pids, service_ports
    from workers.pools.components import build_retrieval_components

    unknown = [v for v in variants if v not in VARIANTS and v not in CALL_SHAPES]
    if not questions or unknown:
        raise ValueError(f"need questions and known variants (unknown: {unknown})")
    es_pid = listening_pids(service_ports(settings)).get("elasticsearch")
    if es_pid is None:
        raise RuntimeError("Elasticsearch's process is not on this machine (or not readable)")
    embedder, retriever = pool or build_retrieval_components(settings)[:2]
    bodies = pool_bodies(embedder, retriever, questions, tenant)
    es = retriever.es

    def es_seconds() -> float:
        s = cpu_seconds(es_pid)
        if s is None:
            raise RuntimeError("Elasticsearch's process went away")
        return s

    s0, t0 = es_seconds(), time.monotonic()
    time.sleep(idle_s)
    idle_cores = (es_seconds() - s0) / (time.monotonic() - t0)

    exact = [exact_knn_ids(es, b) for b in bodies]
    for body in bodies:  # one untimed pass: the first variant meets caches as warm as the rest
        es.msearch(searches=body)
    built, changes = _build_copies(es, settings.elasticsearch.index_alias, copies)
    out: dict[str, Any] = {}
    try:
        runs: dict[str, list[dict[str, Any]]] = {}
        for _ in range(repeat):  # the variants in turn, every pass: drift spreads evenly
            for name in [*variants, *changes]:
                runs.setdefault(name, []).append(
                    _measure(
                        es,
                        bodies,
                        name,
                        changes=changes,
                        exact=exact,
                        es_seconds=es_seconds,
                        idle_cores=idle_cores,
                    )
                )
        out = {name: median_run(rows) for name, rows in runs.items()}
    finally:
        for info in built.values():
            if "index" in info:
                es.indices.delete(index=info["index"], ignore_unavailable=True)
    rows = _profile(es, bodies)  # after the variants: the caches are as warm as the pool's
    return {
        "questions": len(questions),
        "index_alias": settings.elasticsearch.index_alias,
        "es_idle_cores": round(idle_cores, 4),
        "knn_k": settings.retrieval.knn_k,
        "knn_num_candidates": settings.retrieval.knn_num_candidates,
        "bm25_size": settings.retrieval.bm25_size,
        "copies": built,
        "profile": _mean(rows),
        "variants": out,
    }


def median_run(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One variant's passes: each figure the median of the passes' (``statistics.median``),
    and ``es_core_ms_range``, the lowest and highest ES core-ms of a pass (the run's noise)."""
    import statistics

    out: dict[str, Any] = {}
    for key in rows[0]:
        values = [r[key] for r in rows if r[key] is not None]
        out[key] = round(statistics.median(values), 4) if values else None
    es = [r["es_core_ms"] for r in rows]
    out["es_core_ms_range"] = [min(es), max(es)]
    out["passes"] = len(rows)
    return out


def pool_bodies(embedder: Any, retriever: Any, questions: Sequence[str], tenant: str) -> list[Body]:
    """Each question's ``_msearch`` lines as the retrieval pool builds them (header, BM25 body,
    header, kNN body), its embedding made once by the pool's embedder."""
    import datetime as dt

    from topics.queries import QueryRequest

    now = dt.datetime.now(dt.UTC)
    requests = [
        QueryRequest(tenant=tenant, query=q, deadline=now + dt.timedelta(hours=1), created_at=now)
        for q in questions
    ]
    vectors = embedder.embed([r.query for r in requests])
    return [retriever._searches([r], vectors[i : i + 1]) for i, r in enumerate(requests)]


def knn_recall_by_set(
    embedder: Any, retriever: Any, sets: Mapping[str, Sequence[str]], tenant: str = "default"
) -> dict[str, float | None]:
    """Recall@k of the retrieval pool's kNN search (``retrieval.knn_k``, 30 by default, at
    ``retrieval.knn_num_candidates``) against :func:`exact_knn_ids`, over every question of
    each set, with the pool's ``embedder`` and ``retriever``: ``{set name: mean recall}``
    (``None`` for a set without questions)."""
    out: dict[str, float | None] = {}
    for name, questions in sets.items():
        bodies = pool_bodies(embedder, retriever, questions, tenant) if questions else []
        knn_only = [b[2:] for b in bodies]
        answers = [retriever.es.msearch(searches=b).body["responses"] for b in knn_only]
        exact = [exact_knn_ids(retriever.es, b) for b in bodies]
        out[name] = knn_recall(name, knn_only, answers, exact)
    return out


def _build_copies(
    es: Any, alias: str, copies: Sequence[str]
) -> tuple[dict[str, Any], dict[str, Callable[[Body], Body]]]:
    """:func:`make_copy` of each type of ``copies``: ``({type: {"index", "build_s"} or
    {"error"}}, {type: a change searching the copy})``."""
    built: dict[str, Any] = {}
    changes: dict[str, Callable[[Body], Body]] = {}
    for index_type in copies:
        t0 = time.monotonic()
        try:
            name = make_copy(es, alias, index_type)
        except Exception as exc:  # the type refused: said in the result, the rest measured
            built[index_type] = {"error": str(exc)[:300]}
            continue
        built[index_type] = {"index": name, "build_s": round(time.monotonic() - t0, 1)}
        changes[index_type] = _on_index(name)
    return built, changes


def _profile(es: Any, bodies: Sequence[Body]) -> list[dict[str, float]]:
    """(1): each question's two searches once with ``profile``, split by :func:`profile_split`."""
    rows = []
    for body in bodies:
        profiled = copy.deepcopy(body)
        profiled[1]["profile"] = profiled[3]["profile"] = True
        bm25, knn = es.msearch(searches=profiled).body["responses"]
        rows.append(profile_split(bm25, knn))
    return rows


def first_ids(responses: Sequence[Mapping[str, Any]], n: int) -> list[str]:
    """The first ``n`` distinct hit ids of ``responses`` (one question's BM25 and kNN lists),
    taken from the lists in turn (a stand-in for the fused order: RRF ranks a hit by its ranks
    in both lists)."""
    lists = [[h["_id"] for h in r.get("hits", {}).get("hits", [])] for r in responses]
    out: list[str] = []
    for rank in range(max((len(ids) for ids in lists), default=0)):
        for ids in lists:
            if rank < len(ids) and ids[rank] not in out:
                out.append(ids[rank])
    return out[:n]


def _measure(
    es: Any,
    bodies: Sequence[Body],
    name: str,
    *,
    changes: Mapping[str, Callable[[Body], Body]],
    exact: Sequence[Sequence[str]],
    es_seconds: Callable[[], float],
    idle_cores: float,
) -> dict[str, Any]:
    """One variant of (2): ``name`` of :data:`VARIANTS` or :data:`CALL_SHAPES`, or a copy's
    index type (``changes``)."""
    from workers.retrieval.query import CANDIDATE_EXCLUDES

    mget = name == "no-source-mget"
    if name == "batch-8":
        calls = [[line for b in bodies[i : i + 8] for line in b] for i in range(0, len(bodies), 8)]
    else:
        change = changes.get(name) or VARIANTS["no-source" if mget else name]
        calls = [change(b) for b in bodies]

    def send(call: Body) -> tuple[list[Any], int]:
        body = es.msearch(searches=call).body
        size = len(json.dumps(body))
        if mget:
            ids = first_ids(body["responses"], MGET_IDS)
            found = es.mget(
                index=call[0]["index"], ids=ids, source_excludes=CANDIDATE_EXCLUDES
            ).body
            size += len(json.dumps(found))
        return body["responses"], size

    for call in calls[:10]:
        send(call)
    size = 0
    answers = []
    e0, c0, w0 = es_seconds(), time.process_time(), time.perf_counter()
    for call in calls:
        responses, n_bytes = send(call)
        size += n_bytes
        answers.append(responses)
    wall = time.perf_counter() - w0
    es_used = max(0.0, es_seconds() - e0 - idle_cores * wall)
    n = len(bodies)
    return {
        "es_core_ms": round(1000 * es_used / n, 2),
        "client_core_ms": round(1000 * (time.process_time() - c0) / n, 2),
        "wall_ms": round(1000 * wall / len(calls), 2),
        "response_kb": round(size / 1024 / n, 1),
        "knn_recall": None if name == "one-search" else knn_recall(name, calls, answers, exact),
    }


def render(payload: Mapping[str, Any]) -> list[Table]:
    """Two tables: the profile's phases (ms per question) and the variants."""
    prof = Table(title=f"profile API, mean ms per question over {payload['questions']}")
    prof.add_column("phase")
    prof.add_column("ms")
    for phase, ms in payload["profile"].items():
        prof.add_row(phase, f"{ms:g}")
    var = Table(title="one question per _msearch (batch-8: eight), per question, median of passes")
    for col in ("variant", "ES core-ms", "ES low-high", "client core-ms", "wall ms per call",
                "response KB", "kNN recall@k"):  # fmt: skip
        var.add_column(col)
    for name, v in payload["variants"].items():
        low, high = v.get("es_core_ms_range") or (v["es_core_ms"], v["es_core_ms"])
        var.add_row(name, f"{v['es_core_ms']:g}", f"{low:g}-{high:g}",
                    *(f"{v[k]:g}" for k in ("client_core_ms", "wall_ms", "response_kb")),
                    "-" if v["knn_recall"] is None else f"{v['knn_recall']:g}")  # fmt: skip
    return [prof, var]


def es_cost_command(
    question_files: Sequence[Path],
    limit: int,
    out: Path,
    copies: Sequence[str] = (),
    repeat: int = 3,
) -> dict[str, Any]:
    """``ragstream bench es-cost``: the questions of ``question_files`` (JSONL with
    ``question``; at most ``limit``), measured (with index ``copies`` of
    :data:`COPY_TYPES`), written to ``out`` as JSON, with ``knn_recall_by_set``
    (:func:`knn_recall_by_set` over every question of each file, named by the file's stem
    without ``questions.``; ``shared`` for ``questions.jsonl``).

    Raises:
        ValueError: a copy type not in :data:`COPY_TYPES`.
    """
    unknown = [c for c in copies if c not in COPY_TYPES]
    if unknown:
        raise ValueError(f"unknown index copy types {unknown}; choose from {COPY_TYPES}")
    from ragstream.settings import get_settings

    sets: dict[str, list[str]] = {}
    for path in question_files:
        lines = path.read_text(encoding="utf-8").splitlines()
        name = path.stem.removeprefix("questions.")
        name = "shared" if name == "questions" else name  # ../shared/eval/questions.jsonl
        sets[name] = [json.loads(line)["question"] for line in lines if line.strip()]
    questions = [q for qs in sets.values() for q in qs]
    settings = get_settings()
    from workers.pools.components import build_retrieval_components

    embedder, retriever = build_retrieval_components(settings)[:2]
    payload = measure_es_cost(
        settings, questions[:limit], copies=copies, repeat=repeat, pool=(embedder, retriever)
    )
    payload["knn_recall_by_set"] = knn_recall_by_set(embedder, retriever, sets)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(payload, indent=2) + "\n")
    return payload
