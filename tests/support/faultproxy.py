"""A fault-injecting HTTP reverse proxy on loopback, in front of a real server (HTTP or S3). Not a test module.

Each request is forwarded to the upstream (method, path, headers, body) unless the seeded dice inject a
fault instead: 503, a connection reset before any answer, or a truncated body (full Content-Length, half
the bytes, then close). `fail_paths` (regex) makes every matching GET answer 503; `short_paths` makes it
answer half the bytes asked for as a whole response (a short body: its Content-Length says half);
`stall_paths` makes it hang without answering (for timeout tests); `delay_s` adds that latency to every GET (a far-away store);
`throttle_rate` answers that share of GETs 429 with `Retry-After: retry_after` (a rate-limiting store);
`bytes_per_s` sends all bodies together no faster than that (one link shared by every connection).
`counts` records forwarded requests and faults, and the most requests it was answering at once."""

from __future__ import annotations

import http.client
import random
import re
import threading
import time
from http.server import BaseHTTPRequestHandler
from urllib.parse import urlsplit

from tests.support.httpserver import Loopback

_HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "te", "upgrade", "trailer"}


class _Proxy(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body leave in separate writes: with Nagle on, each answer of a kept-alive connection waited
    # ~40 ms for the client's delayed ACK
    disable_nagle_algorithm = True
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    fault_rate = 0.0
    fail_paths: str | None = None
    short_paths: str | None = None
    stall_paths: str | None = None
    delay_s = 0.0
    throttle_rate = 0.0
    retry_after = "1"
    bytes_per_s = 0.0
    link = {"free_at": 0.0}  # when the link has sent every body queued so far
    rng = random.Random(0)
    lock = threading.Lock()
    counts: dict = {}

    def log_message(self, *args):
        pass

    def _fault(self) -> str | None:
        with self.lock:
            self.counts["requests"] += 1
            if self.command != "GET":
                return None
            if self.stall_paths and re.search(self.stall_paths, self.path):
                self.counts["faults"] += 1
                return "stall"
            if self.fail_paths and re.search(self.fail_paths, self.path):
                self.counts["faults"] += 1
                return "503"
            if self.short_paths and re.search(self.short_paths, self.path):
                self.counts["faults"] += 1
                return "short"
            if self.throttle_rate and self.rng.random() < self.throttle_rate:
                self.counts["faults"] += 1
                self.counts["throttled"] += 1
                return "429"
            if self.rng.random() < self.fault_rate:
                self.counts["faults"] += 1
                return self.rng.choice(["503", "reset", "truncate"])
        return None

    def _forward(self) -> None:
        with self.lock:
            self.counts["in_flight"] += 1
            self.counts["in_flight_peak"] = max(self.counts["in_flight_peak"], self.counts["in_flight"])
        try:
            self._answer()
        finally:
            with self.lock:
                self.counts["in_flight"] -= 1

    def _answer(self) -> None:
        fault = self._fault()
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if fault == "stall":
            time.sleep(3600)
        if self.delay_s and self.command == "GET":
            time.sleep(self.delay_s)
        if fault == "reset":
            self.close_connection = True
            self.connection.close()
            return
        if fault in ("503", "429"):
            payload = b"injected fault"
            self.send_response(int(fault))
            if fault == "429":
                self.send_header("Retry-After", self.retry_after)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
        conn.request(self.command, self.path, body=body, headers=headers)
        resp = conn.getresponse()
        data = resp.read()
        conn.close()
        if fault == "short":
            data = data[: len(data) // 2]
        self.send_response(resp.status, resp.reason)
        for k, v in resp.getheaders():
            if k.lower() not in _HOP and (k.lower() != "content-length" or self.command == "HEAD"):
                self.send_header(k, v)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if fault == "truncate" and len(data) > 1:
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if self.bytes_per_s:  # the body leaves once the link has sent those queued before it, and it
            with self.lock:
                done = self.link["free_at"] = max(time.monotonic(), self.link["free_at"]) + len(data) / self.bytes_per_s
            time.sleep(max(0.0, done - time.monotonic()))
        self.wfile.write(data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _forward


class FaultProxy(Loopback):
    """`with FaultProxy(upstream_url, fault_rate=0.1) as url:` proxies `url` to `upstream_url`."""

    def __init__(self, upstream: str, fault_rate: float = 0.0, fail_paths: str | None = None,
                 stall_paths: str | None = None, seed: int = 0, delay_s: float = 0.0,
                 short_paths: str | None = None, throttle_rate: float = 0.0, retry_after: str = "1",
                 bytes_per_s: float = 0.0) -> None:
        parts = urlsplit(upstream)
        self.handler = type("Proxy", (_Proxy,), {
            "upstream": (parts.hostname, parts.port), "fault_rate": fault_rate, "fail_paths": fail_paths,
            "short_paths": short_paths, "stall_paths": stall_paths, "delay_s": delay_s, "rng": random.Random(seed),
            "throttle_rate": throttle_rate, "retry_after": retry_after, "lock": threading.Lock(),
            "bytes_per_s": bytes_per_s, "link": {"free_at": 0.0},
            "counts": {"requests": 0, "faults": 0, "throttled": 0, "in_flight": 0, "in_flight_peak": 0}})
        super().__init__(self.handler)

    @property
    def counts(self) -> dict:
        return self.handler.counts
