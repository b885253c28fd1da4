"""The decode limit `bench` reports its ratios against: the window's frames through the same decoders, warm, with
no loader around them (torchcodec on the workers' threads, DALI's decoder on whole streams, the open-decoder
engine, depth cameras' codes through PyAV, images stored in the tables), as a reader asking a sample's frames at a
time decodes them. Where the loader holds its open episodes' frames (`decode.open_episodes`) it decodes less than
that: `whole_episodes` is then the limit of that work, each episode's camera decoded once, front to back."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np


def raw_limit(loader, window: list[tuple[int, int]], threads: int) -> dict[str, Any]:
    """Frames/s of the window's frames through the same decoders, warm, with no loader around them."""
    from ..graph.worker_decode import decode_segments
    from .bench_gpu import window_work

    work = [(loader.decode_routes[key], key, segs, idx)  # (route, key, segs, idx)
            for key, segs, idx in window_work(loader, window, list(loader.routes))[0]]
    frames = sum(int(sum(len(i) for i in idx)) for *_, idx in work)
    # Warm: one open torchcodec decoder per segment per thread before timing (unbounded: the ideal).
    from ..decode.cpu import DecoderCache, warm_decoders

    warm = DecoderCache(None)
    for route, _, segs, _ in work:
        if route.torchcodec:
            for seg in segs:
                warm_decoders(seg, threads, warm)
    cpu_work = [(segs, idx, warm) for route, _, segs, idx in work if route.torchcodec]

    def decode(work) -> None:  # decode and drop: a window of full-size frames does not fit in memory at once
        for _ in decode_segments(*work):
            pass

    seconds = _on_threads(decode, cpu_work, threads)
    from ..decode.depth import depth_codes_each

    depth_work = [(segs, idx, None, None, None, None, depth_codes_each) for route, _, segs, idx in work
                  if route.depth]
    seconds += _on_threads(decode, depth_work, threads) if depth_work else 0.0
    from ..decode.images import decode_image

    def images(stored: list) -> None:  # images stored in the tables: each sample's rows' images
        for s in stored:
            for blob in s.blobs if s is not None else ():
                decode_image(blob, "bench")

    image_work = [segs for route, _, segs, _ in work if route.in_tables]
    seconds += _on_threads(images, image_work, threads) if image_work else 0.0
    dali_work = [(key, segs, idx) for route, key, segs, idx in work if route.in_dali]
    if dali_work:
        seconds += _dali_decode_time(dali_work, loader, threads)
    engines = loader.stats()["engines"]  # the routes with an open-decoder engine
    t0 = time.perf_counter()  # open-decoder engine routes: the loader's engine (its threads, its open decoders)
    for route, key, segs, idx in work:
        if route in engines:
            loader.decode_on_engine(key, segs, idx)
    seconds += time.perf_counter() - t0
    out: dict[str, Any] = {"frames": frames, "seconds": seconds, "frames_per_s": frames / seconds if seconds else 0.0,
                           "decode_ms_per_frame_thread": 1e3 * seconds * threads / max(1, frames)}
    if loader.stats()["episode_frames"] is not None:  # the open episodes' frames are held
        out["whole_episodes"] = _whole_episodes(loader, work, threads)
    if loader.host_batches and cpu_work:
        from ..graph.buffers import BufferPool
        from ..graph.worker_decode import decode_host

        buffers = BufferPool(keep=threads)  # reused as the loader's are, so no page faults are timed

        def decode_and_write(work) -> None:  # the loader's own per-camera decode and write, output dropped
            segs, idx, cache = work
            decode_host(segs, idx, cache, buffers, loader.image_ops)

        with_layout = _on_threads(decode_and_write, cpu_work, threads)
        out["with_layout"] = {"seconds": with_layout, "frames_per_s": frames / with_layout if with_layout else 0.0,
                              "image_dtype": loader.image_ops.dtype,
                              "memory_format": loader.config.memory_format}
    return out


def limit_ratios(frames_per_s: float, limit: dict[str, Any] | None) -> dict[str, float | None]:
    """The loader's frames/s over the limit (`raw_limit`; None: not measured): `limit_ratio` against the least decode
    work its decoders do (each open episode's camera decoded once, where the loader holds their frames and every
    camera is decoded so; else the frames as asked), `limit_ratio_per_sample` against the frames as asked,
    `limit_ratio_with_layout` against those and their write into the caller's layout."""
    if limit is None:
        return dict.fromkeys(("limit_ratio", "limit_ratio_per_sample", "limit_ratio_with_layout"))
    whole = limit.get("whole_episodes", {})
    least = whole["frames_per_s"] if whole.get("frames") == limit["frames"] else limit["frames_per_s"]
    layout = limit.get("with_layout", {}).get("frames_per_s")
    return {"limit_ratio": frames_per_s / least if least else None,
            "limit_ratio_per_sample": frames_per_s / limit["frames_per_s"] if limit["frames_per_s"] else None,
            "limit_ratio_with_layout": frames_per_s / layout if layout else None}


def _on_threads(fn, work: list, threads: int) -> float:
    """Seconds to run `fn` over `work` on `threads` threads."""
    t0 = time.perf_counter()
    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(fn, work))
    else:
        for w in work:
            fn(w)
    return time.perf_counter() - t0


def _dali_decode_time(work, loader, threads: int) -> float:
    """Seconds DALI's video decoder alone takes for the DALI-routed (camera, batch) decodes, warm."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    from ..graph.pipeline import video_decoder

    total = 0.0
    for route in sorted({loader.decode_routes[key] for key, _, _ in work}, key=lambda r: r.name):
        # The same streams the loader feeds DALI (joined per group, or a clip per sample), cut before timing.
        items = [loader.dali_inputs(key, segs, idx)
                 for key, segs, idx in work if loader.decode_routes[key] == route]
        batch_size = max(len(inputs) for inputs in items)
        feed = iter(items)

        def source():
            inputs = next(feed)
            inputs = inputs + [inputs[0]] * (batch_size - len(inputs))  # a short last batch repeats its first
            return [d.data for d in inputs], [d.frames for d in inputs]

        gpu = route.on_gpu
        pipe = Pipeline(batch_size=batch_size, num_threads=loader.resolved.dali_threads if gpu else max(1, threads),
                        device_id=loader.dali_device if gpu else None, prefetch_queue_depth=1)
        with pipe:
            enc, frames = fn.external_source(source=source, num_outputs=2, batch=True, dtype=[types.UINT8, types.INT32])
            pipe.set_outputs(video_decoder(enc, frames, route))
        pipe.build()
        pipe.run()  # warm-up: first batch (decoder libraries loaded)
        t0 = time.perf_counter()
        for _ in range(len(items) - 1):
            pipe.run()
        total += (time.perf_counter() - t0) * len(items) / max(1, len(items) - 1)
    return total


def _whole_episodes(loader, work: list, threads: int) -> dict[str, Any]:
    """The window's cameras decoded on the workers as the loader decodes them with its open episodes' frames: every
    distinct segment whole, once, through decoders opened for it (the loader opens one an episode's camera), on
    `threads` threads. A window draws part of each episode it touches, the rest before or after it: the time is
    scaled by the frames the window asks over those its segments hold (a segment's frames times the camera's steps
    a sample), what an epoch's pass over the same episodes would cost for the window's share. `frames_per_s`: the
    window's frames over that time, the figure `limit_ratio` is taken against."""
    from ..decode.cpu import DecoderCache
    from ..decode.open_episodes import EpisodeFrames
    from ..graph.dali_on_workers import DaliFrames
    from ..graph.worker_decode import decode_segments

    on_workers = set(loader.resolved.dali_on_workers)
    mine = [(key, segs, idx) for route, key, segs, idx in work if route.torchcodec or key in on_workers]
    if not mine:
        return {}
    dali = DaliFrames() if on_workers else None
    if dali is not None:  # DALI's library loaded before timing
        key, segs, _ = next(w for w in mine if w[0] in on_workers)
        dali([(next(s for s in segs if s is not None), np.zeros(1, np.int64))])
    held, cold = EpisodeFrames(1 << 62), DecoderCache(None)

    def whole(w) -> None:
        key, segs, idx = w
        for _ in decode_segments(segs, idx, cold, decode=dali if key in on_workers else None, episodes=held):
            pass

    seconds = _on_threads(whole, mine, threads)
    asked = sum(int(sum(len(i) for i in idx)) for _, _, idx in mine)
    steps = {key: len(idx[0]) for key, _, idx in mine if idx}
    held_frames = sum(len(seg.pts_s) * steps[key] for key, seg in
                      {(key, s.uid): (key, s) for key, segs, _ in mine for s in segs if s is not None}.values())
    share = min(1.0, asked / held_frames) if held_frames else 1.0
    if dali is not None:
        dali.close()
    return {"frames": asked, "decoded": held.frames, "seconds": seconds * share, "share": share,
            "frames_per_s": asked / (seconds * share) if seconds else 0.0}
