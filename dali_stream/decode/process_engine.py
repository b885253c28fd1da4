"""The open-decoder engine in decode processes: each spawned process one decode thread with its decoders kept open.

Why: in one process the open engine stops scaling at 4 decode threads (an H200, 640x480, one frame of two cameras:
~1,000 samples/s with NVDEC 4-14 % busy): the host work around each decode (feeding packets, converting, stacking)
binds the process. Processes of one thread each scaled where threads did not (556 / 1,130 / 1,975 / 3,114 samples/s
at 1 / 2 / 4 / 7 processes), and handing their frames to one consumer over CUDA IPC cost nothing measurable
(benchmarks/results/NVIDIA-H200/2026-11-29-2/). Others found the same: one decoder per process is how NVDEC's
engines are kept busy.

How: the loader builds each (batch, camera) chunk's packet feed (`decode.feed`) as the threaded engine does and
hands the chunks, in order, to a pool of `processes` spawned processes (`concurrent.futures.ProcessPoolExecutor`);
each process keeps one decoder per (camera, codec), opened on its first chunk of that camera and reused after, and
returns the asked pictures stacked: on the GPU a CUDA tensor handed back through CUDA IPC (torch's multiprocessing
pickler: no copy), on the CPU a numpy array through the pool's pipe (torch's shared-memory tensors need a file
descriptor passed per tensor by a server thread in each process, one more thing to break: a 96x128 chunk is
~0.5 MB). The loader joins the chunks in plan order. The same engine runs FFmpeg's decoders (route `cpu-open`) on any node, so every path of it is
tested without a GPU.

Faults: a process that dies (killed, out of memory, a library that ends it) breaks the pool; the pool is started again
and the batch's chunks of that camera decoded again, once (`RETRIES`): the frames are the same, since a chunk's
pictures are known by their times, never by the process that decoded them. A batch that breaks the pool twice raises
`DecodeError` naming the camera, episodes and exit status; so does one whose chunks of a camera get no answer in
`ANSWER_S` seconds twice (the first time the processes are taken for hung and started anew, as for a death).
Never a wrong or missing frame: a decoder that drops a picture is named as in the threaded engine. `close()` ends
every process (joined) and none starts after it (a batch being decoded then ends unfinished, undelivered); Ctrl-C
reaches the loader's process only (the decode processes ignore SIGINT and end when it closes them). The processes
are spawned (a forked CUDA context is unusable) without running the caller's script
(`decode.spawning`): a training script needs no `if __name__ == "__main__":` guard for them.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Mapping

import numpy as np

from ..errors import DaliStreamError, DecodeError
from .engine_parts import check_sizes, failed, hand_over, missing_error, mixed_sizes, split
from .feed import Feed, build_feed
from .spawning import without_main

log = logging.getLogger("dali_stream")

RETRIES = 1  # a batch's chunks decoded again after the pool broke, before the batch is an error
ANSWER_S = 300.0  # seconds a batch's chunks may take before a process is taken for hung (a 480p chunk: milliseconds)
END_S = 10.0  # seconds close() gives running chunks before the processes are terminated


class ProcessEngine:
    """`processes` decode processes (module doc) for `route` (a `decode.route.EngineRoute`, which opens each process's
    decoders: nvdec-open on CUDA device `device_index`, or cpu-open), with `OpenDecoders`' interface: `decode(camera, segs, idx)`, `stats()`, `close()`, and for CUDA
    frames the hand-off `stream` they are joined on (`hand_over`). `sizes`: camera -> (height, width) from
    meta/info.json; `colours`: file -> `decode.colour.Colour` known beforehand (NVDEC)."""

    def __init__(self, route: Any, processes: int, device_index: int | None,
                 sizes: Mapping[str, tuple[int, int] | None], colours: dict | None = None, stream: Any = None) -> None:
        if processes < 1:
            raise ValueError(f"the process engine needs at least one process. Found: {processes}")
        self.route, self.processes, self.threads = route, processes, 1
        self.sizes, self.stream = dict(sizes), stream
        self._spec = (route, device_index, dict(sizes), dict(colours or {}))
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()  # the loader's worker threads decode batches at once: one pool, counted once
        self._procs: dict[ProcessPoolExecutor, list] = {}  # every pool's processes (a broken pool forgets its own)
        self.restarts = 0  # pools started again after a process died
        self._closed = False  # set by close(): no pool is started again, a batch whose chunks it cut short ends
        self.samples = self.feeds = self.clips = self.packets = self.decoded = 0
        self.seconds = dict.fromkeys(("feed", "decoder", "convert", "stack", "sync", "wait"), 0.0)
        self._start()

    def _start(self) -> ProcessPoolExecutor:
        """The pool, its processes spawned now (they import and start while the loader builds its first batch)."""
        with self._lock:
            if self._closed:
                raise self._closed_error()
            if self._pool is None:
                self._pool = ProcessPoolExecutor(self.processes, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=_begin, initargs=(self._spec,))
                with without_main():  # every process is spawned by these first submissions (none is idle yet)
                    for _ in range(self.processes):
                        self._pool.submit(_ready)
                self._procs[self._pool] = list((getattr(self._pool, "_processes", None) or {}).values())
            return self._pool

    def decode(self, camera: str, segs: list, idx: list[np.ndarray]) -> tuple[Any, int]:
        """The batch's frames of `camera`: (sum of steps, H, W, 3) uint8, sample after sample, step after step, and
        the pictures decoded (as `OpenDecoders.decode`)."""
        check_sizes(self.sizes, camera, segs)
        t0 = time.perf_counter()
        chunks = split(len(segs), self.processes)
        feeds = [build_feed([(segs[j], idx[j]) for j in c]) for c in chunks]
        with self._lock:
            self.seconds["feed"] += time.perf_counter() - t0
            self.samples += len(segs)
        answers = self._answers(camera, segs, [(camera, segs[c[0]].codec, feed) for c, feed in zip(chunks, feeds)])
        frames = [self._frames(camera, [segs[j] for j in c], [idx[j] for j in c], feed, answer)
                  for c, feed, answer in zip(chunks, feeds, answers)]
        decoded = sum(answer[2] for answer in answers)  # every answer is "ok" here: `_frames` raised otherwise
        if self.stream is None:
            return (frames[0] if len(frames) == 1 else np.concatenate(frames)), decoded
        return self._own(frames), decoded

    def _own(self, parts: list) -> Any:
        """CUDA frames handed back by the processes (IPC memory, theirs) copied into one tensor of this process's on
        the hand-off stream, which is waited for before the parts are let go: torch's caching allocator does not
        track IPC memory (`record_stream` is a no-op there), and a process may reuse it for its next chunk as soon as
        it is released here."""
        import torch

        with torch.cuda.stream(self.stream):
            joined = torch.cat(parts) if len(parts) > 1 else parts[0].clone()
        self.stream.synchronize()
        return joined

    def hand_over(self, parts: list) -> Any:
        return hand_over(self.stream, parts)

    def _frames(self, camera: str, segs: list, idx: list[np.ndarray], feed: Feed, answer: tuple) -> Any:
        """A chunk's frames from its process's answer, or the error it names (as the threaded engine's)."""
        kind = answer[0]
        if kind == "missing":
            raise missing_error(self.route, camera, segs, idx, feed, answer[1])
        if kind == "sizes":
            raise mixed_sizes(camera, segs, answer[1])
        if kind == "error":
            raise failed(f"{self.route}, in decode processes", camera, segs, f"in its decoder: {answer[1]}")
        _, frames, decoded, seconds = answer
        with self._lock:
            self.feeds += 1
            self.clips += feed.clips
            self.packets += len(feed.units)
            self.decoded += decoded
            for phase, value in seconds.items():
                self.seconds[phase] += value
        return frames

    def _answers(self, camera: str, segs: list, jobs: list[tuple]) -> list[tuple]:
        """Each job's answer, in order; the jobs decoded again on a new pool where a process died (module doc)."""
        for attempt in range(RETRIES + 1):
            pool = self._start()
            t0 = time.perf_counter()
            try:
                futures = [pool.submit(_decode, *job) for job in jobs]  # a pool already broken refuses here
                deadline = time.monotonic() + ANSWER_S  # one for the batch's chunks, not one each
                answers = [f.result(timeout=max(0.0, deadline - time.monotonic())) for f in futures]
                with self._lock:
                    self.seconds["wait"] += time.perf_counter() - t0
                return answers
            except (CancelledError, FutureTimeout, RuntimeError) as exc:  # BrokenProcessPool: a RuntimeError
                why = self._why(pool, exc)
            with self._lock:
                if self._pool is pool:  # not already replaced by another thread that saw the same break
                    self._pool = None
                    self.restarts += 1
                    _end(pool, processes=self._procs.get(pool, []))
            if attempt < RETRIES:
                log.warning("%s, decoding camera %r of episodes %s: its chunks are decoded again in new processes",
                            why, camera, sorted({s.episode for s in segs}))
        raise DecodeError(
            f"the open-decoder engine ({self.route}, {self.processes} decode processes): {why}, decoding camera "
            f"{camera!r} of episodes {sorted({s.episode for s in segs})}, and again after its processes were started "
            f"anew: killed from outside (the kernel's memory killer: see `dmesg`), or a decoder that ends its process; "
            f"decode_processes=0 decodes in the loader's own process, decode={{{camera!r}: 'cpu'}} with torchcodec")

    def _why(self, pool: ProcessPoolExecutor, exc: BaseException) -> str:
        """Why a batch's chunks got no answers from `pool`, to say before they are decoded again (or raised: `exc`
        itself where it is not the pool's)."""
        if self._closed:  # close() ended the processes under this batch: nobody takes it, nothing restarts
            raise self._closed_error() from None
        if isinstance(exc, FutureTimeout):
            return f"a decode process gave no answer in {ANSWER_S:.0f} s"
        if isinstance(exc, BrokenProcessPool):
            return f"a decode process ended ({self._ended(pool)})"
        if isinstance(exc, CancelledError) or "after shutdown" in str(exc):
            # another batch's chunks found the pool broken or hung and started it anew: ours, queued or refused
            # there, are decoded again on the new one
            return "the decode processes were started anew under this batch (another batch's chunks saw them fail)"
        raise exc

    def _closed_error(self) -> DaliStreamError:
        return DaliStreamError(f"the open-decoder engine ({self.route}, {self.processes} decode processes) was closed "
                            f"(its loader's close(), or the interpreter's exit) while a batch was being decoded: "
                            f"that batch is not delivered")

    def _ended(self, pool: ProcessPoolExecutor) -> str:
        """The exit status of the pool's process that ended (negative: the signal that ended it)."""
        procs = self._procs.get(pool, [])
        for p in procs:
            p.join(timeout=1)
        # the pool's own thread joins them too: where its wait reaped a process first, ours reads no status until
        # that thread has stored it (a moment later), and the process that died would go unreported
        deadline = time.monotonic() + 2
        while any(p.exitcode is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.02)
        codes = [p.exitcode for p in procs if p.exitcode is not None]
        codes.sort(key=lambda code: code == -signal.SIGTERM)  # the pool ends the others with SIGTERM once broken
        return f"exit status {codes[0]}" if codes else "its exit status unknown"

    def pids(self, every: bool = False) -> list[int]:
        """The decode processes' ids (tests, tools): the running pool's, or with `every` those of every pool started
        since the engine was made (replaced ones included) until it closed."""
        with self._lock:  # a worker thread may start a pool again meanwhile
            pools, pool = dict(self._procs), self._pool
        if every:
            return sorted(p.pid for procs in pools.values() for p in procs)
        return sorted(p.pid for p in pools.get(pool, [])) if pool is not None else []

    def __str__(self) -> str:
        """What the engine runs, as the loader's log says it (`loader.assemble.open_engines`)."""
        return f"{self.processes} decode processes"

    def stats(self) -> dict[str, Any]:
        return {"threads": self.threads, "processes": self.processes, "pids": self.pids(),
                "pids_ever": self.pids(every=True), "restarts": self.restarts,
                "decoders_opened": None, "samples": self.samples, "feeds": self.feeds, "clips": self.clips,
                "packets": self.packets, "pictures": self.decoded, "seconds": dict(self.seconds)}

    def close(self, wait: bool = True) -> None:
        """End every decode process (each closes its decoders as it exits); joined, also with `wait=False` (a
        finalizer's close: running chunks are not waited for)."""
        with self._lock:
            self._closed = True
            pool, self._pool = self._pool, None
            processes = self._procs.get(pool, []) if pool is not None else []
            self._procs.clear()
        if pool is not None:
            _end(pool, wait, processes)
        if self.stream is not None and wait:
            import torch

            self.stream = None
            torch.cuda.empty_cache()


def _end(pool: ProcessPoolExecutor, wait: bool = False, processes: list | None = None) -> None:
    """Shut a pool down and join its `processes`, within bounds: with `wait` a running chunk may finish
    (`END_S`), then any process still alive (a hung decoder, a broken pool's others) is terminated, then killed."""
    processes = list((getattr(pool, "_processes", None) or {}).values()) if processes is None else processes
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + (END_S if wait else 0.0)
    for p in processes:
        p.join(timeout=max(0.0, deadline - time.monotonic()))
    for p in processes:
        if p.is_alive():
            p.terminate()
            p.join(timeout=2)
        if p.is_alive():
            p.kill()
            p.join()


# ---- in each decode process ----------------------------------------------------------------------------------
_SPEC: tuple | None = None
_DECODERS: dict[tuple[str, str], Any] = {}


def _begin(spec: tuple) -> None:
    """A decode process's start: Ctrl-C is the loader's to handle (it closes the engine); NVDEC's processes import
    torch, whose pickler hands CUDA tensors back by IPC (FFmpeg's need neither torch nor its threads)."""
    global _SPEC
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _SPEC = spec
    threading.Thread(target=_orphaned, args=(os.getppid(),), name="dali-stream-parent", daemon=True).start()
    if spec[0].on_gpu:
        import torch

        torch.set_num_threads(1)


def _orphaned(parent: int) -> None:
    """End this decode process once the loader's process is gone (killed: no close ever comes, and the pool's queue,
    which every process holds both ends of, never reports the end)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(0)


def _ready() -> int:
    return os.getpid()


def _decoder(camera: str, codec: str) -> Any:
    dec = _DECODERS.get((camera, codec))
    if dec is None:
        assert _SPEC is not None
        route, device_index, sizes, colours = _SPEC
        dec = route.packet_decoder(codec, camera, device_index, sizes, colours)
        _DECODERS[(camera, codec)] = dec
    return dec


def _decode(camera: str, codec: str, feed: Feed) -> tuple:
    """One chunk in a decode process: ("ok", frames, pictures decoded, seconds by phase), or what went wrong
    ("missing", feed times; "sizes", the sizes; "error", its text): always an answer that pickles."""
    dec = _decoder(camera, codec)
    t0 = time.perf_counter()
    try:
        got, convert_s = dec.decode(feed)
    except Exception as exc:  # noqa: BLE001 - the loader names the chunk; the decoder is replaced
        _DECODERS.pop((camera, codec), None)
        dec.close()
        return "error", f"{type(exc).__name__}: {exc}"
    t1 = time.perf_counter()
    missing = feed.missing(got)
    if len(missing):
        _DECODERS.pop((camera, codec), None)
        dec.close()
        return "missing", missing
    try:
        frames = dec.stack([got[int(t)] for steps in feed.asked for t in steps])
    except (RuntimeError, ValueError):
        return "sizes", sorted({tuple(f.shape) for f in got.values()})
    t2 = time.perf_counter()
    dec.finish()
    t3 = time.perf_counter()
    return "ok", frames, len(got), {"decoder": t1 - t0 - convert_s, "convert": convert_s, "stack": t2 - t1,
                                  "sync": t3 - t2}
