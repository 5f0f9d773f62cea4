"""The one root exception of ragstream and its transient/permanent split.

Vendor exceptions (kafka, elasticsearch, redis, httpx, SQLAlchemy) are translated into these at
the boundary where they are caught. A :class:`TransientError` may succeed if retried (network,
overload, timeouts); a :class:`PermanentError` never will (bad input, missing model) and is
dead-lettered or recorded as failed.
"""

from __future__ import annotations

#: HTTP statuses below 500 that may succeed on retry: 408 Request Timeout, 425 Too Early and
#: 429 Too Many Requests (RFC 9110 §15.5.9, RFC 8470 §5.2, RFC 6585 §4).
_RETRYABLE_4XX = frozenset({408, 425, 429})


def transient_http_status(status: int) -> bool:
    """True when an HTTP status (of Elasticsearch, a model server, a webhook target) may succeed
    on retry: 408, 425, 429 and every 5xx (the server failed, not the request). The one
    definition every HTTP client of ragstream uses to split transient from permanent."""
    return status in _RETRYABLE_4XX or 500 <= status <= 599


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
