"""StreamLoader: a LeRobot v3 dataset streamed through the planner, the fetchers and one DALI graph (none on
a CPU node where every camera is laid out by the workers: `StreamLoader.host_batches`).

`for batch in loader` runs one epoch; the next `for` runs the next epoch. `state_dict()` counts the
batches the caller has received (DALI prefetches ahead, that does not count); `load_state_dict(state)`
before iterating continues exactly there: plans are recomputed, nothing skipped is fetched or decoded.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
import warnings
import weakref
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from .config import LoaderConfig, pool_size
from .decode.cpu import DecoderCache
from .decode.frames import FrameCache, stamper
from .decode.device import place
from .decode.errors import classify
from .decode.engine import ENGINE_ROUTES, OpenDecoders, make_engine
from .decode.routes import choose_routes, nvdec_engine
from .decode import proven
from .decode.speed import gpu_slower, unmeasured
from .errors import ConfigError, InstallError, StateError
from .fetch.prefetch import Prefetcher
from .fetch.store import CLOSER, EpisodeStore, in_background
from .graph.batches import DALI_ROUTES, BatchBuilder, Prepared, engine_camera
from .graph.host import to_output, uses_host_frames
from .graph.imageops import ImageOps
from .graph.joined import joins
from .memory import TRIM_EVERY, release_freed
from .stats import loader_stats
from .mixture import Member, Mixture
from .mixing import camera_routes, check_camera_sizes, open_source, planner_mix, table_kinds, windows
from .mixing import open_meta as _open_meta
from .catalog import MixtureMeta
from .meta import DatasetMeta
from .pairing import check_dali
from .plan.epoch import BatchPlan, EpochPlan, PlanConfig, resume_plan
from .plan.selection import digest as selection_digest
from .plan.state import CONFIG_KEYS, FIX, STATE_VERSION, parse_state
from .plan.world import World, resolve_world
from .samples import Samples
from .source.lerobot import lerobot_source
from .transforms import TransformPool, apply, sample_seeds
from .source.storage import is_local
from .wait import DataWait

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from .config import LoaderSettings

FETCH_AHEAD_BATCHES = 16  # episodes admitted this many batches beyond the builders' lookahead are fetched
REMOTE_CUT_AHEAD = 16  # batches whose pieces are cut ahead from a remote source (reads in flight hide its latency)
LONG_SEGMENT_FLOOR = 16 << 20  # bytes: a segment below this is never cut in pieces (see EpisodeStore)
REMOTE_GLOBAL_FETCHES = 16  # fetch threads of a global shuffle from a remote source (see fetch_workers below)
UNEVEN_SHARES = 0.8  # warn when the smallest rank share is below this fraction of the largest
log = logging.getLogger("dali_stream")


def _import_runtime() -> dict[str, BaseException]:
    """DALI's torch plugin and torchcodec (1.7 s of torch._dynamo imports) load with this module, so neither a
    loader's constructor nor its first batch pays for them; a failure is kept and raised, named, by the
    constructor (after the DALI flavour check, which explains the commonest one)."""
    import importlib

    failed: dict[str, BaseException] = {}
    for name in ("nvidia.dali.plugin.pytorch", "torchcodec.decoders"):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - reported by StreamLoader.__init__
            failed[name] = exc
    return failed


_IMPORT_ERRORS = _import_runtime()
_OPEN_LOADERS: "weakref.WeakSet[StreamLoader]" = weakref.WeakSet()


def _close_open_loaders() -> None:
    """At interpreter exit, on the main thread: tell every loader left open to close, without waiting; the
    interpreter then joins the threads (see below). Nothing here blocks, so a Ctrl-C during exit cannot stop it
    halfway (an exception out of this hook would skip the joins, and threads still running at teardown abort the
    process)."""
    for loader in list(_OPEN_LOADERS):
        try:
            loader.close(wait=False)
        except BaseException:  # noqa: BLE001 - at exit: the next loader must still be told
            pass


# Interpreter exit joins every thread of every ThreadPoolExecutor after handing each executor's registered threads
# an end-of-work sentinel (concurrent.futures' own hook). A KeyboardInterrupt that lands in `submit` between a new
# worker's start and its registration leaves a thread nobody hands one: it waits for work forever, and the exit
# that joins it never ends (Ctrl-C before the first batch, about 1 run in 40 with pieces cut ahead).
# Closing the loaders in threading's own exit hooks, which run before those joins and after concurrent.futures'
# (registered first, run last), shuts every pool down: `shutdown` wakes registered and orphaned workers alike.
_register_exit = getattr(threading, "_register_atexit", None)
if _register_exit is not None:
    _register_exit(_close_open_loaders)
else:  # an interpreter without it: at least close them at exit
    atexit.register(_close_open_loaders)


def _shut(store: EpisodeStore, engines: list[OpenDecoders], transforms: TransformPool | None) -> None:
    """A collected loader's close (on a thread of its own): the store's threads, the engines' threads and the
    transform processes end, without waiting for them."""
    store.close(False)
    for engine in engines:
        engine.close(False)
    if transforms is not None:
        transforms.close(False)


class _Producer:
    """Batches of an epoch prepared ahead by threads: the graph's external source (it hands DALI batch
    `start + k` for its k-th call), or, without a graph, `prepared(index)`. A graph with open-decoder engine
    cameras has a source per engine route too (`engine_source`): every source of an iteration hands out parts of
    the same prepared batch, whichever DALI calls first."""

    def __init__(self, builder: BatchBuilder, plan: EpochPlan, start: int, workers: int, lookahead: int,
                 fetch_ahead: int, cut_ahead: int = 0, finish=None) -> None:
        """Batches `lookahead` ahead are built; the pieces of long episodes of `max(lookahead, cut_ahead)` ahead
        are cut (a remote source's reads need more in flight than the builders do); what `lookahead +
        fetch_ahead` ahead admit is fetched. `finish(prepared)`, where given, runs on each built batch in the
        thread that built it (`image_transforms` of host frames)."""
        self.builder, self.plan, self.start, self.finish = builder, plan, start, finish
        self.lookahead = lookahead
        self.cut_lookahead = min(max(lookahead, cut_ahead), lookahead + fetch_ahead)  # its episodes are pinned
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="dali-stream") if workers > 0 else None
        self.futures: dict[int, Future] = {}
        self.handed: deque[Prepared] = deque()
        self.lock = threading.Lock()
        self.prefetcher = Prefetcher(builder.store, plan, start, lookahead + fetch_ahead, self.lock)
        self._next = start  # the next batch whose build begins
        self._cut = start  # the next batch to come into view: drawn once, its pieces cut ahead
        self._plans: dict[int, BatchPlan] = {}  # drawn, build not begun (without workers: not built yet)
        self.build_s = 0.0
        self.wait_s = 0.0  # time DALI's callback waited for a batch the workers had not finished
        self.owner = threading.current_thread()  # the iterating thread
        self.sources = 1 + len(builder.engine_outputs)  # external sources per iteration
        self._taking: dict[int, tuple[Prepared, set[str]]] = {}  # iteration -> batch, sources that took their part
        self._take_lock = threading.Lock()

    def _timed_build(self, plan: BatchPlan) -> Prepared:
        t0 = time.perf_counter()
        out = self.builder.build(plan)
        self.prefetcher.built(plan.index)
        if self.finish is not None:
            self.finish(out)
        self.build_s += time.perf_counter() - t0
        return out

    def __call__(self, info) -> list[list[np.ndarray]]:
        return self._take(info.iteration, "")

    def engine_source(self, route: str):
        """The external source of an open-decoder engine route's frames (`graph.pipeline`)."""
        return lambda info: self._take(info.iteration, route)

    def _take(self, iteration: int, part: str) -> list[list[Any]]:
        """Source `part`'s outputs ("" the main source's, else an engine route's) of batch `start + iteration`."""
        with self._take_lock:
            entry = self._taking.get(iteration)
            if entry is None:
                index = self.start + iteration
                if index >= self.plan.num_batches:
                    raise StopIteration
                entry = self._taking[iteration] = (self.prepared(index), set())
                self.handed.append(entry[0])
            prepared, taken = entry
            taken.add(part)
            if len(taken) == self.sources:
                del self._taking[iteration]
        return prepared.engine_arrays[part] if part else prepared.arrays

    def prepared(self, index: int) -> Prepared:
        """Batch `index`, built by the workers, which this call keeps `lookahead` batches ahead."""
        prepared = self.take(index)
        self.bring_ahead(index)
        return prepared

    def take(self, index: int) -> Prepared:
        """Batch `index` once built (built here without workers). Brings nothing else into view unless `index`
        itself is not in view yet: `bring_ahead` does, after the caller has what it needs (see `_host_batches`)."""
        t0 = time.perf_counter()
        if index >= self._next:
            self.bring_ahead(index)
        if self.pool is None:
            prepared = self._timed_build(self._plans.pop(index))
        else:
            prepared = self.futures.pop(index).result()
        self.wait_s += time.perf_counter() - t0
        return prepared

    def bring_ahead(self, index: int) -> None:
        """Batches `index` to `index + cut_lookahead` come into view: each drawn once, the pieces of its long
        episodes cut ahead (`EpisodeStore.cut_ahead`); those to `index + lookahead` are built by the workers; what
        they admit is pinned for fetching."""
        self.prefetcher.advance(index)
        last = self.plan.num_batches
        for ahead in range(max(self._cut, index), min(index + self.cut_lookahead + 1, last)):
            with self.lock:
                plan = self.plan.batch(ahead)
            self.builder.cut_ahead(plan)
            self._plans[ahead] = plan
            self._cut = ahead + 1
        for ahead in range(max(self._next, index), min(index + self.lookahead + 1, last)):
            if self.pool is not None:  # without workers `take` builds it
                self.futures[ahead] = self.pool.submit(self._timed_build, self._plans.pop(ahead))
            self._next = ahead + 1

    def close(self) -> None:
        """End the workers and release the prefetcher's pins. Off the iterating thread (an abandoned iterator
        finalized by garbage collection, which can run on any thread: see StreamLoader.__init__) this happens
        on a thread of its own, without waiting for the workers."""
        if threading.current_thread() is self.owner:
            self._close(True)
        else:
            in_background(self._close, False)

    def _close(self, wait: bool) -> None:
        if self.pool is not None:
            for fut in list(self.futures.values()):
                fut.cancel()
            self.pool.shutdown(wait=wait, cancel_futures=True)
        self.prefetcher.close()
        self.builder.store.drop_ahead()  # pieces of batches nobody will build (their builders, if any, cut their own)


def open_meta(source: str | Mixture | Sequence[str | Member] | None = None, *, config: LoaderConfig | None = None,
              repo_id: str | None = None, root: str | os.PathLike | None = None,
              **settings: Unpack[LoaderSettings]) -> Any:
    """A source's metadata, as `loader.meta` of a loader built on it will be, without building the loader: what
    lerobot's `resolve_delta_timestamps(cfg, meta)` needs before the loader exists. A dataset's is lerobot's
    `LeRobotDatasetMetadata` in the parts policies read (`features`, `fps`, `stats`), a
    mixture's a `MixtureMeta`. Pass it to `StreamLoader` in place of the source and the dataset is not opened
    again (the settings that open one, `revision`, `data_files_root`, `storage_options` and the `remote_*`
    ones, then go here, not to the loader). lerobot's `repo_id=`/`root=` name the source as in `StreamLoader`."""
    return _open_meta(lerobot_source(source, repo_id, root), LoaderConfig.make(config, **settings))


class StreamLoader:
    """Batches of a LeRobot v3 dataset following lerobot's sample contract, decoded through DALI.

    `StreamLoader(source, *, config=None, **settings)`: `source` is the dataset root (a local path, an fsspec
    URL or a Hub id such as "lerobot/pusht"), or what `open_meta` returned; lerobot's `repo_id=` and `root=` name it
    as `LeRobotDataset` does (`root` where it holds the dataset, else `repo_id` streamed from the Hub: nothing is
    downloaded). Every other argument is keyword-only and a field of
    `LoaderConfig` (batch_size, delta_timestamps, decode, device, episodes, augment, ...: see its fields for
    each one's meaning and default). `config=` passes a whole `LoaderConfig`; keywords given beside it replace
    its fields. `loader.config` is the validated, frozen result.

    One CUDA device per loader (`dali_stream.decode.device`): "cuda:N", else torch's current device once CUDA
    is initialised, else LOCAL_RANK % visible devices; `loader.device` says which ("cuda:0", ..., or "cpu").
    `loader.routes` says how each camera is decoded; `loader.host_batches` whether batches skip DALI's graph
    altogether (batches on the CPU and every camera laid out by the CPU decoding threads, `graph.host`).
    """

    def __init__(self, source: str | Mixture | Sequence[str | Member] | DatasetMeta | MixtureMeta | None = None, *,
                 config: LoaderConfig | None = None, repo_id: str | None = None,
                 root: str | os.PathLike | None = None, **settings: Unpack[LoaderSettings]) -> None:
        self.config = cfg = LoaderConfig.make(config, **settings)
        source = lerobot_source(source, repo_id, root)
        check_dali()
        if "nvidia.dali.plugin.pytorch" in _IMPORT_ERRORS:
            exc = _IMPORT_ERRORS["nvidia.dali.plugin.pytorch"]
            raise InstallError(f"NVIDIA DALI does not import ({type(exc).__name__}: {exc}); `dali-stream diagnose` "
                               "names the broken layer and the constraint set that fixes it")
        self.image_ops = ImageOps.make(cfg.image_dtype, resize=cfg.resize, crop=cfg.crop, mean=cfg.mean, std=cfg.std,
                                       channels_last=cfg.memory_format == "channels_last")
        # One dataset, or a mixture's members as one list of episode positions (`catalog`); `meta`: a DatasetMeta,
        # or a mixture's MixtureMeta (its features and merged stats in the mixture's keys)
        self.catalog, self.meta = catalog, meta = open_source(source, cfg)
        # lerobot's evaluation loaders keep every sample: an unshuffled pass drops no tail unless asked to
        self.drop_last = cfg.drop_last if cfg.drop_last is not None else cfg.shuffle
        self.world = resolve_world(rank=cfg.rank, world_size=cfg.world_size, env=os.environ)
        plan_deltas, member_deltas = windows(catalog, cfg)  # each member at its own fps
        self.plan_config = PlanConfig(batch_size=cfg.batch_size, pool_size=pool_size(cfg), seed=cfg.seed,
                                      drop_last=self.drop_last, delta_indices=plan_deltas,
                                      shuffle=cfg.shuffle, drop_n_first_frames=cfg.drop_n_first_frames,
                                      drop_n_last_frames=cfg.drop_n_last_frames)
        self.mix = planner_mix(catalog, member_deltas)  # a mixture's weights and windows (plan.mix); None: one dataset
        # The planner sees the selected episodes' lengths (the others as 0: never drawn, never fetched).
        self.plan_lengths = catalog.lengths
        self.node, placement = place(cfg.device, self.world.local_rank)
        self.dali_device = placement.dali_device  # CUDA index the DALI graph runs on (None: CPU only)
        self.device = placement.torch_device  # where every tensor of a batch lands
        # NVDEC cameras: DALI's fn.decoders.video, or the open-decoder engine (decode.engine)
        engine, engine_why = nvdec_engine(cfg.nvdec_engine,
                                          proven.open_unproven(self.node.gpu.name if self.node.gpu else None))
        measured = self._measured_speed()
        choices, self.member_routes = camera_routes(
            catalog, cfg.decode, lambda formats, decode: choose_routes(formats, decode, self.node, measured,
                                                                       proven.rule(formats, self._joined())),
            engine, engine_why)
        self.routes = {k: c.route for k, c in choices.items()}
        self.route_reasons = {k: c.reason for k, c in choices.items()}
        for key, choice in choices.items():
            log.info("camera %s: %s (%s)", key, choice.route, choice.reason)
        if "torchcodec" in self.routes.values() and "torchcodec.decoders" in _IMPORT_ERRORS:
            exc = _IMPORT_ERRORS["torchcodec.decoders"]
            cpu = sorted(k for k, r in self.routes.items() if r == "torchcodec")
            raise InstallError(f"cameras {cpu} decode with torchcodec, which does not import ({type(exc).__name__}: "
                               f"{str(exc).splitlines()[0] if str(exc) else ''}); torchcodec must match torch and "
                               "find FFmpeg 4-7 (apt-get install -y ffmpeg): `dali-stream diagnose` names the fix")
        # DALI's mixed video decoder runs one decoder instance per pipeline thread, and one instance cannot use
        # more than one NVDEC engine: give it a thread per engine (H100: 7), not just `num_workers`. Measured
        # on an H100 with DALI 2.4, the decoder DALI creates for every sample (~8 ms) dominates and 2, 7 or 16
        # threads cost the same (benchmarks/results/NVIDIA-H100-80GB-HBM3/): the threads wait for a DALI
        # that decodes samples in parallel.
        nvdec_engines = (self.node.gpu.nvdec_engines or 2) if self.node.gpu is not None else 0
        self.dali_threads = max(1, cfg.num_workers, nvdec_engines if "nvdec" in self.routes.values() else 0)
        # DALI-routed cameras: a batch decoded as at most this many groups, each group's clips joined into one
        # stream, one decoder each (graph.joined); 0: a clip per sample. Default: the NVDEC engines where
        # a camera decodes on NVDEC, else the DALI threads. The builder keeps 0 where it must (`join_streams`).
        join_streams = (cfg.join_streams if cfg.join_streams is not None
                        else nvdec_engines if "nvdec" in self.routes.values() else self.dali_threads)
        check_camera_sizes(catalog, self.image_ops)
        # Host frames (graph.host): CPU-decoded cameras skip the graph, laid out by the workers in the caller's
        # dtype, so prepared batches are output-sized; one batch ahead per worker plus one keeps the workers busy
        # (measured as fast as 2 per worker, 2-core VM) at less memory.
        host_frames = uses_host_frames(self.image_ops, self.device.startswith("cuda"), cfg.augment)
        self.prefetch_batches = (cfg.prefetch_batches if cfg.prefetch_batches is not None
                                 else cfg.num_workers + 1 if host_frames else 2 * cfg.num_workers)
        fetch_workers = cfg.fetch_workers
        pool = pool_size(cfg)
        self.global_shuffle = pool is None and cfg.shuffle
        if fetch_workers is None:  # local fetches are CPU work (remux): one thread per core; remote ones wait, and a
            local = all(is_local(m.meta.data_fs) for m in catalog.members)  # global shuffle's batches each admit as
            fetch_workers = min(4, os.cpu_count() or 1) if local else REMOTE_GLOBAL_FETCHES if self.global_shuffle \
                else 4  # many episodes as samples (50 ms a request: 4 threads fetched 44 samples/s, 16 threads 643)
        max_decoders = cfg.max_decoders
        if max_decoders is None:  # what the builders touch per batch: every distinct segment, every thread
            cpu_cameras = sum(1 for r in self.routes.values() if r == "torchcodec")
            max_decoders = max(1, cfg.num_workers) * max(1, cpu_cameras) * min(cfg.batch_size,
                                                                                 pool_size(cfg) or cfg.batch_size)
        self.decoders = DecoderCache(max_decoders, cfg.check_frames)
        # An episode's camera whose segment would take more than its share of the cache (by default half of
        # cache_bytes over the pool's episodes and cameras, at least LONG_SEGMENT_FLOOR) is read in pieces, one per
        # sample (hour-long recordings): the cache bound then holds for any episode length. A global shuffle
        # (episode_pool_size='all') has the rank's whole share for a pool: where that share's segments fit in half
        # of cache_bytes, each episode is fetched whole once and kept; where not, every sample reads its GOPs alone.
        share = -(-int(np.count_nonzero(catalog.lengths)) // self.world.world_size)  # episodes per rank, at most
        self.segment_bytes_limit = cfg.segment_bytes if cfg.segment_bytes is not None else \
            max(1, cfg.cache_bytes // (2 * share * max(1, len(self.routes)))) if self.global_shuffle else \
            max(LONG_SEGMENT_FLOOR, cfg.cache_bytes // (2 * (pool or 1) * max(1, len(self.routes))))
        self.store = EpisodeStore(catalog, cfg.tolerance_s, cfg.cache_bytes, self.decoders, fetch_workers,
                                  self.segment_bytes_limit, index_bytes=cfg.index_bytes, footer_bytes=cfg.footer_bytes)
        self.store.epoch_episodes = None if self.global_shuffle else share  # retired episodes kept where they fit
        # Pieces (a few KB each) are cut further ahead than batches are built from a remote source: one batch's
        # reads go out together, so the reads in flight are what many batches ahead ask for (50 ms a request: 3
        # batches ahead read 330 samples/s, 8 batches 640, 2-core VM). Locally a read takes microseconds.
        self.cut_ahead = 0 if all(is_local(m.meta.data_fs) for m in catalog.members) else REMOTE_CUT_AHEAD
        # The open-decoder engine (decode.engine), one per engine route: its decode threads keep their decoders open
        # for the loader's life; one thread per NVDEC engine (one decoder instance cannot use more than one engine).
        self.engines: dict[str, OpenDecoders] = {}
        for route in sorted({r for r in self.routes.values() if r in ENGINE_ROUTES}):
            threads = cfg.decode_threads or (max(1, nvdec_engines) if route == "nvdec-open"
                                             else max(1, cfg.num_workers))
            self.engines[route] = make_engine(route, threads, self.dali_device,
                                              {engine_camera(k, m.name, catalog.is_mixture):
                                               (m.camera(k).height, m.camera(k).width)
                                               if m.camera(k).height and m.camera(k).width else None
                                               for m in catalog.members for k in catalog.video_keys if k in m.own})
            log.info("%s: %d decode threads, their decoders kept open", route, threads)
        log.info("batches on %s; %d worker threads, %d fetch threads, at most %d idle CPU decoders, cache %d MiB; "
                 "rank %d of %d", self.device, cfg.num_workers, fetch_workers, max_decoders, cfg.cache_bytes >> 20,
                 self.world.rank, self.world.world_size)
        self._closed = False
        self._samples: Samples | None = None  # `dataset`, opened on first use
        # image_transforms: in transform_workers processes for batches on the CPU, else in the calling thread
        processes = cfg.num_workers if cfg.transform_workers is None else cfg.transform_workers
        self.transforms = None if cfg.image_transforms is None else TransformPool(
            cfg.image_transforms, 0 if self.device.startswith("cuda") else processes)
        self._squeeze = {k: len(self.plan_config.delta_indices.get(k, (0,))) == 1 for k in self.routes}
        # Threads end with the loader, even unclosed. Garbage collection runs the finalizer on whatever thread
        # allocates at that moment: one of the fetch threads, one holding a lock the close takes, or fsspec's
        # event-loop thread while a fetch thread waits for that loop (joining it there never returned). So a
        # collected loader is closed on a thread of its own, which tells the fetch threads to end and does
        # not wait for them; `close()` waits. Not at interpreter exit, though: a thread closing the store then
        # races the interpreter's teardown (it was killed inside pyarrow's ParquetReader dealloc: "terminate
        # called without an active exception", 1 exit in 5 of benchmarks/epoch_profile.py), so loaders still
        # open at exit are closed on the main thread by `_close_open_loaders`. The closing thread is started here,
        # never from the finalizer (`fetch.store._Closer`: a thread started inside the garbage collector can
        # deadlock every thread start in the process).
        CLOSER.start()
        self._finalizer = weakref.finalize(self, in_background, _shut, self.store, list(self.engines.values()),
                                           self.transforms)
        self._finalizer.atexit = False
        _OPEN_LOADERS.add(self)
        table_dtypes = table_kinds(catalog, self.store,  # one dataset: its first selected episode's rows, as read
                                   lambda: self.store.tables.episode(int(np.flatnonzero(self.plan_lengths > 0)[0])))
        self.frames = None  # decoded frames kept for later epochs (decode.frames)
        if cfg.frame_cache_bytes or cfg.frame_cache_dir:
            self.frames = FrameCache(cfg.frame_cache_bytes, cfg.frame_cache_dir, "torchcodec",
                                     stamper([m.meta.data_fs for m in catalog.members]))
            uncached = {k: r for k, r in self.routes.items() if r != "torchcodec"}
            if uncached:
                named = ", ".join(f"{k!r} (route {r})" for k, r in uncached.items())
                warnings.warn(f"the decoded-frame cache keeps what torchcodec decodes: cameras {named} are decoded "
                              "every epoch. decode='cpu' routes every camera through torchcodec", stacklevel=2)
        self.builder = BatchBuilder(catalog, self.store, self.decoders, self.routes, self.plan_config.delta_indices,
                                    cfg.tolerance_s, catalog.table_keys, table_dtypes,
                                    augment_seed=cfg.seed if cfg.augment is not None else None,
                                    image_ops=self.image_ops if host_frames else None,
                                    lookahead=self.prefetch_batches, join_streams=join_streams, engines=self.engines,
                                    join_all=self.global_shuffle, frames=self.frames)
        self.join_streams = self.builder.join_streams
        dali_cameras = [k for k, r in self.routes.items() if r in DALI_ROUTES]
        if dali_cameras:
            log.info("cameras %s: %s", dali_cameras,
                     f"a batch in at most {self.join_streams} groups, each group's clips joined into one stream "
                     "(join_streams)" if self.join_streams else
                     "one clip per sample (augment= draws per sample)" if cfg.augment is not None else
                     "one clip per sample (join_streams=0)")
        # Every camera on host frames (or none at all) and batches on the CPU: a DALI graph would only pass the
        # tables through, so there is none; the tables are stacked as the batch is handed over. Measured (AV1
        # 480p, 2 cores, uint8 channels_last, alternated twice): 875-885 against 812-815 samples/s with the graph.
        self.host_batches = not self.builder.graph_routes and not self.device.startswith("cuda")
        self._epoch = 0
        self._consumed = 0
        self._continue = True  # the next `for` continues at (_epoch, _consumed) instead of a new epoch
        self._chain: list[tuple[int, int]] = []  # (world_size, batches) run of this epoch on other world sizes
        self._plans: dict[tuple, EpochPlan] = {}
        self._live: weakref.ref | None = None  # the generator of the epoch being iterated
        self.last_epoch_stats: dict[str, Any] = {}
        self._waits = DataWait()  # how long the loop waited for each batch (`data_wait`)
        sizes = self._plan(0).share_sizes  # validates the world against the dataset now, not at batch 0
        if self._plan(0).num_batches == 0:  # lerobot's DataLoader would have yielded the partial batch
            where = (f"the smallest rank share holds {min(sizes)} frames ({len(sizes)} ranks)" if len(sizes) > 1
                     else f"the dataset's selected episodes hold {sum(sizes)} frames")
            raise ConfigError(f"an epoch would yield no batch: batch_size={cfg.batch_size} but {where}, and "
                              f"drop_last=True ({'the default when shuffling' if cfg.drop_last is None else 'given'}) "
                              "drops a partial batch; use a smaller batch_size, or drop_last=False (the epoch then "
                              "yields the partial batch, as a DataLoader's default does)")
        # about the whole job: said once, by rank 0
        if len(sizes) > 1 and min(sizes) < UNEVEN_SHARES * max(sizes) and self.world.rank == 0:
            warnings.warn(
                f"ranks get uneven shares of epoch 0: {min(sizes)} to {max(sizes)} frames over {len(sizes)} ranks "
                f"(episodes are whole per rank); every rank yields {self._plan(0).num_batches} batches, so "
                f"{'frames of the larger shares are dropped' if self.drop_last else 'the smaller shares are padded with repeats'}"
                "; use fewer ranks or a dataset with more, shorter episodes", stacklevel=2)

    # ---- set-up helpers --------------------------------------------------------------------------------
    def _joined(self) -> bool:
        """Whether NVDEC cameras would decode joined streams (`graph.joined`): with an augment hook a batch is
        decoded one clip per sample whatever join_streams says (`joins`)."""
        return joins(1 if self.config.join_streams is None else self.config.join_streams, True,
                     self.config.augment is not None) != 0

    def _measured_speed(self):
        """For `decode="auto"`: per camera, whether a measurement says torchcodec beats NVDEC for its samples
        (`decode.speed`: one clip per sample or joined streams, frames per sample)."""
        from nvidia.dali import __version__ as dali_version

        joined = self._joined()

        def measured(key: str) -> tuple[str | None, str]:
            frames = len(self.plan_config.delta_indices.get(key, (0,)))
            return gpu_slower(dali_version, joined, frames), unmeasured(joined)
        return measured

    def _plan(self, epoch: int) -> EpochPlan:
        """This rank's plan of `epoch`; for an epoch resumed on another world size, the rest of it."""
        chain = tuple(self._chain) if epoch == self._epoch else ()
        plan = self._plans.get((epoch, chain))
        if plan is None:
            plan = resume_plan(self.plan_lengths, self.plan_config, self.world, epoch, list(chain), self.mix)
            self._plans = {(epoch, chain): plan}
        return plan

    def _start_epoch(self, epoch: int) -> None:
        self._epoch, self._consumed, self._chain = epoch, 0, []

    @property
    def remote_stats(self) -> dict | None:
        """Requests, retries, bytes and seconds of remote reads (None for a local dataset)."""
        metas = [m.meta for m in self.catalog.members]
        found = [fs.stats.as_dict() for fs in {id(f): f for m in metas for f in (m.fs, m.data_fs)}.values()
                 if getattr(fs, "stats", None) is not None]
        if not found:
            return None
        return {k: sum(s[k] for s in found) for k in found[0]}

    def memory_budget(self) -> dict[str, Any]:
        """Where this loader's host memory goes, in bytes, and the knob that bounds each part (docs/memory.md).

        An episode's camera above `segment_bytes_limit` is read in pieces, one per sample, held only until its
        batch is built (`pieces_cut`, `piece_bytes`: how many and their bytes so far; `pieces_ahead_peak`: most
        bytes of pieces cut ahead of the builders at once, at most `prefetch_batches` + 1 batches'), never in the
        cache.

        `cache_peak`, `table_footers_peak` (parsed parquet footers of the data files kept open, weighed at 8x
        their serialized size) and `mp4_indexes_peak` (video files' sample indexes) are measured, against
        their bounds (`footer_bytes`, `index_bytes`: least recently used files are dropped and read again when
        needed); `stats()` reports what each holds now; the others are upper estimates from the configuration: prepared batches
        hold decoded uint8 frames (CPU routes through the graph) and clips (DALI routes) for `prefetch_batches
        + 1` batches; host frames (`graph.host`: CPU-decoded cameras of batches on the CPU) are output-sized
        buffers for `prefetch_batches + 2` batches (the ones building, the caller's), one more where a DALI graph
        holds one too (tables or other cameras still in the graph); DALI keeps
        `prefetch_queue_depth` (2) output batches of the cameras it lays out; CPU decoders hold their frame
        buffers (~12 MB per AV1 decoder at 480p, ~1.3 MB per H.264 one), counted here as alive at the peak."""
        b = self.config.batch_size
        steps = {k: len(self.plan_config.delta_indices.get(k, (0,))) for k in self.routes}
        # each key's largest camera over the members
        size = {k: max(self.catalog.fields[k].sizes.values(), key=lambda hw: hw[0] * hw[1]) for k in self.routes}
        host = self.builder.host_keys
        itemsize = 4 if self.image_ops.dtype == "float32" else 1

        def out_bytes(k: str) -> int:
            return b * steps[k] * itemsize * int(np.prod(self.image_ops.out_shape(*size[k])))

        decoded = sum(b * steps[k] * size[k][0] * size[k][1] * 3
                      for k, r in self.routes.items() if r == "torchcodec" and k not in host)
        host_batches_alive = self.prefetch_batches + (2 if self.host_batches else 3)
        prepared = (self.prefetch_batches + 1) * decoded + host_batches_alive * sum(map(out_bytes, host))
        footers, indexes = self.store.tables.files, self.store.indexes.files
        return {"cache_peak": self.store.stats.peak_bytes, "cache_bound": self.store.capacity_bytes,
                "segment_bytes_limit": self.segment_bytes_limit, "pieces_cut": self.store.stats.pieces_cut,
                "piece_bytes": self.store.stats.piece_bytes, "pieces_ahead_peak": self.store.stats.pieces_ahead_peak,
                "table_footers_peak": footers.peak_bytes, "table_footers_bound": footers.capacity_bytes,
                "mp4_indexes_peak": indexes.peak_bytes, "mp4_indexes_bound": indexes.capacity_bytes,
                "prepared_batches": prepared,
                "dali_outputs": 2 * sum(out_bytes(k) for k in self.routes if k not in host),
                "host_frames": list(host), "host_buffers_peak": self.builder.buffers.nbytes,
                "decoders_alive_peak": self.decoders.peak, "decoders_bound": self.decoders.capacity,
                "knobs": {"cache_bound": "cache_bytes", "segment_bytes_limit": "segment_bytes",
                          "prepared_batches": "prefetch_batches, num_workers",
                          "dali_outputs": "batch_size, image_dtype, resize/crop", "decoders": "max_decoders",
                          "table_footers_bound": "footer_bytes", "mp4_indexes_bound": "index_bytes"}}

    def stats(self) -> dict[str, Any]:
        """What each bounded structure holds now against its bound and setting (`bounded`: fetched episodes, pieces
        cut ahead, MP4 indexes, parquet footers, CPU decoders, host buffers, decoded frames), the decoded-frame
        cache's hits (`frames`), the fetch counters and the decoders opened (`dali_stream/stats.py`, docs/memory.md). Cheap: read from counters, safe at any step."""
        return loader_stats(self.store, self.decoders, self.builder.buffers, self.segment_bytes_limit, self.frames)

    def data_wait(self) -> dict[str, Any]:
        """How long the training loop waited for batches on this rank, from asking (`next`) to getting each one:
        `wait_fraction` of the wall time since the first batch was asked for, and `recent` (the last 100 batches:
        `wait_fraction`, `p50_ms`, `p95_ms`, `max_ms`). Near 0: the loader keeps ahead of the loop; near 1: the
        loop waits for data (`dali_stream/wait.py`). Readable at any step; a training loop logs the max over ranks
        (dali-stream train)."""
        return self._waits.stats()

    def batch_plan(self, epoch: int, index: int):
        """The plan of batch `index` of `epoch` on this rank (for tools such as `dali-stream bench`)."""
        return self._plan(epoch).batch(index)

    # ---- the public surface --------------------------------------------------------------------------
    @property
    def dataset(self) -> Samples:
        """The loader's samples as lerobot's dataset offers them: `len(loader.dataset)` frames, `loader.dataset[i]`
        sample i as `LeRobotDataset.__getitem__` returns it (one dict, no batch axis, `task` a string); sample i is
        the i-th frame of the selected episodes in order (`dali_stream.samples`). Iterating the loader is the fast
        way through an epoch; this is for looking at samples."""
        if self._samples is None:
            self._samples = Samples(self)
        return self._samples

    def __getitem__(self, i: int) -> dict[str, Any]:
        """`loader[i]` is `loader.dataset[i]`: sample i as lerobot's `dataset[i]` (`len(loader)` counts batches, as a
        DataLoader's; `len(loader.dataset)` counts samples)."""
        return self.dataset[i]

    def __len__(self) -> int:
        """Batches in the epoch the next `for` runs, on this rank."""
        epoch = self._epoch if self._continue else self._epoch + 1
        return self._plan(epoch).num_batches

    def state_dict(self) -> dict[str, Any]:
        """The resume point, identical on every rank. `elastic` lists the (world_size, batches) segments this
        epoch already ran on other world sizes; `batches_consumed` counts the current segment."""
        epoch, consumed, chain = self._epoch, self._consumed, self._chain
        if consumed > 0 and consumed >= self._plan(epoch).num_batches:  # taken at an epoch's end
            epoch, consumed, chain = epoch + 1, 0, []
        return {"version": STATE_VERSION, "seed": self.config.seed, "epoch": epoch, "batches_consumed": consumed,
                "batch_size": self.config.batch_size, "episode_pool_size": self.config.episode_pool_size,
                "drop_last": self.drop_last, "world_size": self.world.world_size,
                "elastic": [list(seg) for seg in chain],
                "delta_indices": self._saved_deltas(),
                "dataset": self.catalog.fingerprint(),
                "selection": {**self._selected(), "shuffle": self.config.shuffle,
                              "drop_n_first_frames": self.config.drop_n_first_frames,
                              "drop_n_last_frames": self.config.drop_n_last_frames}}

    def _selected(self) -> dict[str, Any]:
        """The selected episodes a state records (their digest and count): one dataset's, or each member's."""
        chosen = [{"episodes_sha256": selection_digest(m.episodes), "episodes": len(m.episodes)}
                  for m in self.catalog.members]
        return {"members": chosen} if self.catalog.is_mixture else chosen[0]

    def _saved_deltas(self) -> dict[str, list[int]]:
        """The windows' frame offsets a state records: per key, or for a mixture per "member/key"."""
        if self.mix is None:
            return {k: list(v) for k, v in self.plan_config.delta_indices.items()}
        return {f"{m.name}/{k}": list(v) for m, deltas in zip(self.catalog.members, self.mix.delta_indices)
                for k, v in deltas.items() if v is not None}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at `state` (from `state_dict()`, possibly saved on another world size) on the next `for`.

        Call it before iterating: while an epoch is being iterated it raises `StateError`."""
        live = self._live() if self._live is not None else None
        if live is not None and live.gi_frame is not None:
            raise StateError(
                f"load_state_dict() was called while epoch {self._epoch} is being iterated ({self._consumed} "
                "batches delivered): the live loop would go on from where it is. Load the state before the `for` "
                "loop, or leave the loop (break, or close the iterator with .close()) first")
        saved = parse_state(state)
        mine = self.state_dict()
        for key in CONFIG_KEYS:
            if getattr(saved, key) != mine[key]:
                raise StateError(
                    f"state was saved with {key}={getattr(saved, key)!r} but this loader has {key}={mine[key]!r}; "
                    "resume needs the same dataset, seed, batch size, pool size and windows: construct "
                    "the loader with the saved values"
                )
        epoch, consumed, chain = saved.epoch, saved.batches_consumed, list(saved.elastic)
        saved_world = saved.world_size
        same_world = saved_world == self.world.world_size
        # Every rank of a world has the same batch count, so this rank's plan validates a same-world state
        # and is kept for the iteration; an elastic state is checked against a rank of the saved world.
        world = self.world if same_world else World(rank=0, world_size=saved_world)
        plan = resume_plan(self.plan_lengths, self.plan_config, world, epoch, chain, self.mix)
        if consumed > plan.num_batches:
            raise StateError(f"state position epoch={epoch}, batches_consumed={consumed} is outside the epoch "
                             f"({plan.num_batches} batches on {saved_world} ranks): the state was edited or comes "
                             f"from another run; {FIX}, or start afresh without load_state_dict")
        if not same_world and consumed > 0:
            chain, consumed = chain + [(saved_world, consumed)], 0  # elastic: the rest of the epoch on this world
        self._epoch, self._consumed, self._chain, self._continue = epoch, consumed, chain, True
        self._plans = {(epoch, tuple(chain)): plan} if same_world else {}

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def close(self, wait: bool = True) -> None:
        """End the fetch threads, close CPU decoders and index containers, drop fetched episodes and the host-frame
        buffers (batches the caller still holds stay valid). Also done when the loader is garbage collected, at
        interpreter exit, and by `with StreamLoader(...) as loader:`. Iterating a closed loader raises
        ConfigError. `wait=False`: tell the threads to end without waiting for them (at interpreter exit, which
        joins them itself)."""
        self._closed = True
        _OPEN_LOADERS.discard(self)
        if self._samples is not None:
            self._samples.close()
        self.builder.buffers.clear()
        if self._finalizer.detach() is not None:
            self.store.close(wait)
            for engine in self.engines.values():
                engine.close(wait)
            if self.transforms is not None:
                self.transforms.close(wait)

    def __enter__(self) -> "StreamLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._closed:
            raise ConfigError("this StreamLoader was closed (close(), or the end of its `with` block); "
                              "construct a new one, and load_state_dict() to continue where it stopped")
        if not self._continue:
            self._start_epoch(self._epoch + 1)
        if self._consumed > 0 and self._consumed >= self._plan(self._epoch).num_batches:
            self._start_epoch(self._epoch + 1)
        self._continue = False
        run = self._run(self._epoch, self._consumed)
        self._live = weakref.ref(run)  # load_state_dict refuses while this generator is suspended mid-epoch
        return run

    @contextlib.contextmanager
    def _dali_errors(self, producer: _Producer):
        """DALI reports a decoder failure as a RuntimeError without naming the sample: name it."""
        try:
            yield
        except RuntimeError as exc:
            if "decoders.video" not in str(exc) and classify(str(exc)).kind == "unknown":
                raise
            raise self.builder.explain_dali_failure(list(producer.handed), exc, self.node) from None

    def _batch(self, got: Mapping[str, Any], prepared: Prepared, squeeze: Mapping[str, bool]) -> dict[str, Any]:
        """The caller's batch: cameras in route order (host frames as tensors on their buffers, `graph.host`),
        then the tables, then `task`; every tensor on `self.device`. The graph's outputs come per group of
        samples (`graph.batches`): (groups, members x steps, ...) cameras and (groups, members, ...) tables,
        viewed here as (samples, steps, ...), or (samples, ...) for a one-step camera. With `channels_last` the
        graph's cameras come HWC and are handed over as (..., 3, H, W) views, as host frames are."""
        size = prepared.plan.size
        tensors = {k: v.flatten(0, 1) for k, v in got.items() if k not in self.routes}
        for k in self.builder.graph_routes:
            frames = got[k].reshape(size, -1, *got[k].shape[2:])
            frames = frames[:, 0] if squeeze[k] else frames
            tensors[k] = frames.movedim(-1, -3) if self.image_ops.channels_last else frames
        for k, v in prepared.host.items():
            tensors[k] = prepared.images[k] if k in prepared.images else to_output(v, squeeze[k],
                                                                                   self.image_ops.channels_last)
        for k in self.builder.masks:  # a mixture's member lacking a camera: zeros (after mean/std too)
            if k in self.builder.graph_routes:
                missing = tensors[f"{k}_is_missing"]
                if bool(missing.any()):
                    tensors[k][missing.to(tensors[k].device)] = 0
        order = [*self.routes, *(k for k in got if k not in self.routes)]
        batch: dict[str, Any] = {k: tensors[k] if str(tensors[k].device) == self.device else tensors[k].to(self.device)
                                 for k in order}
        if self.config.image_transforms is not None:
            self._transform(batch, prepared)
        batch["task"] = prepared.tasks
        return batch

    def _transform(self, batch: dict[str, Any], prepared: Prepared) -> None:
        """`image_transforms` on each sample's camera tensor, as lerobot applies them, with torch's RNG seeded per
        (seed, epoch, batch, sample, camera) around each call (`dali_stream.transforms`): in the worker processes
        for tensors on the CPU, else here. Cameras the batch's builder transformed already are left as they are."""
        import torch

        plan, transform = prepared.plan, self.config.image_transforms
        assert transform is not None and self.transforms is not None
        devices = [torch.device(self.device).index or 0] if self.device.startswith("cuda") else []
        for k, key in enumerate(self.routes):
            if key in prepared.images:
                continue
            seed_list = sample_seeds(self.config.seed, plan.epoch, plan.index, k, len(batch[key]))
            batch[key] = (self.transforms(batch[key], seed_list) if not devices
                          else apply(transform, batch[key], seed_list, devices))

    def _transform_host(self, prepared: Prepared) -> None:
        """`image_transforms` on a CPU batch's host-frame cameras, in the thread that built it (a producer worker):
        the caller's loop then receives them done, while the next batches build."""
        assert self.transforms is not None
        plan = prepared.plan
        for k, key in enumerate(self.routes):
            if key in prepared.host:
                frames = to_output(prepared.host[key], self._squeeze[key], self.image_ops.channels_last)
                prepared.images[key] = self.transforms(frames, sample_seeds(self.config.seed, plan.epoch, plan.index,
                                                                            k, len(frames)))

    def _run(self, epoch: int, start: int) -> Iterator[dict[str, Any]]:
        asked = time.perf_counter()  # the loop asked for the epoch's first batch (this generator's first `next`)
        plan = self._plan(epoch)
        if start >= plan.num_batches:  # e.g. fewer frames on this rank than one batch with drop_last
            self._start_epoch(epoch + 1)
            self._continue = True
            self.last_epoch_stats = {"epoch": epoch, "batches": 0, "first_batch_s": None, "wall_s": 0.0,
                                     "build_s": 0.0, "producer_wait_s": 0.0}
            return
        host_transforms = (self.transforms is not None and self.transforms.in_processes
                           and not self.device.startswith("cuda"))
        producer = _Producer(self.builder, plan, start, self.config.num_workers, self.prefetch_batches,
                             FETCH_AHEAD_BATCHES, self.cut_ahead, self._transform_host if host_transforms else None)
        squeeze = self._squeeze
        t0 = time.perf_counter()
        first_s = None
        delivered = 0
        batches = (self._host_batches(producer, plan, start, squeeze) if self.host_batches
                   else self._graph_batches(producer, squeeze))
        try:
            for batch in batches:
                self._waits.got(asked)
                self._consumed += 1
                delivered += 1
                if delivered % TRIM_EVERY == 0:  # ~0.1 ms on the caller's thread (dali_stream.memory)
                    release_freed()
                if first_s is None:
                    first_s = time.perf_counter() - t0
                yield batch
                asked = time.perf_counter()  # the loop asks for the next batch
            self._start_epoch(epoch + 1)
            self._continue = True
        finally:
            batches.close()
            producer.close()
            self.last_epoch_stats = {"epoch": epoch, "batches": delivered, "first_batch_s": first_s,
                                     "wall_s": time.perf_counter() - t0, "build_s": producer.build_s,
                                     "producer_wait_s": producer.wait_s}

    def _host_batches(self, producer: _Producer, plan, start: int, squeeze: Mapping[str, bool]):
        """Batches without a DALI graph (`host_batches`): the workers' host frames, and the tables stacked here."""
        import torch

        keys = [o.key for o in self.builder.outputs]  # only tables: no camera goes through a graph here
        for index in range(start, plan.num_batches):
            prepared = producer.take(index)
            tables = {k: torch.from_numpy(np.stack(values)) for k, values in zip(keys, prepared.arrays)}  # (B, 1, ...)
            batch = self._batch(tables, prepared, squeeze)
            # Only now are the next batches drawn and handed to the workers. Woken workers take the GIL, and every
            # torch call above gives it up (torch releases the GIL in each op): after a wake each would wait out
            # the interpreter's switch interval (5 ms) to get it back, on the caller's clock. The draws are pure
            # Python, which keeps the GIL until the caller's step gives it up.
            producer.bring_ahead(index)
            yield batch

    def _graph_batches(self, producer: _Producer, squeeze: Mapping[str, bool]):
        """Batches through the DALI graph, with the producer as its external source."""
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        from .graph.pipeline import build_pipeline

        # DALI asks its source for prefetch_queue_depth + 1 batches before it returns the first. A graph with no
        # camera (a camera-less dataset on a GPU) only moves tables: one batch of queue is enough there.
        queue_depth = 2 if self.builder.graph_routes else 1
        pipe, names = build_pipeline(self.builder.outputs, self.builder.graph_routes, producer,
                                     self.config.batch_size, self.dali_threads, self.dali_device, self.image_ops,
                                     on_gpu=self.device.startswith("cuda"), augment=self.config.augment,
                                     prefetch_queue_depth=queue_depth, engine_outputs=self.builder.engine_outputs,
                                     engine_sources={r: producer.engine_source(r) for r in self.builder.engine_outputs},
                                     engine_streams={r: self.engines[r].stream for r in self.builder.engine_outputs})
        with self._dali_errors(producer):  # the iterator runs the first batch while constructed
            iterator = DALIGenericIterator([pipe], names, auto_reset=False, last_batch_policy=LastBatchPolicy.PARTIAL)
        while True:
            try:
                with self._dali_errors(producer):
                    out = next(iterator)
            except StopIteration:
                return
            yield self._batch(out[0], producer.handed.popleft(), squeeze)
