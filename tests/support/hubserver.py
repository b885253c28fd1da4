"""A small Hugging Face Hub on loopback, enough for `huggingface_hub.HfFileSystem` to read dataset
repositories at several revisions and buckets over plain HTTP (no Xet): repo and bucket info, tree
listings, paths-info, and `resolve` downloads with Range. Requests must carry the test token. Not a test
module: `with Hub(token) as endpoint:` then `hub.add_dataset(repo_id, {revision: folder})` and
`hub.add_bucket(bucket_id, folder)`; pass `storage_options={"endpoint": endpoint, "token": token}`."""

from __future__ import annotations

import hashlib
import json
import os
import re
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support.httpserver import Loopback, file_range

_SHA = lambda text: hashlib.sha1(text.encode()).hexdigest()  # noqa: E731


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # headers and body leave in separate writes: with Nagle on, each answer of a kept-alive connection waited
    # ~40 ms for the client's delayed ACK
    disable_nagle_algorithm = True
    hub: "Hub"

    def log_message(self, *args):
        pass

    def _json(self, obj, status: int = 200) -> None:
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str, code: str | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self.send_response(status)
        if code:
            self.send_header("X-Error-Code", code)
        self.send_header("X-Error-Message", message)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") != f"Bearer {self.hub.token}":
            self._error(401, "Invalid credentials in Authorization header")
            return False
        return True

    def _entries(self, root: Path, prefix: str, recursive: bool, files_only: bool = False,
                 hashed: bool = True) -> list[dict]:
        """Tree entries; dataset repositories publish git/LFS hashes (`hashed`), buckets do not."""
        base = root / prefix if prefix else root
        if not base.is_dir():
            return []
        walk = sorted(base.rglob("*")) if recursive else sorted(base.iterdir())
        out = []
        for p in walk:
            rel = p.relative_to(root).as_posix()
            if p.is_dir():
                if not files_only:
                    out.append({"type": "directory", "oid": _SHA(rel), "path": rel})
            else:
                out.append({"type": "file", "size": p.stat().st_size, "path": rel, "xetHash": None,
                            "mtime": "2026-11-01T00:00:00.000Z", **(self.hub.hashes(p) if hashed else {})})
        return out

    def _send_file(self, path: Path) -> None:
        if not path.is_file():
            self._error(404, "Entry not found", "EntryNotFound")
            return
        rng = self.headers.get("Range")
        start, end, size, body = file_range(path, rng)
        self.send_response(206 if rng else 200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{_SHA(str(path))}"')
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{size}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
            with self.hub.lock:
                self.hub.counts["bytes"] += len(body)

    def _route(self) -> None:
        if not self._authorised():
            return
        url = urlsplit(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        recursive = query.get("recursive", ["false"])[0].lower() == "true"
        hub = self.hub
        with hub.lock:
            hub.counts["requests"] += 1
        m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)(?:/revision/(.+))?", path)
        if m and self.command == "GET":
            revs = hub.datasets.get(m.group(1))
            rev = m.group(2) or "main"
            if revs is None:
                return self._error(404, "Repository not found", "RepoNotFound")
            if rev not in revs:
                return self._error(404, f"Invalid rev id: {rev}", "RevisionNotFound")
            return self._json({"id": m.group(1), "sha": _SHA(m.group(1) + rev), "private": True,
                               "siblings": [{"rfilename": e["path"]} for e in
                                            self._entries(revs[rev], "", True, files_only=True)]})
        if re.fullmatch(r"/api/datasets/[^/]+", path):  # an id without a namespace (older huggingface_hub asks)
            return self._error(404, "Repository not found", "RepoNotFound")
        m = re.fullmatch(r"/api/datasets/([^/]+/[^/]+)/(tree|paths-info)/([^/]+)(?:/(.*))?", path)
        if m:
            root = hub.datasets.get(m.group(1), {}).get(m.group(3))
            if root is None:
                return self._error(404, "Revision not found", "RevisionNotFound")
            if m.group(2) == "tree":
                return self._json(self._entries(root, m.group(4) or "", recursive))
            length = int(self.headers.get("Content-Length") or 0)
            form = parse_qs(self.rfile.read(length).decode()) if length else {}
            wanted = form.get("paths", [])
            return self._json([e for e in self._entries(root, "", True) if e["path"] in wanted])
        m = re.fullmatch(r"/datasets/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path)
        if m:
            root = hub.datasets.get(m.group(1), {}).get(m.group(2))
            if root is None:
                return self._error(404, "Revision not found", "RevisionNotFound")
            return self._send_file(root / m.group(3))
        m = re.fullmatch(r"/api/buckets/([^/]+/[^/]+)(?:/(tree|paths-info)(?:/(.*))?)?", path)
        if m:
            root = hub.buckets.get(m.group(1))
            if root is None:
                return self._error(404, "Bucket not found", "RepoNotFound")
            if m.group(2) is None:
                files = self._entries(root, "", True, files_only=True, hashed=False)
                return self._json({"id": m.group(1), "private": True, "createdAt": "2026-11-01T00:00:00.000Z",
                                   "size": sum(f["size"] for f in files), "totalFiles": len(files)})
            if m.group(2) == "tree":
                return self._json(self._entries(root, m.group(3) or "", recursive, hashed=False))
            length = int(self.headers.get("Content-Length") or 0)
            wanted = json.loads(self.rfile.read(length) or b"{}").get("paths", [])
            return self._json([e for e in self._entries(root, "", True, files_only=True, hashed=False)
                               if e["path"] in wanted])
        m = re.fullmatch(r"/buckets/([^/]+/[^/]+)/resolve/(.+)", path)
        if m and m.group(1) in hub.buckets:
            return self._send_file(hub.buckets[m.group(1)] / m.group(2))
        hub.unknown.append(f"{self.command} {self.path}")
        self._error(404, f"not emulated: {self.command} {path}")

    do_GET = do_HEAD = do_POST = _route


class Hub:
    def __init__(self, token: str) -> None:
        self.token = token
        self.datasets: dict[str, dict[str, Path]] = {}
        self.buckets: dict[str, Path] = {}
        self.unknown: list[str] = []  # requests the emulator does not answer (a test asserts none)
        self.lock = threading.Lock()
        self.counts = {"requests": 0, "bytes": 0}
        self._hashes: dict[tuple, dict] = {}
        self.server = Loopback(type("Handler", (_Handler,), {"hub": self}))

    def hashes(self, path: Path) -> dict:
        """The tree entry's hashes as the Hub publishes them: parquet and MP4 files are LFS (`lfs.oid` is the
        content's SHA-256, `oid` the pointer file's git blob SHA-1); other files carry their git blob SHA-1."""
        key = (path, path.stat().st_mtime_ns, path.stat().st_size)
        if key not in self._hashes:
            data = path.read_bytes()
            blob = lambda b: hashlib.sha1(b"blob %d\0" % len(b) + b).hexdigest()  # noqa: E731
            if path.suffix in (".parquet", ".mp4"):
                sha = hashlib.sha256(data).hexdigest()
                pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha}\nsize {len(data)}\n"
                self._hashes[key] = {"oid": blob(pointer.encode()), "lfs": {"oid": sha, "size": len(data),
                                                                            "pointerSize": len(pointer)}}
            else:
                self._hashes[key] = {"oid": blob(data)}
        return self._hashes[key]

    def add_dataset(self, repo_id: str, revisions: dict[str, os.PathLike]) -> None:
        self.datasets[repo_id] = {rev: Path(folder) for rev, folder in revisions.items()}

    def add_bucket(self, bucket_id: str, folder: os.PathLike) -> None:
        self.buckets[bucket_id] = Path(folder)

    def __enter__(self) -> "Hub":
        self.server.__enter__()
        return self

    @property
    def endpoint(self) -> str:
        return self.server.url

    def __exit__(self, *exc) -> None:
        self.server.__exit__(*exc)
