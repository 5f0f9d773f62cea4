"""ragstream: event-driven retrieval-augmented generation serving.

This package is the shared kernel (settings, SQL models, logging, metrics, CLI) that
``topics/``, ``ingest/``, ``workers/``, ``api/`` and ``infra/`` import. It imports none of them
at module import time.
"""

__version__ = "0.1.0"
