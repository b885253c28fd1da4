"""A real HTTP server on loopback for remote-source tests: Range requests and directory listings; it counts
GETs and the bytes it sent. Faults are injected by `faultproxy.FaultProxy` in front of it. Not a test module."""

from __future__ import annotations

import os
import re
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class _Handler(SimpleHTTPRequestHandler):
    lock = threading.Lock()
    counts = {"get": 0, "bytes": 0}

    def log_message(self, *args):  # keep test output clean
        pass

    def do_GET(self):
        with self.lock:
            self.counts["get"] += 1
        path = self.translate_path(self.path)
        rng = self.headers.get("Range")
        if os.path.isdir(path) or not os.path.exists(path):
            return super().do_GET()
        size = os.path.getsize(path)
        start, end = 0, size - 1
        if rng:
            m = re.match(r"bytes=(\d*)-(\d*)", rng)
            start = int(m.group(1)) if m.group(1) else 0
            end = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
        with open(path, "rb") as fh:
            fh.seek(start)
            body = fh.read(end - start + 1)
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with self.lock:
            self.counts["bytes"] += len(body)


class Server:
    """`with Server(root) as url:` serves `root` at `url` until the block ends."""

    def __init__(self, root) -> None:
        handler = type("Handler", (_Handler,), {"lock": threading.Lock(), "counts": {"get": 0, "bytes": 0}})
        self.handler = handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None  # clients closing keep-alive sockets at exit
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def counts(self) -> dict:
        return self.handler.counts

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
