"""SQL metadata store: SQLAlchemy 2 models, engine factory and Alembic migrations."""

from ragstream.db.engine import make_engine, make_session_factory, upgrade_head
from ragstream.db.models import (
    Base,
    Document,
    IngestJob,
    IngestJobItem,
    QueryFeedback,
    QueryLog,
    WebhookAttempt,
    WebhookDelivery,
)
from ragstream.db.vector_stores import StoredFile, VectorStore, VectorStoreFile

__all__ = [
    "Base",
    "Document",
    "IngestJob",
    "IngestJobItem",
    "QueryFeedback",
    "QueryLog",
    "StoredFile",
    "VectorStore",
    "VectorStoreFile",
    "WebhookAttempt",
    "WebhookDelivery",
    "make_engine",
    "make_session_factory",
    "upgrade_head",
]
