"""Per-receiver slots on the real Redis: the limit holds, a released or expired lease frees
its slot, and a busy receiver is asked again soon while a slow one is waited for."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

import pytest
import redis

from ragstream.settings import Settings
from workers.webhooks.slots import LEASE_MARGIN_S, ReceiverSlots, receiver_of


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(Settings().redis.url)
    yield c
    c.close()


def test_receivers_are_scheme_host_and_port() -> None:
    assert receiver_of("https://Hooks.Example.com/a?b") == "https://hooks.example.com:443"
    assert receiver_of("http://127.0.0.1:8080/x") == receiver_of("http://127.0.0.1:8080/y")
    assert receiver_of("http://127.0.0.1:8080/x") != receiver_of("http://127.0.0.1:8081/x")


def test_the_limit_holds_per_receiver_and_a_release_frees_a_slot(
    client: redis.Redis, unique_name: Callable[[str], str]
) -> None:
    slots = ReceiverSlots(client, limit=2, lease_s=30 + LEASE_MARGIN_S)
    url = f"http://{unique_name('rcv')}.example:80/hook"
    other = f"http://{unique_name('other')}.example:80/hook"
    first, _ = slots.acquire(url)
    second, _ = slots.acquire(url)
    third, wait_s = slots.acquire(url)
    assert first and second and third is None
    assert wait_s == 0.0  # the attempts in flight just started: busy, not slow
    assert slots.acquire(other)[0] is not None  # another receiver has its own slots
    slots.release(url, first)
    assert slots.in_flight(url) == 1
    assert slots.acquire(url)[0] is not None
    client.delete(slots.key(url), slots.key(other))


def test_a_slow_receiver_is_waited_for_and_an_expired_lease_frees_its_slot(
    client: redis.Redis, unique_name: Callable[[str], str]
) -> None:
    url = f"http://{unique_name('slow')}.example:80/hook"
    slow = ReceiverSlots(client, limit=1, lease_s=4.0 + LEASE_MARGIN_S)
    token, _ = slow.acquire(url)
    assert token is not None
    time.sleep(1.1)  # in flight for over SLOW_AFTER_S: the receiver is slow
    again, wait_s = slow.acquire(url)
    assert again is None and 0.0 < wait_s <= 2.9, wait_s  # until its deadline, 4 s in
    # A worker that died mid-attempt never releases: its lease expires.
    dead = ReceiverSlots(client, limit=1, lease_s=0.5)
    dead_url = f"http://{unique_name('dead')}.example:80/hook"
    assert dead.acquire(dead_url)[0] is not None
    assert dead.acquire(dead_url)[0] is None
    time.sleep(0.6)
    assert dead.acquire(dead_url)[0] is not None
    client.delete(slow.key(url), dead.key(dead_url))
