"""The one root exception of ragstream and its transient/permanent split.

Vendor exceptions (kafka, elasticsearch, redis, httpx, SQLAlchemy) are translated into these at
the boundary where they are caught. A :class:`TransientError` may succeed if retried (network,
overload, timeouts); a :class:`PermanentError` never will (bad input, missing model) and is
dead-lettered or recorded as failed.
"""

from __future__ import annotations


class RagstreamError(Exception):
    """Root of every error raised by ragstream code."""

    code: str = "INTERNAL"


class TransientError(RagstreamError):
    """A failure that may succeed on retry (timeouts, connection errors, 429/503)."""

    code = "UNAVAILABLE"


class PermanentError(RagstreamError):
    """A failure that will fail again on retry (invalid input, configuration)."""

    code = "INVALID_REQUEST"


class ConfigurationError(PermanentError):
    """The settings or the registration of a component are wrong; raised at start-up."""

    code = "CONFIGURATION"
