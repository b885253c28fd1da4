"""Real HTTP servers on loopback for remote-source tests. Not a test module.

`Loopback` is what every test server shares (a threaded server on 127.0.0.1 at a free port, started and
stopped by `with`); `file_range` answers a `Range` header from a local file. `Server` serves a folder with
Range requests, an ETag and directory listings, and counts GETs, the bytes it sent and each range it served;
faults are injected by `faultproxy.FaultProxy` in front of it, and `hubserver.Hub` emulates the Hugging Face Hub."""

from __future__ import annotations

import os
import re
import threading
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer


def file_range(path, header: str | None) -> tuple[int, int, int, bytes]:
    """(start, end inclusive, file size, body) of `path` for a `Range: bytes=a-b` header (None: whole file)."""
    size = os.path.getsize(path)
    start, end = 0, size - 1
    if header:
        m = re.match(r"bytes=(\d*)-(\d*)", header)
        start = int(m.group(1)) if m.group(1) else 0
        end = min(size - 1, int(m.group(2))) if m.group(2) else size - 1
    with open(path, "rb") as fh:
        fh.seek(start)
        return start, end, size, fh.read(end - start + 1)


class _Listening(ThreadingHTTPServer):
    # a deep accept queue: with socketserver's 5, a loader's many requests in flight at once overflow it and the
    # kernel drops their connections, which the clients resend a second later (latency a real store never adds)
    request_queue_size = 1024


class Loopback:
    """A ThreadingHTTPServer on 127.0.0.1 at a free port with `handler`; `with` starts and stops it."""

    def __init__(self, handler) -> None:
        self.httpd = _Listening(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda request, address: None  # clients closing keep-alive sockets at exit
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> str:
        self.thread.start()
        return self.url

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def etag(path) -> str:
    """The file's version tag as a real server derives one: changed by replacing or rewriting the file."""
    st = os.stat(path)
    return f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{st.st_size:x}"'


class _Handler(SimpleHTTPRequestHandler):
    lock = threading.Lock()
    counts: dict = {"get": 0, "bytes": 0, "ranges": []}

    def log_message(self, *args):  # keep test output clean
        pass

    def do_HEAD(self):
        path = self.translate_path(self.path)
        if os.path.isdir(path) or not os.path.exists(path):
            return super().do_HEAD()
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Length", str(os.path.getsize(path)))
        self.send_header("ETag", etag(path))
        self.end_headers()

    def do_GET(self):
        with self.lock:
            self.counts["get"] += 1
        path = self.translate_path(self.path)
        rng = self.headers.get("Range")
        if os.path.isdir(path) or not os.path.exists(path):
            return super().do_GET()
        start, end, size, body = file_range(path, rng)
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", etag(path))
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        with self.lock:
            self.counts["bytes"] += len(body)
            self.counts["ranges"].append((self.path, start, start + len(body)))


class Server(Loopback):
    """`with Server(root) as url:` serves `root` at `url` until the block ends."""

    def __init__(self, root) -> None:
        self.handler = type("Handler", (_Handler,), {"lock": threading.Lock(),
                                                     "counts": {"get": 0, "bytes": 0, "ranges": []}})
        super().__init__(partial(self.handler, directory=str(root)))

    @property
    def counts(self) -> dict:
        return self.handler.counts
