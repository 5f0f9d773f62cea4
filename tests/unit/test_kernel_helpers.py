"""The kernel's shared helpers: one definition each of what several layers used to repeat."""

from __future__ import annotations

import datetime as dt

import pytest

from ragstream.db.models import FINAL_JOB_STATUSES, as_utc
from ragstream.errors import transient_http_status


@pytest.mark.parametrize(
    ("status", "transient"),
    [
        (408, True), (425, True), (429, True), (500, True), (501, True), (502, True),
        (503, True), (504, True), (599, True),
        (200, False), (301, False), (400, False), (401, False), (403, False), (404, False),
        (409, False), (413, False), (422, False), (600, False),
    ],
)  # fmt: skip
def test_transient_http_status_is_408_425_429_and_every_5xx(status: int, transient: bool) -> None:
    assert transient_http_status(status) is transient


def test_as_utc_reads_naive_as_utc_and_converts_aware() -> None:
    naive = dt.datetime(2026, 12, 1, 12, 0)
    assert as_utc(naive) == dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
    assert as_utc(naive).tzinfo is dt.UTC
    paris = dt.datetime(2026, 12, 1, 13, 0, tzinfo=dt.timezone(dt.timedelta(hours=1)))
    assert as_utc(paris) == naive.replace(tzinfo=dt.UTC) and as_utc(paris).tzinfo is dt.UTC


def test_final_job_statuses_are_those_every_reader_waits_for() -> None:
    from entry.client import JOB_FINAL
    from ingest.jobs import JOB_STATUSES

    assert FINAL_JOB_STATUSES == ("succeeded", "completed_with_failures", "failed")
    assert frozenset(FINAL_JOB_STATUSES) == JOB_FINAL
    assert ("pending", "running", *FINAL_JOB_STATUSES) == JOB_STATUSES
