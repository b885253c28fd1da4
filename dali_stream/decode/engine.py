"""The open-decoder engine: decoders that stay open for the loader's life, fed packets, several at once.

Routes ``nvdec-open`` (NVDEC through PyNvVideoCodec) and ``cpu-open`` (FFmpeg's decoders through PyAV, the same
engine on any node: the reference the NVDEC one is checked against) decode here instead of inside the DALI graph
(`decode.packet_decoders`). The engine owns `threads` decode threads (default: one per NVDEC engine, as one decoder
instance cannot use more than one, at most 4: `decode.route.OPEN_NVDEC_THREADS`); each thread keeps one decoder per
(camera, codec), opened on first use and reused by every later batch. A batch's samples of a camera are split into
contiguous chunks, one per thread; a chunk's segments are fed to its thread's decoder as one packet feed
(`decode.feed`), and the asked pictures come back by their feed time. The frames then enter the DALI graph through
an external source on the device they were decoded on (`graph.pipeline`), so resize, crop, normalise, `augment=` and
the DALI PyTorch iterator are the same as for every other route.

Never silently wrong: a picture asked for that the decoder did not hand back raises `DecodeError` naming the
episode, camera, frames and file (a decoder that drops a picture cannot shift the others: pictures are known by
their times, not by their order). A decoder that fails is closed and replaced, and the failing segment is named.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import DaliStreamError
from .engine_parts import check_sizes, culprit, hand_over, missing_error, mixed_sizes, split
from .feed import build_feed


class OpenDecoders:
    """`threads` decode threads, each with its decoders kept open (module doc), for `route` (`decode.route.EngineRoute`,
    whose `make_engine` builds it). `make(codec, camera)` opens one decoder.

    `sizes`: camera -> (height, width) every segment of it must have (None or absent: not checked). `stream`: the
    engine's hand-off CUDA stream (nvdec-open; None on the CPU): see `hand_over`."""

    def __init__(self, make: Callable[[str, str], Any], threads: int, route: Any,
                 sizes: Mapping[str, tuple[int, int] | None] | None = None, stream: Any = None) -> None:
        if threads < 1:
            raise ValueError(f"the open-decoder engine needs at least one thread. Found: {threads}")
        self.make, self.threads, self.route = make, threads, route
        self.sizes = dict(sizes or {})
        self.stream = stream
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="dali-stream-decode")
        self._local = threading.local()
        self._lock = threading.Lock()
        self._all: list[Any] = []  # every decoder opened, for close()
        self.opened = 0  # decoders opened over the engine's life (threads x cameras when they stay open)
        self.feeds = 0  # packet feeds decoded
        self.clips = 0  # clips fed (a decoder restart at a keyframe each)
        self.packets = 0  # packets fed
        self.decoded = 0  # pictures handed back that were asked for
        self.samples = 0  # sample-cameras decoded
        # thread-seconds spent in each phase of a chunk (where a host-bound engine's time goes): the packet feed
        # built, the decoder's calls (NVDEC: parse, decode, map; FFmpeg: decode), the pictures converted to RGB,
        # stacked, and the wait for the decoder's stream
        self.seconds = dict.fromkeys(("feed", "decoder", "convert", "stack", "sync"), 0.0)

    def decode(self, camera: str, segs: list, idx: list[np.ndarray]) -> tuple[Any, int]:
        """The batch's frames of `camera`: (sum of steps, H, W, 3) uint8, sample after sample, step after step
        (`segs[j]`, `idx[j]`: sample j's segment and its steps' frame indices in it), and pictures decoded."""
        n = len(segs)
        with self._lock:
            self.samples += n
        chunks = split(n, self.threads)
        futures = [self.pool.submit(self._decode_chunk, camera, [segs[j] for j in c], [idx[j] for j in c])
                   for c in chunks]
        parts = [f.result() for f in futures]
        decoded = sum(p[1] for p in parts)
        frames = [p[0] for p in parts]
        if isinstance(frames[0], np.ndarray):
            return (frames[0] if len(frames) == 1 else np.concatenate(frames)), decoded
        return hand_over(self.stream, frames), decoded

    def hand_over(self, parts: list) -> Any:
        return hand_over(self.stream, parts)

    def _decoder(self, camera: str, codec: str):
        mine = getattr(self._local, "decoders", None)
        if mine is None:
            mine = self._local.decoders = {}
        dec = mine.get((camera, codec))
        if dec is None:
            dec = mine[(camera, codec)] = self.make(codec, camera)
            with self._lock:
                self._all.append(dec)
                self.opened += 1
        return dec

    def _drop(self, camera: str, codec: str) -> None:
        dec = self._local.decoders.pop((camera, codec), None)
        if dec is not None:
            dec.close()

    def _decode_chunk(self, camera: str, segs: list, idx: list[np.ndarray]) -> tuple[Any, int]:
        codec = segs[0].codec
        t0 = time.perf_counter()
        check_sizes(self.sizes, camera, segs)
        feed = build_feed(list(zip(segs, idx)))
        dec = self._decoder(camera, codec)
        t1 = time.perf_counter()
        try:
            got, convert_s = dec.decode(feed)
        except DaliStreamError:
            raise
        except Exception as exc:  # noqa: BLE001 - the decoder's own error: name the segment that causes it
            self._drop(camera, codec)
            raise culprit(self.make, self.route, camera, segs, idx, exc) from exc
        t2 = time.perf_counter()
        missing = feed.missing(got)
        if len(missing):
            self._drop(camera, codec)
            raise missing_error(self.route, camera, segs, idx, feed, missing)
        try:
            frames = dec.stack([got[int(t)] for steps in feed.asked for t in steps])
        except (RuntimeError, ValueError) as exc:  # frames of different sizes in one camera
            raise mixed_sizes(camera, segs, sorted({tuple(f.shape) for f in got.values()})) from exc
        t3 = time.perf_counter()
        dec.finish()
        t4 = time.perf_counter()
        with self._lock:
            self.feeds += 1
            self.clips += feed.clips
            self.packets += len(feed.units)
            self.decoded += len(got)
            for phase, seconds in (("feed", t1 - t0), ("decoder", t2 - t1 - convert_s), ("convert", convert_s),
                                   ("stack", t3 - t2), ("sync", t4 - t3)):
                self.seconds[phase] += seconds
        return frames, len(got)

    def __str__(self) -> str:
        """What the engine runs, as the loader's log says it (`loader.assemble.open_engines`)."""
        return f"{self.threads} decode threads"

    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {"threads": self.threads, "processes": 0, "decoders_opened": self.opened, "samples": self.samples,
                    "feeds": self.feeds, "clips": self.clips, "packets": self.packets, "pictures": self.decoded,
                    "seconds": dict(self.seconds)}

    def close(self, wait: bool = True) -> None:
        """End the decode threads, then close every decoder (each was used by its own thread only). `wait=False`
        (a finalizer's close) does not wait for a running chunk, and leaves its decoders to garbage collection.

        On the GPU the memory torch's caching allocator keeps for the engine's streams goes back to the device: it
        keeps each stream's freed blocks for that stream alone, so the blocks of an engine's streams would stay
        reserved, unusable, after them (an H200 process that built 18 engines one after another held 129 GiB, and the
        next processes on the GPU ran out of memory)."""
        self.pool.shutdown(wait=wait, cancel_futures=True)
        if not wait:
            return
        with self._lock:
            decoders, self._all = self._all, []
        for dec in decoders:
            dec.close()
        if self.stream is not None:
            import torch

            self.stream = None
            torch.cuda.empty_cache()
