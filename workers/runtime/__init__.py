"""The consumer runtime every pool uses: batching, retries, DLQ, commits, metrics, shutdown."""

from ragstream.retry import RetryPolicy
from workers.runtime.handler import Emit, Failed, Handler, Outcome
from workers.runtime.policy import BatchPolicy

__all__ = ["BatchPolicy", "Emit", "Failed", "Handler", "Outcome", "RetryPolicy"]
