"""The one ingest pipeline of the stream path (Kafka) and the batch path (Celery).

``apply(ops)`` takes upserts and deletes in order and, per batch: parses, hashes, skips
unchanged documents (same content hash as the registry: no embedding, no ES write), chunks the
changed ones, embeds every new chunk in one batched call (through the content-hash cache),
bulk-indexes the new version, deletes the old version's chunks by id, refreshes once, records
the registry rows and bumps each touched tenant's index version.

Consistency: a document's new chunks are written before its old chunks are deleted, so during
an update a search finds at least one version; the outcome is returned only after the deletes
and the refresh, so once acknowledged a search finds exactly one version. If any new chunk
fails to index, the chunks already written for it are removed and the old version stays.
Operations on the same ``(tenant, doc_id)`` within one call apply in order (in waves); each
applied one increments the document's ``sequence``. A copy of a ``rag.ingest`` event applied
already is not applied again (outcome ``duplicate``) and an event whose ``created_at`` is too
far in the future is refused (outcome ``refused``): :mod:`ingest.order`.

With a :class:`~ingest.model_follow.ModelFollower` as embedder (``build_pipeline``), chunks are
embedded with the model the index alias records and written into that model's physical index,
checked again right before the bulk write; documents of a model the process cannot build fail
with the reason.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import structlog
from prometheus_client import Counter

from index.schema import (
    DEFINITION_ENTRY,
    EmbeddingModelMismatchError,
    chunk_id,
    definition_id,
    definition_keys,
    definition_text,
)
from index.stemming import stemmed_fields
from index.versions import IndexVersions
from ingest.acl import Row, set_readers
from ingest.index import BulkReport, ChunkIndex
from ingest.model_follow import ModelFollower
from ingest.ops import IngestOp, parse_op
from ingest.order import MAX_CLOCK_SKEW_S, duplicate, too_far_ahead
from ingest.outcome import IngestOutcome, Status
from ingest.parsers.text import (
    count_surrogates,
    escape_surrogates,
    replace_surrogates,
    surrogate_problem,
    surrogates_warning,
)
from ingest.registry import Change, DocumentRegistry, Rejection
from ingest.types import Chunk, Definition, ParsedDocument, ParseError, ParseOptions
from ragstream.db.acl import from_column, to_column
from ragstream.db.models import Document, utcnow
from ragstream.errors import RagstreamError, TransientError
from topics.metadata import typed_fields

log = structlog.get_logger(__name__)

SURROGATES_REPLACED = Counter(
    "ragstream_ingest_surrogates_replaced_total",
    "Lone surrogate code points (half of a UTF-16 pair) replaced by U+FFFD in the text, "
    "title, source or metadata of indexed documents; each such document keeps a warning.",
)

#: Outcomes of an op that applied to its document: each is a change of the document's
#: ``sequence`` (:mod:`ingest.order`).
APPLIED = frozenset({"indexed", "unchanged", "deleted", "acl"})

#: Content types whose files hold many documents (records ``<doc_id>#<record id>``).
RECORD_TYPES = frozenset({"json", "jsonl"})


class Chunks(Protocol):
    """Splits a parsed document into chunks (see :class:`ingest.chunking.Chunker`)."""

    def chunk(self, doc: ParsedDocument) -> list[Chunk]: ...


class Embeds(Protocol):
    """Embeds texts: ``(n, dim)`` float32, L2-normalised (see :mod:`ingest.embedding`)."""

    def embed(self, texts: Sequence[str]) -> np.ndarray[Any, Any]: ...


@dataclass(slots=True)
class _Doc:
    op: IngestOp
    doc_id: str
    parsed: ParsedDocument
    content_hash: str
    previous: Document | None = None
    chunks: list[Chunk] = field(default_factory=list)
    #: Its definition entries (``parsed.definitions`` when the pipeline indexes them).
    definitions: list[Definition] = field(default_factory=list)
    #: ``_id`` of each chunk, then of each definition entry (the registry keeps them all).
    chunk_ids: list[str] = field(default_factory=list)
    version: int = 0
    outcome: IngestOutcome | None = None
    #: Who may read it once written: the op's readers, else the ones it has (``None``: all).
    readers: tuple[str, ...] | None = None

    def finish(self, status: Status, error: str | None = None) -> None:
        """Set this document's outcome."""
        ok = status in ("indexed", "unchanged")
        version = (
            self.version if status == "indexed" else (self.previous.version if self.previous else 0)
        )
        chunks = (
            len(self.chunks)
            if status == "indexed"
            else (self.previous.chunk_count if self.previous and ok else 0)
        )
        self.outcome = IngestOutcome(self.op.tenant, self.doc_id, status, version, chunks, error)


def content_hash(
    parsed: ParsedDocument, op: IngestOp, chunking: str = "", *, definitions: bool = False
) -> str:
    """SHA-256 (hex) of what gets indexed: text, section headings (every chunk's title is its
    heading path), title, source, metadata, ``chunking`` (the chunker's
    :attr:`~ingest.chunking.Chunker.rules`: new rules or sizes re-chunk an unchanged text) and,
    with ``definitions``, the document's definition entries when it has any (a document
    without any keeps the hash it had before there were definition entries)."""
    meta = {**op.metadata, **parsed.metadata}
    headings = [s.heading_path for s in parsed.sections]
    entries = [dataclasses.astuple(d) for d in parsed.definitions] if definitions else []
    payload = json.dumps(
        [
            parsed.text,
            headings,
            op.title or parsed.title,
            op.source,
            sorted(meta.items(), key=str),
            chunking,
            *([entries] if entries else []),
        ],
        ensure_ascii=False,
        default=str,
    )
    return hashlib.sha256(payload.encode()).hexdigest()


class IngestPipeline:
    """Applies ingest operations; every component is given, none is constructed here.

    ``parse_options``: how ops not parsed yet are parsed (:func:`ingest.ops.parse_op`);
    :func:`ingest.factory.build_pipeline` gives the settings' (``ingest.json_text_field``).
    ``definitions``: index each document's definition entries beside its chunks (embedded with
    them, under the same tenant, version and readers, replaced and deleted with them).
    ``max_clock_skew_s``: how far ahead of this process's clock an event's ``created_at`` may
    be before the event is refused (:func:`ingest.order.too_far_ahead`).
    """

    def __init__(
        self,
        chunker: Chunks,
        embedder: Embeds,
        index: ChunkIndex,
        registry: DocumentRegistry,
        versions: IndexVersions | None = None,
        *,
        parse_options: ParseOptions | None = None,
        definitions: bool = True,
        max_clock_skew_s: float = MAX_CLOCK_SKEW_S,
    ) -> None:
        self.max_clock_skew_s = max_clock_skew_s
        self.parse_options = parse_options or ParseOptions()
        self.definitions = definitions
        self.chunker = chunker
        self.embedder = embedder
        self.index = index
        self.registry = registry
        self.versions = versions

    def apply(self, ops: Sequence[IngestOp]) -> list[list[IngestOutcome]]:
        """Apply ``ops`` in order; return the outcomes of each op (one per document).

        A copy of an event applied already, or of one earlier in ``ops``, is not applied: its
        one outcome is ``duplicate``; an op whose ``sent_at`` is too far in the future is not
        applied either: ``refused`` (:mod:`ingest.order`). The last such op of a document is
        recorded on its registry row (``last_rejected``), when it has one.

        A JSON/JSONL file op yields one document per record (``<doc_id>#<record id>``).
        Never raises for bad input: a document that cannot be parsed, chunked or indexed
        fails alone, and so does an op whose tenant or id holds a lone surrogate (recorded
        under the id with the surrogate escaped) or whose wave raised an error of the data
        (the wave's ops are then applied one at a time, and the one that raises again fails
        with the exception as its reason). Lone surrogates in an op's title, source and
        metadata become U+FFFD, as in text.

        Raises:
            TransientError: Elasticsearch is unreachable (nothing is acknowledged then).
            Exception: a store failed otherwise (the database is down, a connection broke):
                the batch is retried, nothing is recorded as failed.
        """
        results: list[list[IngestOutcome]] = [[] for _ in ops]
        kept: list[int] = []
        refused: list[IngestOutcome] = []
        for i, op in enumerate(ops):
            problem = _op_id_problem(op)
            if problem is None:
                kept.append(i)
                continue
            failed = IngestOutcome(
                escape_surrogates(op.tenant), escape_surrogates(op.doc_id), "failed", error=problem
            )
            results[i] = [failed]
            if op.op == "upsert":
                refused.append(failed)
        self._record_failed(refused)
        cleaned = [_clean_op(ops[i]) for i in kept]
        screened = self._screen(cleaned)
        for i, outcome in screened.items():
            results[kept[i]] = [outcome]
        self._record_rejected(cleaned, screened)
        for whole in _waves(cleaned):
            wave = [i for i in whole if i not in screened]
            timings: dict[str, float] = {}
            outcomes = self._apply_isolated([cleaned[i] for i in wave], timings)
            for i, outs in zip(wave, outcomes, strict=True):
                for o in outs:
                    o.timings_ms = timings
                results[kept[i]] = outs
        return results

    def _screen(self, ops: list[IngestOp]) -> dict[int, IngestOutcome]:
        """The outcomes of the ``ops`` not to apply, by index (:mod:`ingest.order`): a copy of
        an event the registry records as applied, or of an event earlier in ``ops``
        (``duplicate``), and an event too far in the future (``refused``)."""
        applied = self.registry.applied_events(
            (op.tenant, op.event_id) for op in ops if op.event_id is not None
        )
        rows = self.registry.get_many((op.tenant, op.doc_id) for op in ops)
        now = utcnow()
        #: Events of ``ops`` to be applied: the change of their document each will be.
        seen: dict[tuple[str, str], tuple[int, str]] = {}
        pending: dict[tuple[str, str], int] = {}
        out: dict[int, IngestOutcome] = {}
        for i, op in enumerate(ops):
            row = rows.get((op.tenant, op.doc_id))
            key = (op.tenant, op.event_id) if op.event_id is not None else None
            before = applied.get(key) if key is not None else None
            known = (before.sequence, before.status) if before is not None else None
            if known is None and key is not None:
                known = seen.get(key)  # the same event twice in one batch
            found = duplicate(op, known, row) or too_far_ahead(op, row, now, self.max_clock_skew_s)
            if found is not None:
                out[i] = found
            elif key is not None:
                doc = (op.tenant, op.doc_id)
                pending[doc] = pending.get(doc, row.sequence if row is not None else 0) + 1
                seen[key] = (pending[doc], "in this batch")
        return out

    def _record_rejected(self, ops: list[IngestOp], screened: dict[int, IngestOutcome]) -> None:
        """Record on each document's row the last of its events not applied (``screened``, by
        index into ``ops``), so ``GET /v1/documents/{id}`` shows it as ``last_rejected``; no
        registry call when every op applies. Every ``rag.ingest`` event has an ``event_id``
        (only such events can be screened out)."""
        rejected = [
            Rejection(op.tenant, op.doc_id, op.event_id, o.status, o.error or o.status)
            for i, o in sorted(screened.items())
            if (op := ops[i]).event_id is not None
        ]
        if rejected:
            self.registry.record_rejections(rejected)

    def _apply_isolated(
        self, ops: list[IngestOp], timings: dict[str, float]
    ) -> list[list[IngestOutcome]]:
        """:meth:`_apply_wave`; if it raises an error of the data (:func:`_is_poison`), each
        op alone, and an op that raises such an error alone fails with it (a poison op fails
        alone). Any other error (a store down, a transient error) propagates, so the batch is
        retried and nothing is acknowledged."""
        try:
            return self._apply_wave(ops, timings)
        except Exception as exc:
            if not _is_poison(exc):
                raise
            if len(ops) == 1:
                return [[self._fail_alone(ops[0], exc)]]
            log.warning(
                "ingest.wave_failed_retrying_alone", ops=len(ops), error=f"{type(exc).__name__}"
            )
        results: list[list[IngestOutcome]] = []
        for op in ops:
            try:
                results.extend(self._apply_wave([op], timings))
            except Exception as exc:
                if not _is_poison(exc):
                    raise
                results.append([self._fail_alone(op, exc)])
        return results

    def _fail_alone(self, op: IngestOp, exc: Exception) -> IngestOutcome:
        """The failed outcome of ``op`` that raised ``exc`` on its own, recorded."""
        error = f"ingest failed: {type(exc).__name__}: {exc}"
        log.error("ingest.op_failed", tenant=op.tenant, doc_id=op.doc_id, error=error[:300])
        failed = IngestOutcome(op.tenant, op.doc_id, "failed", error=error)
        if op.op == "upsert":
            self._record_failed([failed])
        return failed

    def _record_failed(self, failed: list[IngestOutcome]) -> None:
        """Record failed upserts so ``GET /v1/documents/{id}`` answers with the reason."""
        self.registry.record_failures([(o.tenant, o.doc_id, o.error or "failed") for o in failed])

    # -- one wave: each (tenant, doc_id) at most once ------------------------------------------

    def _apply_wave(
        self, ops: list[IngestOp], timings: dict[str, float]
    ) -> list[list[IngestOutcome]]:
        t0 = time.perf_counter()
        per_op: list[list[IngestOutcome]] = [[] for _ in ops]
        docs = self._parse(ops, per_op)
        timings["parse"] = _ms(t0)
        touched: set[str] = set()
        acl_rows: list[Row] = []
        tombstones: list[Row] = []  # a deleted document's row, written with its change below
        indexed = self._upsert([d for _, d in docs], timings, touched, acl_rows)
        for i, doc in docs:
            assert doc.outcome is not None
            per_op[i].append(doc.outcome)
        self._drop_stale_records(ops, docs, per_op, touched, tombstones)
        for i, op in enumerate(ops):
            if op.op == "delete":
                per_op[i].append(self._delete(op, touched, tombstones))
                for child in self.registry.children(op.tenant, op.doc_id):
                    record = IngestOp(op.tenant, child.doc_id, "delete", sent_at=op.sent_at)
                    per_op[i].append(self._delete(record, touched, tombstones))
            elif op.op == "acl":
                per_op[i].extend(set_readers(self.index, self.registry, op, touched, acl_rows))
        if touched:
            t = time.perf_counter()
            self.index.refresh()
            timings["refresh"] = _ms(t)
            if self.versions is not None:  # before the registry: see ingest/acl.py
                for tenant in sorted(touched):
                    self.versions.bump(tenant)
        # Only now, once a search can find them, are the documents recorded as indexed; each
        # change an op made or confirmed counts in its document's sequence (ingest/order.py).
        # A tombstone is written in the same transaction as its change, so that no reader sees
        # a document deleted under its previous sequence and event id.
        _report_repairs(indexed)
        self.registry.record_many(
            [(d.op.tenant, d.doc_id, _row_fields(d)) for d in indexed] + acl_rows + tombstones,
            [
                Change(o.tenant, o.doc_id, o.status, op.event_id)
                for op, outs in zip(ops, per_op, strict=True)
                for o in outs
                if o.status in APPLIED
            ],
        )
        self.registry.record_failures(
            [
                (o.tenant, o.doc_id, o.error or "failed")
                for op, outs in zip(ops, per_op, strict=True)
                if op.op == "upsert"
                for o in outs
                if o.status == "failed"
            ]
        )
        timings["total"] = _ms(t0)
        return per_op

    def _drop_stale_records(
        self,
        ops: list[IngestOp],
        docs: list[tuple[int, _Doc]],
        per_op: list[list[IngestOutcome]],
        touched: set[str],
        tombstones: list[Row],
    ) -> None:
        """A records file re-sent without some records: delete the records it no longer has."""
        kept: dict[int, set[str]] = {}
        for i, d in docs:
            if d.doc_id != ops[i].doc_id:  # a record of a records file
                kept.setdefault(i, set()).add(d.doc_id)
        for i, outs in enumerate(per_op):  # a rejected record is still in the file
            for o in outs:
                if o.doc_id != ops[i].doc_id:
                    kept.setdefault(i, set()).add(o.doc_id)
        for i, ids in kept.items():
            op = ops[i]
            for child in self.registry.children(op.tenant, op.doc_id):
                if child.doc_id not in ids:
                    per_op[i].append(
                        self._delete(
                            IngestOp(op.tenant, child.doc_id, "delete"), touched, tombstones
                        )
                    )

    def _parse(
        self, ops: list[IngestOp], per_op: list[list[IngestOutcome]]
    ) -> list[tuple[int, _Doc]]:
        """Parse every upsert not parsed yet; a parse failure becomes that op's outcome."""
        docs: list[tuple[int, _Doc]] = []
        for i, op in enumerate(ops):
            if op.op != "upsert":
                continue
            try:
                parsed_docs = parse_op(op, self.parse_options)
                found, rejected = [], []
                for n, parsed in enumerate(parsed_docs):
                    doc_id = op.doc_id
                    if parsed.content_type in RECORD_TYPES or len(parsed_docs) > 1:
                        doc_id = f"{op.doc_id}#{parsed.doc_id or n}"
                    if parsed.error is not None:  # one record rejected: it fails alone
                        rejected.append(
                            IngestOutcome(op.tenant, doc_id, "failed", error=parsed.error)
                        )
                        continue
                    digest = content_hash(
                        parsed,
                        op,
                        getattr(self.chunker, "rules", ""),
                        definitions=self.definitions,
                    )
                    found.append((i, _Doc(op, doc_id, parsed, digest)))
            except ParseError as exc:
                per_op[i].append(IngestOutcome(op.tenant, op.doc_id, "failed", error=str(exc)))
                continue
            except Exception as exc:
                error = f"cannot read the document: {type(exc).__name__}: {exc}"
                per_op[i].append(IngestOutcome(op.tenant, op.doc_id, "failed", error=error))
                continue
            docs.extend(found)
            per_op[i].extend(rejected)
        return docs

    def _upsert(
        self,
        docs: list[_Doc],
        timings: dict[str, float],
        touched: set[str],
        acl_rows: list[Row],
    ) -> list[_Doc]:
        """Chunk, embed and index the changed documents; return those now indexed (their
        registry rows are written by the caller after the refresh). An unchanged document sent
        with other readers gets them (:func:`ingest.acl.set_readers`, rows into ``acl_rows``)."""
        previous = self.registry.get_many((d.op.tenant, d.doc_id) for d in docs)
        changed: list[_Doc] = []
        for d in docs:
            d.previous = previous.get((d.op.tenant, d.doc_id))
            prev = d.previous
            kept = from_column(prev.readers) if prev is not None else None
            d.readers = d.op.principals if d.op.principals is not None else kept
            if (
                prev is not None
                and prev.status == "indexed"
                and prev.content_hash == d.content_hash
            ):
                d.finish("unchanged")
                if d.readers != kept:  # same text, new readers: no re-embedding
                    grant = IngestOp(d.op.tenant, d.doc_id, "acl", principals=d.readers)
                    failed = set_readers(self.index, self.registry, grant, touched, acl_rows)[0]
                    if failed.status == "failed":
                        d.outcome = failed
            else:
                changed.append(d)
        if not changed:
            return []
        t = time.perf_counter()
        for d in changed:
            d.chunks = self.chunker.chunk(d.parsed)
            d.definitions = list(d.parsed.definitions) if self.definitions and d.chunks else []
            d.version = (d.previous.version if d.previous else 0) + 1
            d.chunk_ids = [chunk_id(d.op.tenant, d.doc_id, d.version, c.chunk_no) for c in d.chunks]
            d.chunk_ids += [
                definition_id(d.op.tenant, d.doc_id, d.version, n)
                for n in range(len(d.definitions))
            ]
        timings["chunk"] = _ms(t)
        t = time.perf_counter()
        try:
            vectors, target = self._embed_for_write(
                [
                    text
                    for d in changed
                    for text in [c.embed_text for c in d.chunks]
                    + [definition_embed_text(e) for e in d.definitions]
                ]
            )
        except EmbeddingModelMismatchError as exc:
            for d in changed:  # recorded failed with the reason; `jobs retry` re-runs them
                d.finish("failed", f"embedding model mismatch: {exc}")
            return []
        timings["embed"] = _ms(t)
        t = time.perf_counter()
        self._index_changed(changed, vectors, touched, target)
        timings["index"] = _ms(t)
        return [d for d in changed if d.outcome and d.outcome.status == "indexed"]

    def _embed_for_write(self, texts: list[str]) -> tuple[np.ndarray[Any, Any], str | None]:
        """The vectors of ``texts`` and the index to write them into: with a
        :class:`~ingest.model_follow.ModelFollower`, the physical index of the model that
        embedded them, checked again right before the write (embedded again if the alias
        changed model meanwhile); otherwise the alias (``None``).

        Raises:
            EmbeddingModelMismatchError: the alias records a model this process cannot build.
            TransientError: the alias could not be read, or changed model on every attempt.
        """
        follower = self.embedder
        if not isinstance(follower, ModelFollower):
            return follower.embed(texts), None
        for _ in range(3):
            vectors, model_id, _ = follower.embed_for_index(texts)
            target = follower.write_index(model_id)
            if target is not None:
                return vectors, target
        raise TransientError("the index alias changed embedding model on every attempt")

    def _write(self, bodies: list[dict[str, Any]], target: str | None) -> BulkReport:
        """Bulk-index ``bodies`` into ``target`` (``None``: the alias). After a failed item the
        alias is read again at once (e.g. the index was retired and write-blocked by a
        rebuild), so the next batch follows it."""
        report = self.index.bulk_index(bodies, index=target)
        if report.failed and isinstance(self.embedder, ModelFollower):
            with contextlib.suppress(RagstreamError):  # the next batch meets (and reports) it
                self.embedder.follow(force=True)
        return report

    def _index_changed(
        self,
        changed: list[_Doc],
        vectors: np.ndarray[Any, Any],
        touched: set[str],
        target: str | None = None,
    ) -> None:
        bodies: list[dict[str, Any]] = []
        row = 0
        now = utcnow().isoformat()
        for d in changed:
            for c, cid in zip(d.chunks, d.chunk_ids, strict=False):
                bodies.append(_body(d, c, cid, vectors[row], now))
                row += 1
            for n, e in enumerate(d.definitions):
                did = d.chunk_ids[len(d.chunks) + n]
                bodies.append(_definition_body(d, e, did, vectors[row], now))
                row += 1
        report = self._write(bodies, target)
        rollback: list[str] = []
        stale: dict[str, _Doc] = {}
        for d in changed:
            failures = [report.failed[c] for c in d.chunk_ids if c in report.failed]
            if not d.chunks:
                failures = ["document has no indexable text"]
            if failures:
                rollback.extend(c for c in d.chunk_ids if c not in report.failed)
                d.finish("failed", f"indexing failed: {failures[0]}")
                continue
            new_ids = set(d.chunk_ids)
            old_ids = d.previous.chunk_ids if d.previous else []
            stale.update({c: d for c in old_ids if c not in new_ids})
            d.finish("indexed")
            touched.add(d.op.tenant)
        if rollback:
            self.index.delete_ids(rollback, index=target)
        if stale:
            for cid, reason in self.index.delete_ids(sorted(stale)).failed.items():
                # The new version is in but an old chunk lingers: report it, keep the ids.
                stale[cid].finish("failed", f"old chunk {cid} not deleted: {reason}")

    def _delete(self, op: IngestOp, touched: set[str], tombstones: list[Row]) -> IngestOutcome:
        """Delete ``op``'s chunks from the index; its registry row (status ``deleted``) goes to
        ``tombstones``, for the wave to write with the op's change in one transaction."""
        prev = self.registry.get_many([(op.tenant, op.doc_id)]).get((op.tenant, op.doc_id))
        ids = set(prev.chunk_ids if prev else []) | set(
            self.index.chunk_ids_of(op.tenant, op.doc_id)
        )
        report = self.index.delete_ids(sorted(ids))
        if report.failed:
            reason = next(iter(report.failed.values()))
            return IngestOutcome(op.tenant, op.doc_id, "failed", error=f"delete failed: {reason}")
        tombstone = {
            "status": "deleted",
            "chunk_ids": [],
            "chunk_count": 0,
            "content_hash": None,
            "version": prev.version if prev else 0,
            "error": None,
            "warnings": None,
        }
        tombstones.append((op.tenant, op.doc_id, tombstone))
        touched.add(op.tenant)
        return IngestOutcome(op.tenant, op.doc_id, "deleted", prev.version if prev else 0, 0)


def _row_fields(d: _Doc) -> dict[str, Any]:
    return {
        "content_hash": d.content_hash,
        "version": d.version,
        "status": "indexed",
        "source": d.op.source,
        "title": d.op.title or d.parsed.title,
        "chunk_ids": d.chunk_ids,
        "chunk_count": len(d.chunks),
        "error": None,
        "warnings": [*d.op.warnings, *d.parsed.warnings] or None,
        "metadata_": {**d.op.metadata, **d.parsed.metadata},
        "readers": to_column(d.readers),
    }


def _report_repairs(indexed: list[_Doc]) -> None:
    """Log and count what was repaired in the input of each of the ``indexed`` documents
    (lone surrogates replaced: ``ingest.surrogates_replaced``, one line per document); the
    warnings themselves go on the registry row (:func:`_row_fields`)."""
    for d in indexed:
        replaced = d.op.surrogates + d.parsed.surrogates
        if not replaced:
            continue
        SURROGATES_REPLACED.inc(replaced)
        log.warning(
            "ingest.surrogates_replaced",
            tenant=d.op.tenant,
            doc_id=d.doc_id,
            version=d.version,
            surrogates=replaced,
            warnings=[*d.op.warnings, *d.parsed.warnings],
        )


def _body(d: _Doc, c: Chunk, cid: str, vector: np.ndarray[Any, Any], now: str) -> dict[str, Any]:
    meta = {k: v for k, v in {**d.op.metadata, **d.parsed.metadata}.items() if v is not None}
    title = c.title or d.op.title or d.parsed.title
    # The text of each value for term filters, and its typed companions for range filters
    # (topics/metadata.py: derived from the same text, so a rebuild derives them alike).
    text = {k: str(v) for k, v in meta.items()}
    fields = {"metadata": text, **typed_fields(text)}
    return _entry_body(d, cid, c.chunk_no, title, c.text, _embed_title(c), vector, now, fields)


def _definition_body(
    d: _Doc, e: Definition, did: str, vector: np.ndarray[Any, Any], now: str
) -> dict[str, Any]:
    """A definition entry's document: the chunk fields it shares (``title`` = its name,
    ``text`` = :func:`~index.schema.definition_text`, ``embed_title`` = its name, so a rebuild
    embeds :func:`definition_embed_text` again; ``chunk_no`` -1: no passage position) and
    ``definition`` (:data:`~index.schema.DEFINITION_FIELDS`)."""
    fields = {
        "metadata": {},
        "entry": DEFINITION_ENTRY,
        "definition": {
            "name": e.name,
            "keys": definition_keys(e.name),
            "kind": e.kind,
            "signature": e.signature,
            "summary": e.summary,
            "example": e.example,
            "anchor": e.anchor,
        },
    }
    text = definition_text(e.signature, e.summary, e.example)
    return _entry_body(d, did, -1, e.name, text, e.name, vector, now, fields)


def _entry_body(  # noqa: PLR0917 - the index document's own fields
    d: _Doc,
    entry_id: str,
    chunk_no: int,
    title: str,
    text: str,
    embed_title: str,
    vector: np.ndarray[Any, Any],
    now: str,
    fields: dict[str, Any],
) -> dict[str, Any]:
    """The index document of one entry of ``d`` (a chunk or a definition entry): the
    document's tenant, id, version, hash, source, type, language and readers, the entry's
    own fields, and ``fields``."""
    return {
        "tenant": d.op.tenant,
        "doc_id": d.doc_id,
        "chunk_id": entry_id,
        "chunk_no": chunk_no,
        "version": d.version,
        "content_hash": d.content_hash,
        "title": title,
        "text": text,
        **stemmed_fields(title, text),
        "embed_title": embed_title,
        "source": d.op.source or "",
        "content_type": d.parsed.content_type,
        "lang": str(d.parsed.metadata.get("lang") or ""),
        **fields,
        **({} if d.readers is None else {"principals": list(d.readers)}),
        "indexed_at": now,
        "embedding": [float(x) for x in vector],
    }


def definition_embed_text(e: Definition) -> str:
    """What the embedder reads of a definition entry: its name, then
    :func:`~index.schema.definition_text`
    (the same text an index rebuild embeds again: ``title`` + ``text``)."""
    return f"{e.name}\n{definition_text(e.signature, e.summary, e.example)}"


def _embed_title(c: Chunk) -> str:
    """The title line the chunker put in front of the text (kept for index rebuilds)."""
    if c.embed_text.endswith(c.text) and len(c.embed_text) > len(c.text):
        return c.embed_text[: len(c.embed_text) - len(c.text)].rstrip("\n")
    return ""


def _waves(ops: Sequence[IngestOp]) -> list[list[int]]:
    """Split op indices into waves where each ``(tenant, doc_id)`` appears at most once,
    keeping the order of operations on the same document."""
    waves: list[list[int]] = []
    last_wave: dict[tuple[str, str], int] = {}
    for i, op in enumerate(ops):
        w = last_wave.get((op.tenant, op.doc_id), -1) + 1
        if w == len(waves):
            waves.append([])
        waves[w].append(i)
        last_wave[(op.tenant, op.doc_id)] = w
    return waves


#: Errors that a value of the input raises (an unencodable string, a bad type or number),
#: as opposed to a store or network failing: only these make an op fail alone.
_DATA_ERRORS = (UnicodeError, ValueError, TypeError, LookupError, ArithmeticError, RecursionError)


def _is_poison(exc: BaseException) -> bool:
    """Whether ``exc``, or what it wraps (``__cause__``, a driver's ``orig``), is an error of
    the data (:data:`_DATA_ERRORS`) and not a transient one."""
    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None or isinstance(seen, TransientError | MemoryError):
            return False
        if isinstance(seen, _DATA_ERRORS):
            return True
        seen = getattr(seen, "orig", None) or seen.__cause__
    return False


def _op_id_problem(op: IngestOp) -> str | None:
    """Why ``op``'s tenant or document id cannot be stored (a lone surrogate), or ``None``."""
    return surrogate_problem(op.tenant, "tenant") or surrogate_problem(op.doc_id, "doc_id")


def _clean_op(op: IngestOp) -> IngestOp:
    """``op`` with lone surrogates in its title, source and metadata replaced by U+FFFD (a
    file name from a foreign file system may hold them, and so may an event's fields)."""

    def clean(value: str | None) -> str | None:
        return None if value is None else replace_surrogates(value)

    metadata = {
        replace_surrogates(k): (replace_surrogates(v) if isinstance(v, str) else v)
        for k, v in op.metadata.items()
    }
    found = {
        "title": count_surrogates(op.title or ""),
        "source": count_surrogates(op.source or ""),
        "metadata": count_surrogates(
            *(t for k, v in op.metadata.items() for t in (k, v if isinstance(v, str) else ""))
        ),
    }
    found = {where: n for where, n in found.items() if n}
    return dataclasses.replace(
        op,
        title=clean(op.title),
        source=clean(op.source),
        metadata=metadata,
        warnings=tuple(surrogates_warning(n, where) for where, n in found.items()),
        surrogates=sum(found.values()),
    )


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 2)
