"""Index the small tenant corpora of ``bench/evaluation/corpora/`` for ``ragstream eval``.

Three short Markdown documents of the kind a tenant uploads (an equipment manual, an HR policy,
a product FAQ), each a corpus of its own (``facility``, ``hr``, ``product``), and
``questions.tenant.jsonl`` (facts they state, and absent questions whose answer they do not
hold) measure false refusals of the relevance gate away from the two manuals
(docs/evaluation.md, "Refusals on a tenant's own documents").

Run ``python -m bench.evaluation.tenant_corpora`` (options: ``--alias``, ``--tenant``): it
indexes the documents into a private alias with the configured embedder, a private SQLite
registry under ``.local/``, and prints the ``ragstream eval`` command that measures them.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import redis
from elasticsearch import Elasticsearch

from index.versions import IndexVersions
from ingest.embedding import CachedEmbedder, EmbeddingCache
from ingest.factory import build_chunker, build_model
from ingest.index import ChunkIndex
from ingest.ops import IngestOp
from ingest.pipeline import IngestPipeline
from ingest.registry import DocumentRegistry
from ingest.types import ParseOptions
from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.settings import Settings

#: Folder of the corpora: one sub-folder per corpus, Markdown files in it.
CORPORA = Path(__file__).with_name("corpora")
#: The question set over them.
TENANT_QUESTIONS = Path(__file__).with_name("questions.tenant.jsonl")


def roots(corpora: Path = CORPORA) -> dict[str, Path]:
    """Corpus name -> its folder (absolute), the ``--root`` of ``ragstream eval``."""
    return {d.name: d.resolve() for d in sorted(corpora.iterdir()) if d.is_dir()}


def index_corpora(settings: Settings, alias: str, tenant: str, corpora: Path = CORPORA) -> int:
    """Index every ``*.md`` of ``corpora`` for ``tenant`` behind ``alias`` (id and source: the
    file's absolute path, as bulk ingestion names a file); the number of documents indexed.

    Raises:
        RuntimeError: a document was not indexed (its outcome's reason).
    """
    model = build_model(settings)
    model.warm_up()
    es = Elasticsearch(settings.elasticsearch.hosts, request_timeout=60)
    index = ChunkIndex(
        es,
        settings.elasticsearch.model_copy(update={"index_alias": alias}),
        model.dim,
        model.model_id,
    )
    index.ensure()
    local = settings.infra.local_dir / "eval-corpora"
    local.mkdir(parents=True, exist_ok=True)
    url = f"sqlite:///{local / f'{alias}.db'}"
    upgrade_head(url)
    client = redis.Redis.from_url(settings.redis.url)
    pipeline = IngestPipeline(
        build_chunker(settings),
        CachedEmbedder(model, EmbeddingCache(client, key_prefix=f"{alias}:emb:")),
        index,
        DocumentRegistry(make_session_factory(make_engine(url))),
        IndexVersions(client),
        parse_options=ParseOptions.from_settings(settings.ingest),
    )
    ops = []
    for path in sorted(p.resolve() for root in roots(corpora).values() for p in root.glob("*.md")):
        data = path.read_bytes()
        ops.append(IngestOp(tenant, str(path), data=data, filename=str(path), source=str(path)))
    outcomes = [o for per_op in pipeline.apply(ops) for o in per_op]
    failed = [o for o in outcomes if o.status not in ("indexed", "unchanged")]
    if failed:
        raise RuntimeError(f"not indexed: {failed}")
    index.refresh()
    return len(outcomes)


def main() -> None:
    """Index the corpora and print the evaluation command."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--alias", default="ragstream-eval-tenant")
    parser.add_argument("--tenant", default="eval-tenant")
    args = parser.parse_args()
    n = index_corpora(Settings(), args.alias, args.tenant)
    where = " ".join(f"--root {name}={path}" for name, path in roots().items())
    print(f"indexed {n} documents for tenant {args.tenant} behind {args.alias}")
    print(
        f"ragstream eval {TENANT_QUESTIONS} --index {args.alias} --tenant {args.tenant} "
        f"{where} --modes hybrid+none --tiers routed,evidence"
    )


if __name__ == "__main__":
    main()
