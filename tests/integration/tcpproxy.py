"""A loopback TCP proxy that a test can switch off and on, to take a backend "down"."""

from __future__ import annotations

import contextlib
import socket
import threading


class Proxy:
    """Forwards ``127.0.0.1:<port>`` to ``target``; :meth:`down` refuses and cuts connections."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._server.bind(("127.0.0.1", 0))
        self.port = self._server.getsockname()[1]
        self._up = True
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def down(self) -> None:
        with self._lock:
            self._up = False
            for c in self._conns:
                with contextlib.suppress(OSError):
                    c.close()
            self._conns.clear()

    def up(self) -> None:
        with self._lock:
            self._up = True

    def close(self) -> None:
        self.down()
        self._server.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                if not self._up:
                    client.close()
                    continue
                try:
                    upstream = socket.create_connection(self.target, timeout=5)
                except OSError:
                    client.close()
                    continue
                self._conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.close()
