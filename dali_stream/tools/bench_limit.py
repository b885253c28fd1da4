"""The decode limit `bench` reports its ratios against: the window's frames through the same decoders, warm, with
no loader around them (torchcodec on the workers' threads, DALI's decoder on whole streams, the open-decoder
engine)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..decode.route import route as route_of


def raw_limit(loader, window: list[tuple[int, int]], threads: int) -> dict[str, Any]:
    """Frames/s of the window's frames through the same decoders, warm, with no loader around them."""
    from ..graph.segment_frames import decode_segments
    from .bench_gpu import window_work

    work = [(loader.routes[key], key, segs, idx)  # (route, key, segs, idx)
            for key, segs, idx in window_work(loader, window, list(loader.routes))[0]]
    frames = sum(int(sum(len(i) for i in idx)) for *_, idx in work)
    # Warm: one open torchcodec decoder per segment per thread before timing (unbounded: the ideal).
    from ..decode.cpu import DecoderCache, warm_decoders

    warm = DecoderCache(None)
    for route, _, segs, _ in work:
        if route_of(route).torchcodec:
            for seg in segs:
                warm_decoders(seg, threads, warm)
    cpu_work = [(segs, idx, warm) for route, _, segs, idx in work if route_of(route).torchcodec]

    def decode(work) -> None:  # decode and drop: a window of full-size frames does not fit in memory at once
        for _ in decode_segments(*work):
            pass

    seconds = _on_threads(decode, cpu_work, threads)
    dali_work = [(key, segs, idx) for route, key, segs, idx in work if route_of(route).in_dali]
    if dali_work:
        seconds += _dali_decode_time(dali_work, loader, threads)
    t0 = time.perf_counter()  # open-decoder engine routes: the loader's engine (its threads, its open decoders)
    for route, key, segs, idx in work:
        if route in loader.stages.engines:
            loader.stages.engines[route].decode(key, segs, idx)
    seconds += time.perf_counter() - t0
    out: dict[str, Any] = {"frames": frames, "seconds": seconds, "frames_per_s": frames / seconds if seconds else 0.0,
                           "decode_ms_per_frame_thread": 1e3 * seconds * threads / max(1, frames)}
    if loader.host_batches and cpu_work:
        from ..graph.buffers import BufferPool
        from ..graph.segment_frames import decode_host

        buffers = BufferPool(keep=threads)  # reused as the loader's are, so no page faults are timed

        def decode_and_write(work) -> None:  # the loader's own per-camera decode and write, output dropped
            segs, idx, cache = work
            decode_host(segs, idx, cache, buffers, loader.stages.image_ops)

        with_layout = _on_threads(decode_and_write, cpu_work, threads)
        out["with_layout"] = {"seconds": with_layout, "frames_per_s": frames / with_layout if with_layout else 0.0,
                              "image_dtype": loader.stages.image_ops.dtype,
                              "memory_format": loader.config.memory_format}
    return out


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
    for route in sorted({loader.routes[key] for key, _, _ in work}):
        # The same streams the loader feeds DALI (joined per group, or a clip per sample), cut before timing.
        items = [loader.stages.builder.streams_of(key, segs, idx)
                 for key, segs, idx in work if loader.routes[key] == route]
        batch_size = max(len(inputs) for inputs in items)
        feed = iter(items)

        def source():
            inputs = next(feed)
            inputs = inputs + [inputs[0]] * (batch_size - len(inputs))  # a short last batch repeats its first
            return [d.data for d in inputs], [d.frames for d in inputs]

        gpu = route_of(route).on_gpu
        pipe = Pipeline(batch_size=batch_size, num_threads=loader.resolved.dali_threads if gpu else max(1, threads),
                        device_id=loader.stages.dali_device if gpu else None, prefetch_queue_depth=1)
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
