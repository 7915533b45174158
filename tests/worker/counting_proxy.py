"""A counting HTTP proxy for tests: forwards each request to a moto_server and records its method and path, so a test
can count what a child process asked S3 for (the child's AWS_ENDPOINT_URL points at the proxy)."""
from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class CountingProxy:
    """`with CountingProxy(upstream_url) as proxy:` serves on a free loopback port (`proxy.url`) until the block
    ends; `proxy.requests` lists (method, path without the query) of every request, in order."""

    def __init__(self, upstream_url: str, timeout_s: float = 30.0) -> None:
        up = urlsplit(upstream_url)
        self.upstream = (up.hostname or "127.0.0.1", up.port or 80)
        self.timeout_s = timeout_s
        self.requests: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # quiet: the test reads `requests`
                pass

            def _forward(self) -> None:
                with proxy._lock:
                    proxy.requests.append((self.command, self.path.split("?", 1)[0]))
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                conn = http.client.HTTPConnection(*proxy.upstream, timeout=proxy.timeout_s)
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    r = conn.getresponse()
                    data = r.read()
                    self.send_response(r.status, r.reason)
                    for k, v in r.getheaders():
                        if k.lower() not in _HOP_BY_HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                            self.send_header(k, v)
                    if self.command != "HEAD":
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(data)
                finally:
                    conn.close()

            do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward

        return Handler

    def __enter__(self) -> CountingProxy:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="counting-proxy", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)
