"""ragstream: event-driven retrieval-augmented generation serving.

This package is the shared kernel (settings, SQL models and migrations, logging, metrics,
errors, health, the Celery application) that ``topics/``, ``ingest/``, ``workers/``, ``api/``,
``infra/``, ``bench/`` and ``entry/`` import. It imports none of them.
"""

__version__ = "0.1.0"
