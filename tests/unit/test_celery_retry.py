"""Celery's retrying tasks take their numbers from the shared retry policy."""

from __future__ import annotations

import dataclasses

from celery.utils.time import get_exponential_backoff_interval

from ragstream.celery_app import RetryingTask
from ragstream.retry import CELERY_TASK_RETRY


def test_retrying_task_bounds_and_backs_off_as_the_shared_policy() -> None:
    assert CELERY_TASK_RETRY.max_attempts is not None
    assert RetryingTask.max_retries == CELERY_TASK_RETRY.max_attempts - 1 == 8
    assert RetryingTask.retry_jitter is CELERY_TASK_RETRY.jitter is True
    ceiling = dataclasses.replace(CELERY_TASK_RETRY, jitter=False)
    for retries in range(RetryingTask.max_retries):
        celery_s = get_exponential_backoff_interval(
            factor=RetryingTask.retry_backoff,
            retries=retries,
            maximum=RetryingTask.retry_backoff_max,
            full_jitter=False,
        )
        assert celery_s == ceiling.delay_ms(retries + 1) / 1000
    assert [ceiling.delay_ms(n) / 1000 for n in (1, 2, 7, 8)] == [2.0, 4.0, 120.0, 120.0]


def test_the_ingest_batch_task_is_a_retrying_task() -> None:
    from ingest.tasks import ingest_batch

    assert isinstance(ingest_batch, RetryingTask)
    assert ingest_batch.max_retries == RetryingTask.max_retries
