"""A webhook attempt has a total deadline and connects only to the address the SSRF guard
checked (issue 15, items 12 and 13), with Host and TLS SNI for the URL's own host name."""

from __future__ import annotations

import datetime as dt
import http.server
import ipaddress
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest

from workers.webhooks.delivery import attempt
from workers.webhooks.signing import sign_headers
from workers.webhooks.ssrf import parse_networks
from workers.webhooks.transport import pinned_client

LOOPBACK = parse_networks(["127.0.0.1/32"])
SECRET = (
    "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
)  # any valid key: receivers here do not verify


class _Recorder:
    """A local HTTP(S) server that answers each POST 204 and records Host headers and SNI."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self.hosts: list[str] = []
        self.sni: list[str | None] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["content-length"]))
                outer.hosts.append(self.headers["host"])
                self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if ssl_context is not None:
            ssl_context.sni_callback = lambda _sock, name, _ctx: outer.sni.append(name)
            self.server.socket = ssl_context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def recorder() -> Iterator[_Recorder]:
    r = _Recorder()
    yield r
    r.close()


class _Dribbler:
    """A receiver that answers a POST with a status line, then one byte every ``every_s``
    for up to ``for_s`` seconds: each read returns data, so a per-read timeout never fires."""

    def __init__(self, every_s: float, for_s: float) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}/hook"
        self.every_s, self.for_s = every_s, for_s
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._dribble, args=(conn,), daemon=True).start()

    def _dribble(self, conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            end = time.monotonic() + self.for_s
            try:
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                while time.monotonic() < end:
                    conn.sendall(b"X-Slow: 1\r\n")
                    time.sleep(self.every_s)
                conn.sendall(b"content-length: 0\r\n\r\n")
            except OSError:
                return  # the client gave up

    def close(self) -> None:
        self.listener.close()


def _headers(body: str) -> dict[str, str]:
    return sign_headers([SECRET], "msg_t", body, dt.datetime.now(dt.UTC))


def test_a_dribbling_receiver_is_cut_off_at_the_total_deadline() -> None:
    receiver = _Dribbler(every_s=0.3, for_s=12)
    try:
        started = time.monotonic()
        result = attempt(receiver.url, _headers("{}"), "{}", LOOPBACK, timeout_s=2)
        took = time.monotonic() - started
    finally:
        receiver.close()
    assert took < 3.5, f"the attempt took {took:.1f}s with timeout_s=2"
    assert result.status_code is None and result.retryable
    assert result.error is not None and "Timeout" in result.error


def test_the_checked_address_is_connected_to_without_a_second_resolution(
    recorder: _Recorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: the first answer (checked) is loopback, later answers would be another
    address; the attempt resolves once and connects to the checked one."""
    real = socket.getaddrinfo
    calls: list[str] = []

    def rebinding(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if host != "hook.rebind.test":
            return real(host, port, *args, **kwargs)
        calls.append(host)
        address = "127.0.0.1" if len(calls) == 1 else "192.0.2.1"  # TEST-NET-1: unreachable
        return real(address, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    url = f"http://hook.rebind.test:{recorder.port}/hook"
    result = attempt(url, _headers("{}"), "{}", LOOPBACK, timeout_s=3)
    assert result.status_code == 204, result.error
    assert calls == ["hook.rebind.test"]  # resolved once, by the SSRF check
    assert recorder.hosts == [f"hook.rebind.test:{recorder.port}"]  # Host: the URL's name


def test_an_unpinned_host_is_never_connected_to(recorder: _Recorder) -> None:
    client, backend = pinned_client(3)
    backend.pin("pinned.test", [ipaddress.ip_address("127.0.0.1")])
    with client, pytest.raises(httpx.ConnectError, match="not checked"):
        client.post(f"http://127.0.0.1:{recorder.port}/hook", content=b"{}")
    assert recorder.hosts == []
    with pytest.raises(httpcore.ConnectError):
        backend.connect_tcp("other.test", recorder.port)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_sni_and_verification_use_the_host_name_not_the_pinned_address(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    make_cert = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"]
    make_cert += ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=hook.tls.test"]
    make_cert += ["-addext", "subjectAltName=DNS:hook.tls.test"]
    subprocess.run(make_cert, check=True, capture_output=True)
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    server = _Recorder(server_ctx)
    real = socket.getaddrinfo

    def resolve(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        return real("127.0.0.1" if host == "hook.tls.test" else host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    client_ctx = ssl.create_default_context(cafile=str(cert))
    try:
        url = f"https://hook.tls.test:{server.port}/hook"
        result = attempt(url, _headers("{}"), "{}", LOOPBACK, timeout_s=5, ssl_context=client_ctx)
        assert result.status_code == 204, result.error
        assert server.sni == ["hook.tls.test"]
        assert server.hosts == [f"hook.tls.test:{server.port}"]
        # The certificate names hook.tls.test, not the address: verification is by name.
        wrong = f"https://127.0.0.1:{server.port}/hook"
        refused = attempt(
            wrong, _headers("{}"), "{}", LOOPBACK, timeout_s=5, ssl_context=client_ctx
        )
        assert refused.status_code is None and "CERTIFICATE_VERIFY_FAILED" in (refused.error or "")
    finally:
        server.close()
