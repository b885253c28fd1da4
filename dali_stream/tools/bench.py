"""`dali-stream bench`: how fast StreamLoader feeds training on this node, against the decode limit and a peer.

One run = one (dataset, mode, decode, batch size, workers, pool) configuration:
1. StreamLoader streams batches; after `warmup_batches`, a steady wall-clock window of `duration_s` gives
   `samples_per_s` and `frames_per_s_node` (samples or decoded frames / window seconds, never a sum of
   gaps) and the batch latency percentiles (time the training loop waited in `next()`).
2. **Raw decode limit**: the window's batch plans again, the same frames through the same decoders, warm
   (segments cut and decoders open before timing), no loader around them. Where the loader holds its open
   episodes' frames (`episode_frames_bytes`: each episode's camera decoded once, front to back), the limit is that
   work (`limit.whole_episodes`), else the frames as asked: `limit_ratio` = loader / limit;
   `limit_ratio_per_sample` = loader / the frames as a reader asking a sample at a time decodes them.
   Where the loader has no DALI graph (`host_batches`), also the frames as asked followed by the loader's own write
   into the caller's layout and dtype, on the same threads: `limit_ratio_with_layout` = loader / that, what is
   left to the loader's own overhead once the output format is paid for.
3. **Baseline**: a plain PyTorch DataLoader over a map-style dataset decoding each sample with torchcodec
   from the packed MP4s, as lerobot's LeRobotDataset does (`bench_baseline`), on the same samples, at each
   worker count; `baseline_ratio` = loader / the baseline's best.
"""

from __future__ import annotations

import contextlib
import os
import platform
import time
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, Mapping, get_args

import numpy as np

from ..config import LoaderConfig, as_dict
from ..config_groups import ENGINE_SETTINGS
from ..decode.route import NVDEC, NVDEC_OPEN
from ..errors import ConfigError
from .bench_limit import limit_ratios, raw_limit
from .bench_plan import RssSampler
from .sample_data import SAMPLE_KEY
from .steady import SteadyWindow

MODES = ("single", "sarm", "camera-window")
SARM_STEPS, SARM_SPACING_S = 8, 1.0
METRIC_KEYS = ("frames_per_s_node", "frames_per_s_node_seed", "decoded_frames_per_s", "samples_per_s",
               "first_batch_latency_s", "p50_batch_latency_ms", "p95_batch_latency_ms", "p99_batch_latency_ms",
               "p50_sample_latency_ms", "p95_sample_latency_ms", "p99_sample_latency_ms", "wallclock_s",
               "peak_rss_gb", "shuffle_randomness_frac", "batch_mixing", "time_split", "decoder_cache", "bytes_read", "dataset_bytes",
               "routes", "dali_graph", "decode_per_camera", "device", "versions", "num_cameras", "fps", "image_shape",
               "sample", "rank", "world_size", "limit_ratio", "limit_ratio_with_layout",
               "limit_ratio_per_sample", "baseline_ratio",
               "dali_decoder", "stream_limits", "nvdec_limit", "nvdec_limit_ratio", "peers", "nvdec_utilisation",
               "gpu_load", "cpu_all_cores", "gpu_over_cpu_all_cores", "open_engine", "engine_limits", "data_wait")
CpuAllCores = Literal["cpu", "cpu-open"]  # `--cpu-all-cores`: torchcodec, or FFmpeg's decoders through PyAV
CPU_ALL_CORES = get_args(CpuAllCores)
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
    cpu_all_cores: CpuAllCores | None = None  # a CPU route again with a worker per core, same window (None: not run)
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
        if self.cpu_all_cores not in (None, *CPU_ALL_CORES):
            raise ConfigError(f"--cpu-all-cores takes one of {CPU_ALL_CORES} or nothing (cpu). Found: "
                              f"{self.cpu_all_cores!r}; a dataset written right after the flag is read as its route: "
                              "put the dataset first")

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


def stream(loader, cfg: BenchConfig, cameras: list[str], warm=None) -> dict[str, Any]:
    """Run the loader through warm-up and a steady window; returns measurements and the window's batches.
    `warm()` is called once, as the window opens (the warm-up batches delivered)."""
    steady = SteadyWindow(cfg.warmup_batches, cfg.duration_s, cfg.num_batches)
    window, seen_eps = [], []
    samples = frames = 0
    t_iter = time.perf_counter()
    epochs = 0
    if warm is not None and cfg.warmup_batches == 0:
        warm()
    while not steady.closed and epochs < 10:  # warm-up that needs more than 10 epochs is a configuration error
        epochs += 1
        epoch_before = loader.state_dict()["epoch"]
        it = iter(loader)
        index = loader.state_dict()["batches_consumed"]
        got_any = False
        for batch, in_window in steady.timed(it):
            got_any = True
            if warm is not None and steady.delivered == cfg.warmup_batches and not in_window:
                warm()
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

    plan = loader.epoch_plan(0)
    pool = len(plan.admission_order) if plan.is_global else loader.plan_config.pool_size
    return compare(lambda i: plan.batch(i).episodes, plan.num_batches, loader.plan_lengths, pool,
                   loader.config.batch_size, loader.config.seed, loader.world.rank, loader.world.world_size)


def loader_decode(decode: str | Mapping[str, str], formats: dict, node) -> str | Mapping[str, str]:
    """What `bench --decode` asks the loader for. "gpu" means NVDEC for every camera this GPU decodes and
    `auto` for the rest (an H100 has no AV1 NVDEC: that camera goes to CPU instead of aborting the run)."""
    if decode != "gpu":
        return decode
    return {key: "gpu" if node.nvdec_refuses(fmt) is None else "auto" for key, fmt in formats.items()}


def whole_batches(cfg: BenchConfig, meta) -> None:
    """Bench times whole batches (it sets drop_last=True): a --batch-size larger than the selected episodes' frames
    would leave none, said here in bench's words rather than the loader's (which would call drop_last given)."""
    chosen = meta.lengths if cfg.loader.episodes is None else \
        meta.lengths[np.isin(meta.episodes["episode_index"], list(cfg.loader.episodes))]
    frames = int(np.sum(chosen))
    if cfg.loader.batch_size > frames:
        raise ConfigError(f"--batch-size {cfg.loader.batch_size} is more than the {frames} frames of "
                          f"{'the selected episodes' if cfg.loader.episodes is not None else cfg.dataset}: bench "
                          "times whole batches (it drops a partial one), so there would be none; use a --batch-size "
                          f"of at most {frames}, or a larger dataset")


def run(cfg: BenchConfig, progress=None, measured=None, estimated=None) -> dict[str, Any]:
    """One benchmark run; returns the result dict (see METRIC_KEYS) with `config`, `notes` and each phase's time
    (`phases`). `progress(phase)` is told each phase as it begins; `estimated(estimate)` the run's time estimated from
    what the loader's warm-up measured (`bench_plan.estimate`), as its window opens, and again once it closed;
    `measured(got)` the loader's own numbers as soon as its window is measured, before the limits and the baseline."""
    from ..decode.node import Node
    from ..decode.routes import formats_of
    from ..loader import StreamLoader
    from ..meta.dataset import DatasetMeta
    from .bench_plan import BASELINE, LIMIT, SETUP, STATISTICS, WARMUP, WINDOW, Phases, estimate

    phase = Phases(progress)
    t_run = phase.started
    phase(SETUP)
    meta = DatasetMeta.open(cfg.dataset, data_files_root=cfg.loader.data_files_root, revision=cfg.loader.revision)
    cameras = list(meta.camera_keys)  # video, and images stored in the tables
    deltas = mode_deltas(cfg.mode, cameras, meta.features)
    decode = loader_decode(cfg.loader.decode, formats_of(meta), Node.probe())
    whole_batches(cfg, meta)
    from .bench_gpu import GpuLoad, NvdecUtilisation

    with RssSampler() as rss:
        t0 = time.perf_counter()
        loader = StreamLoader(cfg.dataset, config=cfg.loader, delta_timestamps=deltas, decode=decode, drop_last=True)
        setup_s = time.perf_counter() - t0
        load = GpuLoad(loader.device) if cfg.gpu_load else None
        gpu_load: dict[str, Any] | None = None
        if load is not None:
            phase("gpu load alone")
            gpu_load = load.alone(GPU_LOAD_ALONE_S)
        phase(WARMUP)
        nvdec = any(r.on_gpu for r in loader.decode_routes.values())

        per_sample = sum(len(deltas.get(k, [0])) for k in cameras)  # camera frames a sample

        def warm() -> None:
            phase(WINDOW)
            if estimated is not None:
                estimated(estimate(cfg, loader, phase, per_sample))
        with NvdecUtilisation(loader.dali_device if nvdec else None) as utilisation, \
                (load if load is not None else contextlib.nullcontext()):
            got = stream(loader, cfg, cameras, warm)
        phase(STATISTICS)
        if load is not None and gpu_load is not None:
            gpu_load = GpuLoad.beside(gpu_load, load.tflops)
    if got["samples"] and estimated is not None:
        estimated(estimate(cfg, loader, phase, per_sample, got))
    if measured is not None and got["samples"]:
        measured(got)
    result: dict[str, Any] = {"config": cfg.record() | {"num_workers": loader.resolved.num_workers},  # as resolved
                              "data_wait": loader.data_wait(), "setup_s": setup_s, "notes": [], "gpu_load": gpu_load,
                              "nvdec_utilisation": utilisation.result() if nvdec else None}
    if got["samples"] == 0:
        result.update(samples_per_s=0.0, error=(
            f"the loader delivered {got['batches']} batches in up to 10 epochs, none inside the measured window "
            f"(warm-up {cfg.warmup_batches} batches; {len(loader)} batches per epoch of {cfg.loader.batch_size} with "
            f"drop_last): lower --warmup-batches or --batch-size, or use a larger dataset"),
            rank=loader.world.rank, world_size=loader.world.world_size, wallclock_s=time.perf_counter() - t_run,
            phases=phase.end())
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
    now = loader.stats()  # the loader's counters (`StreamLoader.stats`)
    stats, bounded = now["fetch"], now["bounded"]
    built = now["build"]  # what the batch builders decoded, and DALI's decoder per camera
    result.update({k: got[k] for k in ("samples_per_s", "frames_per_s_node", "first_batch_latency_s",
                                       "p50_batch_latency_ms", "p95_batch_latency_ms", "p99_batch_latency_ms",
                                       "p50_sample_latency_ms", "p95_sample_latency_ms", "p99_sample_latency_ms",
                                       "shuffle_randomness_frac")})
    # The reference benchmark's definitions beside ours: their frames_per_s_node counts samples per second on the node;
    # ours counts decoded camera frames delivered (samples x cameras x steps), also under its plain name.
    result.update(frames_per_s_node_seed=got["samples_per_s"], decoded_frames_per_s=got["frames_per_s_node"],
                  num_cameras=len(cameras), fps=meta.fps, rank=loader.world.rank, world_size=loader.world.world_size,
                  image_shape={k: [*loader.image_ops.out_shape(c.height, c.width)] for k, c in meta.cameras.items()},
                  codecs={k: c.codec for k, c in meta.cameras.items()},
                  sample=sample)
    result["batch_mixing"] = batch_mixing(loader)
    result.update(
        window={"seconds": got["seconds"], "batches": got["batches"], "samples": got["samples"], "frames": got["frames"]},
        peak_rss_gb=rss.peak / 2**30,
        time_split={"fetch_s": stats["fetch_s"], "decode_s": built["decode_s"], "decoded_frames": built["decoded_frames"],
                    "decode_ms_per_frame": 1e3 * built["decode_s"] / max(1, built["decoded_frames"]),
                    "graph_s": max(0.0, got["seconds"] - loader.last_epoch_stats.get("producer_wait_s", 0.0)),
                    "note": "fetch/decode: summed over worker threads for the whole run; graph: window time "
                            "not spent waiting for workers (last epoch)"},
        decoder_cache={"hits": stats["hits"], "misses": stats["segments_cut"] + stats["table_reads"],
                       "hit_rate": stats["hits"] / max(1, stats["hits"] + stats["segments_cut"] + stats["table_reads"]),
                       "evictions": stats["evictions"], "size_bytes": bounded["fetched_episodes"]["held"],
                       "peak_bytes": stats["peak_bytes"], "decoders_peak": bounded["cpu_decoders"]["peak"],
                       "decoders_opened": now["decoders"]["opened"],
                       "note": "hits/misses: episode store lookups (a miss fetches rows or cuts a segment); "
                               "decoders: torchcodec decoders alive at once / opened"},
        bytes_read=stats["segment_bytes"] + stats["table_bytes_read"],
        dataset_bytes=dataset_bytes(meta), routes=dict(loader.routes), route_reasons=dict(loader.route_reasons),
        dali_graph=not loader.host_batches,
        decode_per_camera=decode if isinstance(decode, dict) else dict.fromkeys(cameras, decode),
        device=_device(loader), memory_budget=loader.memory_budget(), derived=loader.resolved.describe(),
        versions=_versions(), cpu_cores=len(os.sched_getaffinity(0)),
    )
    if cfg.limit:
        phase(LIMIT)
    result["limit"] = raw_limit(loader, got["window"], max(1, loader.resolved.num_workers)) if cfg.limit else None
    result.update(limit_ratios(got["frames_per_s_node"], result["limit"]))
    result["dali_decoder"] = {k: {**c, "join_streams": loader.resolved.join_streams} for k, c in built["dali"].items()}
    result["open_engine"] = now["engines"] or None
    result["engine_limits"] = None
    if cfg.limit and now["engines"]:
        from .bench_gpu import engine_limits

        result["engine_limits"] = engine_limits(loader, got["window"])
    result["stream_limits"] = result["nvdec_limit"] = result["nvdec_limit_ratio"] = None
    if cfg.limit and built["dali"]:
        from .bench_gpu import stream_limits

        result["stream_limits"] = limits = stream_limits(loader, got["window"])
        nvdec_limit = limits.get(NVDEC.name, {}).get("samples_per_s")
        result["nvdec_limit"] = nvdec_limit
        result["nvdec_limit_ratio"] = got["samples_per_s"] / nvdec_limit if nvdec_limit else None
    open_limit = (result["engine_limits"] or {}).get(NVDEC_OPEN.name, {}).get("samples_per_s")
    if result["nvdec_limit"] is None and open_limit:  # NVDEC on open decoders: the engine's own whole-segment rate
        result["nvdec_limit"] = open_limit
        result["nvdec_limit_ratio"] = got["samples_per_s"] / open_limit
    result["peers"] = None
    if cfg.peers:
        phase("peers")
        from .bench_gpu import peers

        result["peers"] = peers(loader, got["window"])
    result["cpu_all_cores"] = result["gpu_over_cpu_all_cores"] = None
    if cfg.cpu_all_cores:
        phase("cpu route, every core")
        result["cpu_all_cores"] = cpu = cpu_route_all_cores(cfg, deltas, cameras)
        result["gpu_over_cpu_all_cores"] = (got["samples_per_s"] / cpu["samples_per_s"]
                                            if cpu.get("samples_per_s") else None)
    if cfg.baseline:
        phase(BASELINE)
        from .bench_baseline import run_baseline

        base = run_baseline(cfg, meta, deltas, loader, got["window"])
        result["baseline"] = base
        best = max((b["samples_per_s"] for b in base["runs"]), default=0.0)
        result["baseline_ratio"] = got["samples_per_s"] / best if best else None
    else:
        result["baseline_ratio"] = None
    result["frame_cache"] = None
    if cfg.loader.frame_cache_bytes or cfg.loader.frame_cache_dir:  # epochs 1 and 2 of a loader of its own
        from .bench_cache import cache_epochs

        loader.close()  # its frames held too: not beside the new loader's
        result["frame_cache"] = cache_epochs(cfg, meta, deltas, decode, phase)
    result["disk_cache"] = None
    if cfg.loader.disk_cache_dir:  # epochs 1 and 2 of a loader whose disk tier starts empty
        from .bench_disk import disk_epochs

        loader.close()
        result["disk_cache"] = disk_epochs(cfg, deltas, decode, phase)
    result["phases"] = phase.end()
    result["wallclock_s"] = time.perf_counter() - t_run
    return result


def cpu_route_all_cores(cfg: BenchConfig, deltas, cameras: list[str]) -> dict[str, Any]:
    """The same configuration on the CPU route `cfg.cpu_all_cores` (every camera) with a worker thread per core,
    streamed for the same window: what the node's CPUs deliver without NVDEC."""
    from ..loader import StreamLoader

    cores = len(os.sched_getaffinity(0))
    derived: dict[str, Any] = dict.fromkeys(ENGINE_SETTINGS)  # every engine form's count left to the route
    settings = replace(cfg.loader, decode=cfg.cpu_all_cores or "cpu", num_workers=cores, join_streams=None,
                       **derived)  # the CPU route's own threads
    with StreamLoader(cfg.dataset, config=settings, delta_timestamps=deltas, drop_last=True) as loader:
        got = stream(loader, cfg, cameras)
        out = {"num_workers": cores, "routes": dict(loader.routes), "device": loader.device}
    return out | {k: got.get(k) for k in ("samples_per_s", "frames_per_s_node", "first_batch_latency_s")}


def _device(loader) -> str:
    if loader.node.gpus and loader.node.gpu is not None:
        return f"{loader.node.gpu.name} ({loader.node.gpus} GPUs)"
    return f"CPU only: {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores"


def gop_bytes_needed(loader, pieces) -> int:
    """Bytes of the GOPs the pieces of long episodes in `pieces` need (as `loader.record_pieces()` records
    them: epoch, batch, sample, camera): each sample's frame's whole GOP in that camera, from its file's MP4 index.
    What the bytes read of long episodes are measured against. The indexes are read here, not the loader's."""
    from ..fetch.indexes import IndexCache
    from ..source.storage import LocalRanges, is_local

    fs = loader.meta.data_fs
    indexes = IndexCache(LocalRanges(fs) if is_local(fs) else fs, fps=float(loader.meta.fps))
    total = 0
    plans: dict[tuple[int, int], Any] = {}
    for epoch, index, j, key in pieces:
        plan = plans.get((epoch, index)) or plans.setdefault((epoch, index), loader.batch_plan(epoch, index))
        pos, frame = int(plan.episodes[j]), int(plan.frames[j])
        path = loader.meta.video_file(pos, key)
        indexed = indexes.get(path)
        if indexed is None:  # read through the demuxer: no GOP sizes to measure against
            raise ValueError(f"{path} has no MP4 index ({indexes.unsupported.get(path)}): its GOPs are not measured")
        total += indexed.index.gop_bytes(float(loader.meta.cameras[key].from_timestamp[pos]) + frame / loader.meta.fps)
    return total
