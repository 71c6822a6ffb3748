"""A fault-injecting HTTP proxy in front of an S3 API server, for tests and benchmarks.

Theory of operation
-------------------
:class:`FaultProxy` listens on 127.0.0.1 and forwards each request to the
upstream server (moto's server mode in the tests).  On purpose it can drop the
``If-None-Match`` header (an endpoint that ignores conditional writes), or
answer a matching request itself: 503 SlowDown, 500 InternalError, 403
AccessDenied, or a reset connection; or forward it and then reset the
connection, so the server acted but the client never hears (:class:`Fault`).  It counts the requests
it saw per method and the faults it injected.  Nothing here runs in the
product; it is the adversary.
"""

from __future__ import annotations

import http.client
import http.server
import socket
import struct
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

__all__ = ["Fault", "FaultProxy"]


@dataclass
class Fault:
    """Answer ``action`` to the next ``count`` requests (None: all) whose method is ``method`` (None: any)."""

    action: (
        str  # "throttle" | "server" | "denied" | "reset" | "drop" (forward, then reset: the answer is lost)
    )
    method: str | None = None
    count: int | None = None
    path_contains: str = ""


_ANSWERS = {
    "throttle": (503, "SlowDown", "Please reduce your request rate."),
    "server": (500, "InternalError", "We encountered an internal error. Please try again."),
    "denied": (403, "AccessDenied", "Access Denied"),
}


class FaultProxy:
    """A loopback HTTP proxy in front of the S3 server (see the module docstring)."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.removeprefix("http://").partition(":")
        self.upstream = (host, int(port))
        self.strip_conditions = False
        self.faults: list[Fault] = []
        self.seen: Counter[str] = Counter()
        self.injected: Counter[str] = Counter()
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length", 0) or 0)
                body = self.rfile.read(length) if length else b""
                fault = proxy._take(self.command, self.path)
                if fault is not None and fault.action == "reset":
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                if fault is not None and fault.action != "drop":
                    status, code, msg = _ANSWERS[fault.action]
                    data = (
                        f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
                        f"<Message>{msg}</Message><RequestId>zr</RequestId></Error>"
                    ).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection",)}
                if proxy.strip_conditions:
                    headers = {k: v for k, v in headers.items() if k.lower() != "if-none-match"}
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=30)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    if fault is not None:  # "drop": the server acted, the client never hears
                        self.connection.setsockopt(
                            socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)
                        )
                        self.close_connection = True
                        self.connection.close()
                        return
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in (
                            "transfer-encoding",
                            "connection",
                            "content-length",
                            "server",
                            "date",
                        ):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def _take(self, method: str, path: str) -> Fault | None:
        with self._lock:
            self.seen[method] += 1
            for f in self.faults:
                if (f.method is not None and f.method != method) or f.path_contains not in path:
                    continue
                if f.count is not None:
                    if f.count <= 0:
                        continue
                    f.count -= 1
                self.injected[f.action] += 1
                return f
            return None

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
