"""`dali-stream bench`: how fast StreamLoader feeds training on this node, against the decode limit and a peer.

One run = one (dataset, mode, decode, batch size, workers, pool) configuration:
1. StreamLoader streams batches; after `warmup_batches`, a steady wall-clock window of `duration_s` gives
   `samples_per_s` and `frames_per_s_node` (samples or decoded frames / window seconds, never a sum of
   gaps) and the batch latency percentiles (time the training loop waited in `next()`).
2. **Raw decode limit**: the window's batch plans again, the same frames through the same decoders, warm
   (segments cut and decoders open before timing), no loader around them: `limit_ratio` = loader / limit.
   Where the loader has no DALI graph (`host_batches`), also the same decode followed by the loader's own write
   into the caller's layout and dtype, on the same threads: `limit_ratio_with_layout` = loader / that, what is
   left to the loader's own overhead once the output format is paid for.
3. **Baseline**: a plain PyTorch DataLoader over a map-style dataset decoding each sample with torchcodec
   from the packed MP4s, as lerobot's LeRobotDataset does (`bench_baseline`), on the same samples, at each
   worker count; `baseline_ratio` = loader / the baseline's best.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..config import LoaderConfig, as_dict
from .sample_data import SAMPLE_KEY
from .steady import SteadyWindow

MODES = ("single", "sarm", "camera-window")
SARM_STEPS, SARM_SPACING_S = 8, 1.0
METRIC_KEYS = ("frames_per_s_node", "frames_per_s_node_seed", "decoded_frames_per_s", "samples_per_s",
               "first_batch_latency_s", "p50_batch_latency_ms", "p95_batch_latency_ms", "p99_batch_latency_ms",
               "p50_sample_latency_ms", "p95_sample_latency_ms", "p99_sample_latency_ms", "wallclock_s",
               "peak_rss_gb", "shuffle_randomness_frac", "batch_mixing", "time_split", "decoder_cache", "bytes_read", "dataset_bytes",
               "routes", "dali_graph", "decode_per_camera", "device", "versions", "num_cameras", "fps", "image_shape",
               "sample", "rank", "world_size", "limit_ratio", "limit_ratio_with_layout", "baseline_ratio",
               "dali_decoder", "stream_limits", "nvdec_limit", "nvdec_limit_ratio", "peers", "nvdec_utilisation",
               "gpu_load", "cpu_all_cores", "gpu_over_cpu_all_cores", "open_engine", "engine_limits", "data_wait")
GPU_LOAD_ALONE_S = 3.0  # the GPU load's rate alone is measured this long before the loader starts


@dataclass
class BenchConfig:
    """One bench run: the dataset, the mode, the loader's settings (`LoaderConfig`: decode, batch size, workers,
    pool, device, dtype, tolerance, revision, ...) and the measurement's own settings."""

    dataset: str
    mode: str = "single"
    loader: LoaderConfig = field(default_factory=LoaderConfig)
    duration_s: float = 20.0
    warmup_batches: int = 5
    baseline: bool = True
    baseline_workers: tuple[int, ...] = (0, 1, 2)
    limit: bool = True
    num_batches: int | None = None  # close the window after this many batches instead of `duration_s`
    peers: bool = True  # torchcodec on CUDA and PyNvVideoCodec on the NVDEC cameras' frames (GPU nodes)
    gpu_load: bool = False  # a model-sized matmul loop on the loader's GPU beside it (`bench_gpu.GpuLoad`)
    cpu_all_cores: bool = False  # the CPU route (torchcodec) again with a worker per core, same window length
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        from ..errors import ConfigError

        if self.mode not in MODES:
            raise ConfigError(f"--mode must be one of {MODES}. Found: {self.mode!r}")
        if self.duration_s <= 0 or self.warmup_batches < 0:
            raise ConfigError(f"--duration-s must be > 0 and --warmup-batches >= 0. Found: {self.duration_s}, "
                              f"{self.warmup_batches}")
        if self.num_batches is not None and self.num_batches < 1:
            raise ConfigError(f"--num-batches must be >= 1. Found: {self.num_batches}")

    def record(self) -> dict[str, Any]:
        """The run's settings as one flat JSON-ready dict (results files, bench.csv): loader settings by their
        LoaderConfig names beside the bench's own."""
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("loader", "extra")}
        loader = {k: v for k, v in as_dict(self.loader).items() if v is not None and v != {} and k != "augment"}
        return own | loader | {"baseline_workers": list(self.baseline_workers)} | self.extra


def mode_deltas(mode: str, cameras: list[str], features) -> dict[str, list[float]]:
    """`single`: one frame per camera. `sarm` (as the reference benchmark defines it): one frame per camera and an 8-step
    action window spaced 1 s, now to 7 s ahead. `camera-window`: 8 steps spaced 1 s (the last 7 s and now) on
    every camera."""
    if mode == "single":
        return {}
    if mode == "sarm":
        if "action" not in features:
            from ..errors import ConfigError

            raise ConfigError("--mode sarm windows the 'action' feature, which this dataset does not have; "
                              "use --mode single or camera-window")
        return {"action": [i * SARM_SPACING_S for i in range(SARM_STEPS)]}
    offsets = [-(SARM_STEPS - 1 - i) * SARM_SPACING_S for i in range(SARM_STEPS)]
    return {key: offsets for key in cameras}


class RssSampler:
    """Peak resident memory of this process and its children (psutil), sampled every 50 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> int:
        try:
            import psutil

            me = psutil.Process()
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
            return total
        except ImportError:
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(0.05)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for name in ("dali_stream", "torch", "nvidia.dali", "torchcodec", "av", "pyarrow"):
        try:
            out[name] = __import__(name, fromlist=["__version__"]).__version__
        except Exception as exc:  # a benchmark still reports what it can
            out[name] = f"unavailable ({type(exc).__name__})"
    return out


def dataset_bytes(meta) -> int:
    total = 0
    for sub in ("data", "videos"):
        path = f"{meta.data_root}/{sub}"
        if meta.data_fs.exists(path):
            total += int(meta.data_fs.du(path))
    return total


def _frames_in(batch: dict, cameras: list[str]) -> int:
    return sum(int(np.prod(batch[k].shape[:-3])) for k in cameras)


def stream(loader, cfg: BenchConfig, cameras: list[str]) -> dict[str, Any]:
    """Run the loader through warm-up and a steady window; returns measurements and the window's batches."""
    steady = SteadyWindow(cfg.warmup_batches, cfg.duration_s, cfg.num_batches)
    window, seen_eps = [], []
    samples = frames = 0
    t_iter = time.perf_counter()
    epochs = 0
    while not steady.closed and epochs < 10:  # warm-up that needs more than 10 epochs is a configuration error
        epochs += 1
        epoch_before = loader.state_dict()["epoch"]
        it = iter(loader)
        index = loader.state_dict()["batches_consumed"]
        got_any = False
        for batch, in_window in steady.timed(it):
            got_any = True
            if in_window:
                n = len(batch["task"])
                samples += n
                frames += _frames_in(batch, cameras)
                seen_eps.append(len(set(batch["episode_index"].tolist())) / n)
                window.append((epoch_before, index))
                if steady.closed:
                    break
            index += 1
        it.close()
        if not got_any:
            break  # an epoch with no batches: nothing more will come
    first_latency = None if steady.first_got is None else steady.first_got - t_iter
    seconds = steady.seconds
    if samples == 0 or seconds <= 0:
        return {"samples": 0, "batches": steady.delivered, "first_batch_latency_s": first_latency}
    lat = np.array(steady.waits) * 1e3
    per_sample = lat / cfg.loader.batch_size  # the wait a training step sees, spread over the batch's samples
    out = {"samples": samples, "frames": frames, "seconds": seconds, "batches": len(steady.waits),
           "samples_per_s": samples / seconds, "frames_per_s_node": frames / seconds,
           "first_batch_latency_s": first_latency, "shuffle_randomness_frac": float(np.mean(seen_eps)),
           "window": window, "ran_out": not steady.closed}
    for q in (50, 95, 99):
        out[f"p{q}_batch_latency_ms"] = float(np.percentile(lat, q))
        out[f"p{q}_sample_latency_ms"] = float(np.percentile(per_sample, q))
    return out


def batch_mixing(loader) -> dict[str, Any]:
    """How random the loader's batches are beside a shuffled DataLoader's on the same episodes (`mixing_stats`),
    from epoch 0's plans on this rank."""
    from .mixing_stats import compare

    plan = loader._plan(0)
    pool = len(plan.admission_order) if plan.is_global else loader.plan_config.pool_size
    return compare(lambda i: plan.batch(i).episodes, plan.num_batches, loader.plan_lengths, pool,
                   loader.config.batch_size, loader.config.seed, loader.world.rank, loader.world.world_size)


def raw_limit(loader, window: list[tuple[int, int]], threads: int) -> dict[str, Any]:
    """Frames/s of the window's frames through the same decoders, warm, with no loader around them."""
    from ..decode.route import route as route_of
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
        if route in loader.engines:
            loader.engines[route].decode(key, segs, idx)
    seconds += time.perf_counter() - t0
    out: dict[str, Any] = {"frames": frames, "seconds": seconds, "frames_per_s": frames / seconds if seconds else 0.0,
                           "decode_ms_per_frame_thread": 1e3 * seconds * threads / max(1, frames)}
    if loader.host_batches and cpu_work:
        from ..graph.buffers import BufferPool
        from ..graph.segment_frames import decode_host

        buffers = BufferPool(keep=threads)  # reused as the loader's are, so no page faults are timed

        def decode_and_write(work) -> None:  # the loader's own per-camera decode and write, output dropped
            segs, idx, cache = work
            decode_host(segs, idx, cache, buffers, loader.image_ops)

        with_layout = _on_threads(decode_and_write, cpu_work, threads)
        out["with_layout"] = {"seconds": with_layout, "frames_per_s": frames / with_layout if with_layout else 0.0,
                              "image_dtype": loader.image_ops.dtype,
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
        items = [loader.builder.group_streams({key: (segs, idx)}, len(segs))[1][key]
                 for key, segs, idx in work if loader.routes[key] == route]
        batch_size = max(len(inputs) for inputs in items)
        feed = iter(items)

        def source():
            inputs = next(feed)
            inputs = inputs + [inputs[0]] * (batch_size - len(inputs))  # a short last batch repeats its first
            return [d.data for d in inputs], [d.frames for d in inputs]

        gpu = route == "nvdec"
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


def loader_decode(decode: str | Mapping[str, str], formats: dict, node) -> str | Mapping[str, str]:
    """What `bench --decode` asks the loader for. "gpu" means NVDEC for every camera this GPU decodes and
    `auto` for the rest (an H100 has no AV1 NVDEC: that camera goes to CPU instead of aborting the run)."""
    if decode != "gpu":
        return decode
    return {key: "gpu" if node.nvdec_refuses(fmt) is None else "auto" for key, fmt in formats.items()}


def run(cfg: BenchConfig, progress=None, measured=None) -> dict[str, Any]:
    """One benchmark run; returns the result dict (see METRIC_KEYS) with `config` and `notes`. `progress(stage)` is
    told each stage as it begins; `measured(got)` the loader's own numbers as soon as its window is measured, before
    the limits and the baseline."""
    from ..decode.route import any_where
    from ..decode.routes import Node, formats_of
    from ..loader import StreamLoader
    from ..meta.dataset import DatasetMeta

    t_run = time.perf_counter()
    meta = DatasetMeta.open(cfg.dataset, data_files_root=cfg.loader.data_files_root, revision=cfg.loader.revision)
    cameras = list(meta.video_keys)
    deltas = mode_deltas(cfg.mode, cameras, meta.features)
    decode = loader_decode(cfg.loader.decode, formats_of(meta), Node.probe())
    from .bench_gpu import GpuLoad, NvdecUtilisation

    with RssSampler() as rss:
        t0 = time.perf_counter()
        loader = StreamLoader(cfg.dataset, config=cfg.loader, delta_timestamps=deltas, decode=decode, drop_last=True)
        setup_s = time.perf_counter() - t0
        load = GpuLoad(loader.device) if cfg.gpu_load else None
        gpu_load: dict[str, Any] | None = None
        if load is not None:
            if progress:
                progress("gpu load alone")
            gpu_load = {"matrix": load.size, "dtype": "bfloat16", "alone_tflops": load.measure(GPU_LOAD_ALONE_S)}
        if progress:
            progress("loader")
        nvdec = any_where(loader.routes.values(), "on_gpu")
        with NvdecUtilisation(loader.dali_device if nvdec else None) as utilisation, \
                (load if load is not None else contextlib.nullcontext()):
            got = stream(loader, cfg, cameras)
        if load is not None and gpu_load is not None:
            gpu_load.update(beside_loader_tflops=load.tflops, ratio=load.tflops / gpu_load["alone_tflops"]
                            if gpu_load["alone_tflops"] else None)
    if measured is not None and got["samples"]:
        measured(got)
    result: dict[str, Any] = {"config": cfg.record(), "data_wait": loader.data_wait(),
                              "setup_s": setup_s, "notes": [], "gpu_load": gpu_load,
                              "nvdec_utilisation": utilisation.result() if nvdec else None}
    if got["samples"] == 0:
        result.update(samples_per_s=0.0, error=(
            f"the loader delivered {got['batches']} batches in up to 10 epochs, none inside the measured window "
            f"(warm-up {cfg.warmup_batches} batches; {len(loader)} batches per epoch of {cfg.loader.batch_size} with "
            f"drop_last): lower --warmup-batches or --batch-size, or use a larger dataset"),
            rank=loader.world.rank, world_size=loader.world.world_size, wallclock_s=time.perf_counter() - t_run)
        return result
    if got["ran_out"]:  # measured all the same, over the batches there were
        result["notes"].append(
            f"the dataset ran out after 10 epochs ({got['batches']} batches in the window): the window is "
            f"{got['seconds']:.2f} s, shorter than --duration-s {cfg.duration_s:g}; a larger dataset or a shorter "
            "--duration-s measures over the window asked for")
    sample = meta.info.get(SAMPLE_KEY)  # the sample writer's settings (content, crf); None for other datasets
    careful = (sample or {}).get("careful_files") or []
    if careful:
        result["notes"].append(
            f"{len(careful)} video file(s) of this sample were encoded with careful settings (a lower crf: larger, "
            f"slower to decode than the rest) because their painted ids did not survive the sample's own: "
            f"{', '.join(careful[:3])}{' ...' if len(careful) > 3 else ''}; another size or codec avoids it")
    stats = loader.store.stats
    builder = loader.builder
    result.update({k: got[k] for k in ("samples_per_s", "frames_per_s_node", "first_batch_latency_s",
                                       "p50_batch_latency_ms", "p95_batch_latency_ms", "p99_batch_latency_ms",
                                       "p50_sample_latency_ms", "p95_sample_latency_ms", "p99_sample_latency_ms",
                                       "shuffle_randomness_frac")})
    # The reference benchmark's definitions beside ours: their frames_per_s_node counts samples per second on the node;
    # ours counts decoded camera frames delivered (samples x cameras x steps), also under its plain name.
    result.update(frames_per_s_node_seed=got["samples_per_s"], decoded_frames_per_s=got["frames_per_s_node"],
                  num_cameras=len(cameras), fps=meta.fps, rank=loader.world.rank, world_size=loader.world.world_size,
                  image_shape={k: [*loader.image_ops.out_shape(c.height, c.width)] for k, c in meta.cameras.items()},
                  sample=sample)
    result["batch_mixing"] = batch_mixing(loader)
    result.update(
        window={"seconds": got["seconds"], "batches": got["batches"], "samples": got["samples"], "frames": got["frames"]},
        peak_rss_gb=rss.peak / 2**30,
        time_split={"fetch_s": stats.fetch_s, "decode_s": builder.decode_s, "decoded_frames": builder.decoded_frames,
                    "decode_ms_per_frame": 1e3 * builder.decode_s / max(1, builder.decoded_frames),
                    "graph_s": max(0.0, got["seconds"] - loader.last_epoch_stats.get("producer_wait_s", 0.0)),
                    "note": "fetch/decode: summed over worker threads for the whole run; graph: window time "
                            "not spent waiting for workers (last epoch)"},
        decoder_cache={"hits": stats.hits, "misses": stats.segments_cut + stats.table_reads,
                       "hit_rate": stats.hits / max(1, stats.hits + stats.segments_cut + stats.table_reads),
                       "evictions": stats.evictions, "size_bytes": loader.store.bytes,
                       "peak_bytes": stats.peak_bytes, "decoders_peak": loader.decoders.peak,
                       "decoders_opened": loader.decoders.opened,
                       "note": "hits/misses: episode store lookups (a miss fetches rows or cuts a segment); "
                               "decoders: torchcodec decoders alive at once / opened"},
        bytes_read=stats.segment_bytes + loader.store.table_bytes_read,
        dataset_bytes=dataset_bytes(meta), routes=dict(loader.routes), route_reasons=dict(loader.route_reasons),
        dali_graph=not loader.host_batches,
        decode_per_camera=decode if isinstance(decode, dict) else dict.fromkeys(cameras, decode),
        device=_device(loader), memory_budget=loader.memory_budget(), derived=loader.resolved.describe(),
        versions=_versions(), cpu_cores=len(os.sched_getaffinity(0)),
    )
    if cfg.limit:
        if progress:
            progress("limit")
        limit = raw_limit(loader, got["window"], max(1, cfg.loader.num_workers))
        result["limit"] = limit
        result["limit_ratio"] = got["frames_per_s_node"] / limit["frames_per_s"] if limit["frames_per_s"] else None
        layout = limit.get("with_layout", {}).get("frames_per_s")
        result["limit_ratio_with_layout"] = got["frames_per_s_node"] / layout if layout else None
    else:
        result["limit_ratio"] = result["limit_ratio_with_layout"] = None
    result["dali_decoder"] = {k: {"samples": c[0], "streams": c[1], "frames_fed": c[2],
                                  "join_streams": loader.resolved.join_streams}
                              for k, c in builder.dali_counts.items()}
    result["open_engine"] = {route: engine.stats() for route, engine in loader.engines.items()} or None
    result["engine_limits"] = None
    if cfg.limit and loader.engines:
        if progress:
            progress("engine limit")
        from .bench_gpu import engine_limits

        result["engine_limits"] = engine_limits(loader, got["window"])
    result["stream_limits"] = result["nvdec_limit"] = result["nvdec_limit_ratio"] = None
    if cfg.limit and builder.dali_counts:
        if progress:
            progress("stream limit")
        from .bench_gpu import stream_limits

        result["stream_limits"] = limits = stream_limits(loader, got["window"])
        nvdec_limit = limits.get("nvdec", {}).get("samples_per_s")
        result["nvdec_limit"] = nvdec_limit
        result["nvdec_limit_ratio"] = got["samples_per_s"] / nvdec_limit if nvdec_limit else None
    open_limit = (result["engine_limits"] or {}).get("nvdec-open", {}).get("samples_per_s")
    if result["nvdec_limit"] is None and open_limit:  # NVDEC on open decoders: the engine's own whole-segment rate
        result["nvdec_limit"] = open_limit
        result["nvdec_limit_ratio"] = got["samples_per_s"] / open_limit
    result["peers"] = None
    if cfg.peers:
        if progress:
            progress("peers")
        from .bench_gpu import peers

        result["peers"] = peers(loader, got["window"])
    result["cpu_all_cores"] = result["gpu_over_cpu_all_cores"] = None
    if cfg.cpu_all_cores:
        if progress:
            progress("cpu route, every core")
        result["cpu_all_cores"] = cpu = cpu_route_all_cores(cfg, deltas, cameras)
        result["gpu_over_cpu_all_cores"] = (got["samples_per_s"] / cpu["samples_per_s"]
                                            if cpu.get("samples_per_s") else None)
    if cfg.baseline:
        if progress:
            progress("baseline")
        from .bench_baseline import run_baseline

        base = run_baseline(cfg, meta, deltas, loader, got["window"])
        result["baseline"] = base
        best = max((b["samples_per_s"] for b in base["runs"]), default=0.0)
        result["baseline_ratio"] = got["samples_per_s"] / best if best else None
    else:
        result["baseline_ratio"] = None
    result["wallclock_s"] = time.perf_counter() - t_run
    return result


def cpu_route_all_cores(cfg: BenchConfig, deltas, cameras: list[str]) -> dict[str, Any]:
    """The same configuration on the CPU route (torchcodec, every camera) with a worker thread per core, streamed
    for the same window: what the node's CPUs deliver without NVDEC."""
    import dataclasses

    from ..loader import StreamLoader

    cores = len(os.sched_getaffinity(0))
    settings = dataclasses.replace(cfg.loader, decode="cpu", num_workers=cores, join_streams=None)
    with StreamLoader(cfg.dataset, config=settings, delta_timestamps=deltas, drop_last=True) as loader:
        got = stream(loader, cfg, cameras)
        out = {"num_workers": cores, "routes": dict(loader.routes), "device": loader.device}
    return out | {k: got.get(k) for k in ("samples_per_s", "frames_per_s_node", "first_batch_latency_s")}


def _device(loader) -> str:
    if loader.node.gpus and loader.node.gpu is not None:
        return f"{loader.node.gpu.name} ({loader.node.gpus} GPUs)"
    return f"CPU only: {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores"


def gop_bytes_needed(loader, pieces) -> int:
    """Bytes of the GOPs the pieces of long episodes in `pieces` need (keys as `Pieces.log` records
    them: epoch, batch, sample, camera): each sample's frame's whole GOP in that camera, from its file's MP4 index.
    What the bytes read of long episodes are measured against."""
    total = 0
    plans: dict[tuple[int, int], Any] = {}
    for epoch, index, j, key in pieces:
        plan = plans.get((epoch, index)) or plans.setdefault((epoch, index), loader.batch_plan(epoch, index))
        pos, frame = int(plan.episodes[j]), int(plan.frames[j])
        indexed = loader.store.indexes.get(loader.meta.video_file(pos, key))
        total += indexed.index.gop_bytes(float(loader.meta.cameras[key].from_timestamp[pos]) + frame / loader.meta.fps)
    return total


def write(result: dict[str, Any], out_dir: str | Path) -> Path:
    """result -> out_dir/bench-<time>-<mode>-<decode>.json, plus one row appended to out_dir/bench.csv."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = result["config"]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rank, world = result.get("rank", 0), result.get("world_size", 1)
    path = out / (f"bench-{stamp}-{cfg['mode']}-{cfg['decode']}-b{cfg['batch_size']}-w{cfg['num_workers']}"
                  f"-r{rank}of{world}.json")
    path.write_text(json.dumps(result, indent=2, default=str))
    append_csv(out / "bench.csv", csv_row(result, path.name))
    return path


def csv_row(result: dict[str, Any], name: str) -> dict[str, Any]:
    """A result as one flat bench.csv row: its file name, its settings as config.*, then the metrics."""
    row = {"file": name, **{f"config.{k}": v for k, v in result["config"].items()}}
    for key in METRIC_KEYS:
        value = result.get(key)
        row[key] = json.dumps(value, default=str) if isinstance(value, (dict, list)) else value
    return row


def append_csv(csv_path: Path, row: dict[str, Any]) -> None:
    """Append `row` to a bench.csv; a file with other columns (runs from before a setting was added) is
    rewritten under the union of the columns, earlier rows' new columns left empty, so no value ever sits
    under another column's name."""
    import csv

    rows: list[dict] = []
    if csv_path.exists():
        with csv_path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            if header == list(row):  # the usual case
                with csv_path.open("a", newline="") as out_fh:
                    csv.DictWriter(out_fh, fieldnames=header).writerow(row)
                return
            rows = [{k: v for k, v in r.items() if k is not None} for r in reader]
    columns = list(dict.fromkeys([*row, *(k for r in rows for k in r)]))
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows([*rows, row])


# ---- the bundled benchmark datasets ----------------------------------------------------------------------
# Realistic samples (the default): two 640x480 cameras, 20 episodes of 10-20 s at 30 fps, as lerobot records
# them: lerobot's encoder settings (crf 30, g=2: a keyframe every other frame) on camera-like frames
# (`scene.Scene`, 6.4-6.9 KB a frame in AV1 where lerobot's aloha datasets take 5.5-6.6). "av1" is lerobot's
# default codec, "h264" the other common choice (H.264 with B-frames). "toy" is the old small sample: 200
# episodes of 20-40 frames, three cameras (h264, hevc, av1), GOP 30, the smooth test pattern.
BENCH_SAMPLES = {
    # the default: a first number within two minutes of a fresh 2-core machine (written in ~40 s there)
    "av1-quick": dict(episodes=5, min_length=120, max_length=200, cameras="front:av1,wrist:av1", gop=2,
                      episodes_per_file=5, content="scene", crf=30),
    "av1": dict(episodes=20, min_length=300, max_length=600, cameras="front:av1,wrist:av1", gop=2,
                episodes_per_file=10, content="scene", crf=30),
    "h264": dict(episodes=20, min_length=300, max_length=600, cameras="front:h264,wrist:h264", gop=2,
                 episodes_per_file=10, content="scene", crf=30),
    "toy": dict(episodes=200, min_length=20, max_length=40, cameras="front:h264,side:hevc,wrist:av1", gop=30,
                episodes_per_file=50),
}
DEFAULT_SAMPLE = "av1-quick"
# Mixtures of samples of different embodiments, for `bench` on a mixture (`bench_mixture`): members written as
# their own samples under one folder with a mixture file beside them. "mixture-quick": av1-quick's two-camera
# AV1 arm at 30 fps, 6-dof, and a one-camera H.264 arm at 10 fps, 7-dof (its episodes painted from 100).
# "mixture" (the results' mixture, benchmarks/mixture.py): the same embodiments with 20 episodes each, more than a
# pool holds, so a batch draws each sample from another episode, alone as in the mixture.
BENCH_MIXTURES = {
    "mixture-quick": {"arm-av1": BENCH_SAMPLES["av1-quick"],
                      "arm-h264": dict(episodes=6, min_length=40, max_length=70, cameras="front:h264", gop=2,
                                       episodes_per_file=6, content="scene", crf=30, fps=10, state_dim=7,
                                       id_offset=100)},
    "mixture": {"arm-av1": dict(episodes=20, min_length=60, max_length=100, cameras="front:av1,wrist:av1", gop=2,
                                episodes_per_file=10, content="scene", crf=30),
                "arm-h264": dict(episodes=20, min_length=30, max_length=50, cameras="front:h264", gop=2,
                                 episodes_per_file=10, content="scene", crf=30, fps=10, state_dim=7, id_offset=100)},
}


def bench_sample_spec(variant: str, settings: Mapping[str, Any] | None = None):
    """The SampleSpec of benchmark sample `variant` (or of the given `settings`: a mixture's member)."""
    from .sample_data import SampleSpec, parse_cameras

    if settings is None and variant not in BENCH_SAMPLES:
        from ..errors import ConfigError

        raise ConfigError(f"--sample must be one of {sorted([*BENCH_SAMPLES, *BENCH_MIXTURES])}. Found: {variant!r}")
    spec: dict[str, Any] = dict(settings if settings is not None else BENCH_SAMPLES[variant])
    return SampleSpec(height=480, width=640, seed=7, **{**spec, "cameras": parse_cameras(spec["cameras"])})


def mixture_sample(variant: str, write) -> str:
    """The mixture file of benchmark mixture `variant` (`BENCH_MIXTURES`), its members written first where missing or
    stale (`write(path, spec, why)`); returns the file's path."""
    root = Path(default_dataset(variant))
    members = BENCH_MIXTURES[variant]
    for name, settings in members.items():
        spec = bench_sample_spec(variant, settings)
        why = stale_sample(root / name, spec)
        if why is not None:
            write(root / name, spec, why)
    path = root / "mixture.json"
    path.write_text(json.dumps({"members": [{"source": name, "name": name} for name in members]}, indent=2))
    return str(path)


def default_dataset(variant: str) -> str:
    return f".demo/bench-{variant}"


def stale_sample(path: str | Path, spec) -> str | None:
    """Why the sample at `path` must be written (again) for `spec` (a `SampleSpec`, e.g. `bench_sample_spec`'s):
    missing, or written with other settings (an older dali_stream's, which a run would otherwise measure
    silently); None when it is current."""
    info_path = Path(path) / "meta/info.json"
    if not info_path.exists():
        return "not written yet"
    try:
        written = json.loads(info_path.read_text()).get(SAMPLE_KEY)
    except (OSError, ValueError) as err:
        return f"its meta/info.json cannot be read ({err})"
    wanted = spec.record()
    if not isinstance(written, dict):
        return "it was written by an older dali_stream, which did not record its settings"
    changed = sorted(k for k in wanted if written.get(k) != wanted[k])  # the record's other keys are outcomes
    if changed:
        return f"it was written with other settings ({', '.join(changed)} differ from this version's)"
    return None
