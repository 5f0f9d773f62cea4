"""The HTTP transport of one webhook attempt: pinned addresses and a total deadline.

- **Pinned DNS.** The SSRF guard (:func:`workers.webhooks.ssrf.check_url`) resolves a host and
  checks every address; :class:`PinnedBackend` connects only to those checked addresses, never
  resolving the name again, so a DNS answer that changes after the check (rebinding) is never
  connected to. The URL is unchanged, so the ``Host`` header, TLS SNI and certificate
  verification are for the original host name.
- **Total deadline.** httpx's timeouts are per operation (a read timeout is per chunk: a
  receiver dribbling one byte every 4 s never trips a 10 s read timeout). Every connect, write
  and read here gets at most the time left until the attempt's deadline, so connect + send +
  read the response (redirects included) take at most ``timeout_s`` in all.

The backend is an ``httpcore`` network backend under an ordinary ``httpx.Client``
(:func:`pinned_client`), so redirects, exceptions and responses are httpx's own.
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterable
from typing import Any

import httpcore
import httpx

from workers.webhooks.ssrf import IPAddress

SocketOption = Any  # httpcore's SOCKET_OPTION union, not exported


class PinnedBackend(httpcore.NetworkBackend):
    """Connects a host name only to its pinned addresses, within a total deadline.

    Args:
        deadline: ``time.monotonic()`` value after which every operation times out.
        inner: the backend that opens sockets (default: httpcore's synchronous one).
    """

    def __init__(self, deadline: float, inner: httpcore.NetworkBackend | None = None) -> None:
        self.deadline = deadline
        self._inner = inner or httpcore.SyncBackend()
        self._pins: dict[str, list[IPAddress]] = {}

    def pin(self, host: str, addresses: Iterable[IPAddress]) -> None:
        """Connect ``host`` (as in the URL: a name, or an IP literal without brackets) to
        ``addresses`` only, in order."""
        self._pins[_host_key(host)] = list(addresses)

    def remaining(self, timeout: float | None, exc: type[Exception]) -> float:
        """``timeout`` capped at the time left; raises ``exc`` once the deadline has passed."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise exc("webhook attempt deadline exceeded")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        """Connect to the first reachable pinned address of ``host``.

        Raises:
            httpcore.ConnectError: ``host`` was never pinned (not checked), or no address
                accepted the connection.
            httpcore.ConnectTimeout: the deadline passed.
        """
        addresses = self._pins.get(_host_key(host))
        if not addresses:
            raise httpcore.ConnectError(f"webhook host {host!r} was not checked; not connecting")
        error: Exception | None = None
        for ip in addresses:
            left = self.remaining(timeout, httpcore.ConnectTimeout)
            try:
                stream = self._inner.connect_tcp(str(ip), port, left, local_address, socket_options)
            except httpcore.ConnectError as exc:  # try the next checked address
                error = exc
                continue
            return _DeadlineStream(stream, self)
        raise httpcore.ConnectError(f"cannot connect to {host!r} at {addresses}: {error}")

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[SocketOption] | None = None,
    ) -> httpcore.NetworkStream:
        """Refused: webhooks go over TCP only."""
        raise httpcore.ConnectError("webhooks do not connect to unix sockets")

    def sleep(self, seconds: float) -> None:
        """As the inner backend."""
        self._inner.sleep(seconds)


class _DeadlineStream(httpcore.NetworkStream):
    """A stream whose every operation is bounded by its backend's deadline."""

    def __init__(self, inner: httpcore.NetworkStream, backend: PinnedBackend) -> None:
        self._inner = inner
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, self._backend.remaining(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._backend.remaining(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = self._backend.remaining(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(
            self._inner.start_tls(ssl_context, server_hostname, left), self._backend
        )

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _PinnedTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool that uses a :class:`PinnedBackend`."""

    def __init__(self, backend: PinnedBackend, ssl_context: ssl.SSLContext | None) -> None:
        super().__init__(trust_env=False)
        # HTTPTransport takes no network backend: its pool is rebuilt with one (HTTP/1.1, no
        # proxy, as HTTPTransport builds it by default).
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(trust_env=False),
            network_backend=backend,
        )


def pinned_client(
    timeout_s: float, ssl_context: ssl.SSLContext | None = None
) -> tuple[httpx.Client, PinnedBackend]:
    """An ``httpx.Client`` for one webhook attempt and its backend (to :meth:`~PinnedBackend.pin`
    hosts on).

    No redirects are followed (the caller checks each target), no proxy or ``.netrc`` from the
    environment is used (a proxy would resolve the name itself), and the whole attempt, from
    now, must finish within ``timeout_s`` seconds.

    Args:
        timeout_s: total deadline of the attempt in seconds, also each operation's timeout.
        ssl_context: TLS settings (default: verify against certifi's CAs; tests add theirs).
    """
    backend = PinnedBackend(time.monotonic() + timeout_s)
    client = httpx.Client(
        transport=_PinnedTransport(backend, ssl_context),
        timeout=timeout_s,
        follow_redirects=False,
        trust_env=False,
    )
    return client, backend


def _host_key(host: str) -> str:
    return host.strip("[]").lower()
