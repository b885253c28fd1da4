"""A real HTTP server on loopback for remote-source tests: Range requests, directory listings, and
injected faults (503, connection resets, truncated bodies) at a seeded rate. Not a test module."""

from __future__ import annotations

import os
import random
import re
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


class _Handler(SimpleHTTPRequestHandler):
    fault_rate = 0.0
    fail_paths: str | None = None  # regex: GETs of matching paths always answer 503
    rng = random.Random(0)
    lock = threading.Lock()
    counts = {"get": 0, "faults": 0}

    def log_message(self, *args):  # keep test output clean
        pass

    def _fault(self) -> str | None:
        with self.lock:
            self.counts["get"] += 1
            if self.fail_paths and re.search(self.fail_paths, self.path):
                self.counts["faults"] += 1
                return "503"
            if self.rng.random() < self.fault_rate:
                self.counts["faults"] += 1
                return self.rng.choice(["503", "reset", "truncate"])
        return None

    def do_GET(self):
        fault = self._fault()
        if fault == "503":
            self.send_error(503, "injected fault")
            return
        if fault == "reset":
            self.close_connection = True
            self.connection.close()
            return
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
        if fault == "truncate" and len(body) > 1:
            self.wfile.write(body[: len(body) // 2])
            self.close_connection = True
            return
        self.wfile.write(body)


class Server:
    """`with Server(root, fault_rate=0.1) as url:` serves `root` at `url` until the block ends."""

    def __init__(self, root, fault_rate: float = 0.0, fail_paths: str | None = None, seed: int = 0) -> None:
        handler = type("Handler", (_Handler,), {"fault_rate": fault_rate, "fail_paths": fail_paths,
                                                 "rng": random.Random(seed), "lock": threading.Lock(),
                                                 "counts": {"get": 0, "faults": 0}})
        self.handler = handler
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), partial(handler, directory=str(root)))
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
