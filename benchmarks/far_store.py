"""A far-away object store on loopback for benchmarks: a folder served over HTTP with Range requests, an ETag and
directory listings, every GET answered after a delay (`--delay-ms`), all bodies together sent no faster than a
link's rate (`--mbit-s`, 0: no cap), thousands of requests in flight at once.

    .venv/bin/python benchmarks/far_store.py FOLDER [--delay-ms 50] [--mbit-s 0]   # prints its URL, serves until killed

The tests' server (tests/support/httpserver.py, with tests/support/faultproxy.py adding the delay) starts a thread per connection
and a proxy connection per request: on a 2-core machine it answers ~500 requests/s while nothing else runs, so a
loader that reads more than that measures the server. This one is one asyncio process (aiohttp, which fsspec's
HTTP file system already needs); the delay is a timer, not a thread, so it adds latency a request and no CPU.
"""

from __future__ import annotations

import argparse
import asyncio
import html
import os
import re
import sys
from pathlib import Path
from urllib.parse import quote, unquote


def _range(header: str | None, size: int) -> tuple[int, int] | None:
    """[start, end) of a `Range: bytes=a-b` header (None: the whole file)."""
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", header or "")
    if m is None:
        return None
    start = int(m.group(1)) if m.group(1) else 0
    end = min(size, int(m.group(2)) + 1) if m.group(2) else size
    return start, end


def app(root: Path, delay_s: float, bytes_per_s: float = 0.0):
    from aiohttp import web

    link = {"free_at": 0.0}  # when the link has sent every body queued so far (one link, shared by all requests)

    async def sent(nbytes: int) -> None:
        """Wait as long as the link takes to send `nbytes` after the bodies queued before it."""
        if not bytes_per_s:
            return
        loop = asyncio.get_running_loop()
        start = max(loop.time(), link["free_at"])
        link["free_at"] = start + nbytes / bytes_per_s
        await asyncio.sleep(link["free_at"] - loop.time())

    async def serve(request: web.Request) -> web.StreamResponse:
        path = (root / unquote(request.path).lstrip("/")).resolve()
        if root not in (path, *path.parents) or not path.exists():
            raise web.HTTPNotFound()
        if request.method == "GET" and delay_s:
            await asyncio.sleep(delay_s)
        if path.is_dir():  # a listing fsspec's HTTP file system reads links from
            links = "".join(f'<a href="{quote(name)}{"/" if (path / name).is_dir() else ""}">{html.escape(name)}</a>\n'
                            for name in sorted(os.listdir(path)))
            return web.Response(text=f"<html><body>\n{links}</body></html>", content_type="text/html")
        st = path.stat()
        size = st.st_size
        span = _range(request.headers.get("Range"), size)
        start, end = span or (0, size)
        headers = {"Accept-Ranges": "bytes", "Content-Type": "application/octet-stream",
                   "ETag": f'"{st.st_ino:x}-{st.st_mtime_ns:x}-{size:x}"'}
        if span is not None:
            headers["Content-Range"] = f"bytes {start}-{end - 1}/{size}"
        if request.method == "HEAD":
            return web.Response(status=200, headers={**headers, "Content-Length": str(size)})
        with open(path, "rb") as fh:
            fh.seek(start)
            body = fh.read(end - start)
        await sent(len(body))
        return web.Response(status=206 if span is not None else 200, body=body, headers=headers)

    server = web.Application()
    server.router.add_route("GET", "/{tail:.*}", serve)
    server.router.add_route("HEAD", "/{tail:.*}", serve)
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("--delay-ms", type=float, default=50.0)
    parser.add_argument("--mbit-s", type=float, default=0.0, help="the link's rate, all bodies together (0: no cap)")
    args = parser.parse_args(argv)
    from aiohttp import web

    async def run() -> None:
        runner = web.AppRunner(app(Path(args.folder).resolve(), args.delay_ms / 1000, args.mbit_s * 1e6 / 8),
                               access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=4096)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        print(f"http://127.0.0.1:{port}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
