"""A stand-in engine /metrics endpoint on 127.0.0.1: a real HTTP server in a thread.

Its behaviour can be changed while it runs (the text served, an HTTP status, a delay longer
than the scraper's timeout) and it can be stopped and started again on the same port (a
target that disappears and returns).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client gone mid-answer (the scraper timed out, the test stopped the server)


class EngineServer:
    def __init__(self, text: str) -> None:
        self.text = text
        self.status = 200
        self.delay_s = 0.0
        self.hits = 0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.port = 0
        self._connections: set[socket.socket] = set()
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def start(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the engines' own servers

            def setup(self) -> None:
                super().setup()
                owner._connections.add(self.connection)

            def finish(self) -> None:
                owner._connections.discard(self.connection)
                super().finish()

            def do_GET(self) -> None:
                owner.hits += 1
                if owner.delay_s:
                    time.sleep(owner.delay_s)
                body = owner.text.encode()
                self.send_response(owner.status)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # quiet
                pass

        server = _Server(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self.port = server.server_address[1]
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None and self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            for connection in list(self._connections):  # kept-alive connections die with the server
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            self._thread.join(timeout=10)
            self._server = None
