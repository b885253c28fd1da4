"""Every setting a loader derives, from its `LoaderConfig` and what the source and the node are: one pure function.

`resolve(config, facts)` is the one place each default is worked out (threads, streams joined per batch, batches
ahead, fetch threads, decoders kept open, the piece limit, ...), each with the reason it has that value; the
loader's stages are built from what it returns (`loader.assemble`) and `inspect`/`bench` print it
(`Resolved.describe`). Nothing here opens a file, probes a device or imports torch or DALI: `Facts` carries what
those found.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Mapping

from ..config import TABLE_CACHE_OFF, LoaderConfig, pool_size
from ..decode.route import OPEN_NVDEC_THREADS, Route

FETCH_AHEAD_BATCHES = 16  # episodes admitted this many batches beyond the builders' lookahead are fetched
REMOTE_CUT_AHEAD = 16  # batches whose pieces are cut ahead from a remote source (reads in flight hide its latency)
LONG_SEGMENT_FLOOR = 16 << 20  # bytes: a segment below this is never cut in pieces (see EpisodeStore)
REMOTE_GLOBAL_FETCHES = 16  # fetch threads of a global shuffle from a remote source
LOCAL_FETCHES = 4  # at most this many fetch threads on a local source (one per core below that)
REMOTE_FETCHES = 4  # fetch threads of a pool from a remote source
UNKNOWN_ENGINES = 2  # NVDEC engines assumed of a GPU the capability table does not know
KEPT_CHW_BYTES = 256 << 10  # a host camera's frames at most this size are kept channels-first (`kept_chw`)
EPISODE_FRAMES_BYTES = 1 << 30  # a pool's open episodes' decoded frames held at most, per rank (`decode.episode_frames`)
MIN_WORKERS = 2  # worker threads of a rank with one or two cores (the 2-core VM's measured default)
MAX_WORKERS = 16  # worker threads at most by default: the most the CPU route was measured with (a 16-core H200 node)


@dataclass(frozen=True)
class Facts:
    """What `resolve` reads besides the settings, found by the loader before it builds anything.

    `routes`: camera key -> its route (`decode.routes`); `gpu`: the loader's device is a GPU; `gpu_engines`: its
    NVDEC engines as the capability table knows them (None: unknown); `cuda_batches`: batches land on a CUDA
    device; `local`: every file of every member is on a local file system; `episodes`: the selected episodes;
    `world_size`: ranks; `cpu_count`: this node's cores; `rank_cores`: the cores this rank may use
    (`decode.node.rank_cores`); `mixture`: the source is a mixture of datasets;
    `frame_bytes`: camera key -> one decoded frame's bytes, 3 x H x W (unknown: not kept channels-first);
    `user_cache_dir`: dali_stream's folder in this user's cache (None: no home to put one in)."""

    routes: Mapping[str, Route]
    gpu: bool = False
    gpu_engines: int | None = None
    cuda_batches: bool = False
    local: bool = True
    episodes: int = 1
    world_size: int = 1
    cpu_count: int = 1
    rank_cores: int = 1
    mixture: bool = False
    frame_bytes: Mapping[str, int] = field(default_factory=dict)
    user_cache_dir: str | None = None  # this user's cache folder for dali_stream (`loader.assemble.user_cache_dir`)


# What each derived setting is, in plain words: `describe()` hands it to inspect and bench beside the value and why.
MEANING = {
    "num_workers": "threads that fetch and CPU-decode batches ahead (0: in the calling thread)",
    "drop_last": "an epoch's partial last batch is dropped",
    "pool": "episodes a rank keeps open and draws samples from (None: every episode, a global shuffle)",
    "global_shuffle": "every batch drawn from all of a rank's episodes",
    "nvdec_engines": "the GPU's video decoding engines the loader plans for",
    "dali_threads": "threads of the DALI graph",
    "join_streams": "groups a batch's clips are decoded in, one decoder each, for cameras DALI decodes (0: a clip a "
                    "sample)",
    "host_frames": "frames decoded on the CPU go straight into the batch, skipping DALI's graph",
    "prefetch_batches": "batches built ahead of the training loop",
    "fetch_ahead": "batches ahead of those being built whose episodes are already fetched",
    "fetch_workers": "threads reading episodes' bytes",
    "max_decoders": "CPU decoders kept open between batches",
    "rank_episodes": "episodes a rank holds, at most",
    "segment_bytes": "an episode's camera larger than this is read one sample's frames at a time",
    "epoch_episodes": "episodes a rank's epoch keeps fetched where they fit the cache",
    "cut_ahead": "batches ahead whose frames' bytes are read ahead of decoding (remote sources)",
    "engine_threads": "decode threads of the open-decoder engine, per route (in each decode process where it runs in "
                      "processes: 1)",
    "engine_processes": "decode processes of the open-decoder engine, per route, each one thread with its decoders "
                        "(0: its threads in the loader's process)",
    "frame_cache": "decoded frames are kept for later epochs (frame_cache_bytes, frame_cache_dir)",
    "transform_processes": "processes lerobot's image_transforms run in (0: the thread iterating the loader)",
    "shaped_on_workers": "cameras resized and cropped by the decoding threads, before the decoded-frame cache",
    "episode_frames": "bytes of a pool's open episodes' decoded frames held while they stay open, each camera decoded "
                      "on the CPU once per episode, front to back (0: off)",
    "episode_frames_each": "an open episode's camera is held where its decoded frames take at most this",
    "dali_on_workers": "cameras DALI's CPU decoder decodes on the decoding threads (for the decoded-frame cache and "
                       "the open episodes' frames)",
    "host_cameras": "cameras whose frames the decoding threads lay out into the batch (host frames)",
    "host_batches": "no DALI graph at all: every camera on host frames and batches on the CPU",
    "kept_chw": "cameras whose frames the decoded-frame cache keeps channels-first, (3, H, W): the batch's own order",
    "table_cache_dir": "where parquet row groups holding many episodes are kept decoded, once a node, and the images "
                       "stored in the tables of open episodes past cache_bytes (None: the last 2 groups, and the "
                       "images, in memory)",
}


@dataclass(frozen=True)
class Resolved:
    """The derived settings (module doc); `reasons[name]` says why each has its value, `MEANING[name]` what it is."""

    num_workers: int
    drop_last: bool
    pool: int | None  # the planner's pool size; None: a global shuffle draws from every episode
    global_shuffle: bool
    nvdec_engines: int  # the loader's GPU's NVDEC engines (0: no GPU)
    dali_threads: int
    join_streams: int  # DALI-decoded cameras: groups a batch is decoded in (0: one clip per sample)
    host_frames: bool  # CPU-decoded cameras skip the DALI graph (graph.host)
    prefetch_batches: int
    fetch_ahead: int
    fetch_workers: int
    max_decoders: int
    rank_episodes: int  # episodes per rank, at most
    segment_bytes: int  # an episode's camera above this is read in pieces, one per sample
    epoch_episodes: int | None  # the store keeps retired episodes where a rank's epoch fits (None: always)
    cut_ahead: int
    engine_threads: Mapping[str, int] = field(default_factory=dict)  # open-decoder engine route -> threads
    engine_processes: Mapping[str, int] = field(default_factory=dict)  # route -> decode processes (0: threads)
    frame_cache: bool = False  # decoded frames kept for later epochs (`decode.frames`)
    transform_processes: int = 0  # processes lerobot's image_transforms run in (0: the iterating thread)
    shaped_on_workers: tuple[str, ...] = ()  # cameras resized and cropped before the decoded-frame cache keeps them
    episode_frames: int = 0  # bytes of the pool's open episodes' frames held (`decode.episode_frames`; 0: off)
    episode_frames_each: int = 0  # an episode's camera is held where its frames take at most this
    dali_on_workers: tuple[str, ...] = ()  # dali-cpu cameras decoded on the workers (the decoded-frame cache keeps them)
    host_cameras: tuple[str, ...] = ()  # cameras on host frames: laid out by the workers, never in the graph
    host_batches: bool = False  # no DALI graph: every camera on host frames, batches on the CPU
    kept_chw: tuple[str, ...] = ()  # cameras the decoded-frame cache keeps as (3, H, W), the others (H, W, 3)
    table_cache_dir: str | None = None  # decoded shared row groups' folder (`fetch.decoded_groups`; None: memory)
    reasons: Mapping[str, str] = field(default_factory=dict)

    def describe(self) -> dict[str, dict[str, object]]:
        """Each derived setting with its value, what it is and why it has that value, for `inspect` and `bench`."""
        out: dict[str, dict[str, object]] = {}
        for name, reason in self.reasons.items():
            value = getattr(self, name)
            out[name] = {"value": dict(value) if isinstance(value, Mapping) else value, "what": MEANING[name],
                         "why": reason}
        return out


def nvdec_joins(config: LoaderConfig) -> bool:
    """Whether NVDEC cameras would decode joined streams (`graph.joined`), before routes are chosen: the rule
    `decode="auto"` reads (`decode.proven`). With an augment hook a batch is one clip per sample."""
    return (1 if config.join_streams is None else config.join_streams) != 0 and config.augment is None


def resolve(config: LoaderConfig, facts: Facts) -> Resolved:
    cfg, routes = config, facts.routes
    why: dict[str, str] = {}
    given = "given"

    # Decoding on the CPU scales with its threads (decoders release the interpreter's lock): a core each, one left
    # for the training loop, as docs/training.md advises. Where every camera decodes on the GPU the workers only
    # fetch and lay out: the GPU measurements were taken with MIN_WORKERS.
    if cfg.num_workers is not None:
        workers, why["num_workers"] = cfg.num_workers, given
    elif routes and all(r.on_gpu for r in routes.values()):
        workers, why["num_workers"] = MIN_WORKERS, "every camera decodes on the GPU: the workers only fetch and lay out"
    else:
        workers = max(MIN_WORKERS, min(MAX_WORKERS, facts.rank_cores - 1))
        why["num_workers"] = (f"the {facts.rank_cores} cores this rank may use less one for the training loop, at "
                              f"least {MIN_WORKERS}, at most {MAX_WORKERS} (the most measured)")

    if cfg.drop_last is not None:
        drop_last, why["drop_last"] = cfg.drop_last, given
    else:  # lerobot's evaluation loaders keep every sample: an unshuffled pass drops no tail unless asked to
        drop_last = cfg.shuffle
        why["drop_last"] = "shuffle=True drops a partial last batch" if cfg.shuffle else \
            "shuffle=False keeps the partial last batch (an evaluation pass)"
    pool = pool_size(cfg)
    global_shuffle = pool is None and cfg.shuffle
    why["global_shuffle"] = "episode_pool_size='all' with shuffle" if global_shuffle else \
        f"episode_pool_size={cfg.episode_pool_size!r}" + ("" if cfg.shuffle else ", shuffle=False")

    if not facts.gpu:
        nvdec_engines, why["nvdec_engines"] = 0, "no GPU"
    elif facts.gpu_engines:
        nvdec_engines, why["nvdec_engines"] = facts.gpu_engines, "the GPU's, from the capability table"
    else:
        nvdec_engines = UNKNOWN_ENGINES
        why["nvdec_engines"] = f"{UNKNOWN_ENGINES}: the capability table does not know this GPU"

    # DALI's video decoder runs one decoder instance per pipeline thread, and one instance cannot use more than one
    # NVDEC engine: a thread per engine (H100: 7), not just num_workers. Measured on an H100 with DALI 2.4, the
    # decoder DALI creates for every sample (~8 ms) dominates and 2, 7 or 16 threads cost the same
    # (benchmarks/results/NVIDIA-H100-80GB-HBM3/).
    dali_nvdec = any(r.dali_gpu for r in routes.values())
    dali_threads = max(1, workers, nvdec_engines if dali_nvdec else 0)
    why["dali_threads"] = (f"one per NVDEC engine ({nvdec_engines}), at least num_workers" if dali_nvdec
                           else "num_workers, at least 1")

    # The decoded-frame cache keeps the pictures the workers hold: DALI's CPU decoder then runs there
    # (graph.dali_frames: the same decoder on the same clips as the graph's, the same pixels), not in the graph.
    frame_cache = bool(cfg.frame_cache_bytes or cfg.frame_cache_dir)
    why["frame_cache"] = ("frame_cache_bytes or frame_cache_dir given" if frame_cache
                          else "neither frame_cache_bytes nor frame_cache_dir")
    # A pool's open episodes: each camera the workers decode is decoded once per episode, front to back, and its
    # frames held while the episode is open (decode.episode_frames): a sample's frame asked alone costs a decode from
    # the keyframe before it and a call (2-core VM, torchcodec: 13-15x the cost a frame at 96x128 GOP 30, 9-12x at
    # 256x256 AV1). A global shuffle draws an episode's frames all along its epoch: one decoded whole for a sample
    # would be mostly thrown away.
    def whole_on_workers(route: Route) -> bool:  # a camera whose open episodes the workers may decode whole
        return route.from_segments_on_workers or (route.in_dali and route.cached)

    workers_decode = any(whole_on_workers(r) for r in routes.values())
    if cfg.episode_frames_bytes is not None:
        episode_frames, why["episode_frames"] = cfg.episode_frames_bytes, "episode_frames_bytes given"
    elif global_shuffle:
        episode_frames = 0
        why["episode_frames"] = "a global shuffle draws an episode's frames all along its epoch"
    elif not workers_decode:
        episode_frames, why["episode_frames"] = 0, "no camera decoded on the CPU by torchcodec, dali-cpu or " \
                                                   "PyAV (depth)"
    else:
        episode_frames = EPISODE_FRAMES_BYTES
        why["episode_frames"] = f"{EPISODE_FRAMES_BYTES >> 20} MiB a rank: a pool of 16 episodes of two 256x256 " \
                                "cameras up to 170 frames each"
    # An episode's camera is held only where all the pool's could be: the bound shared out over the pool's episodes
    # and the cameras decoded on the workers. Bigger ones (480p: 0.9 MB a frame) are decoded per sample, so the first
    # episodes admitted never take the room of the rest.
    workers_cameras = sum(1 for r in routes.values() if whole_on_workers(r))
    episode_frames_each = episode_frames // ((pool or 1) * max(1, workers_cameras))
    why["episode_frames_each"] = "episode_frames over the pool's episodes and the cameras decoded on the workers"
    cache_on = frame_cache or episode_frames > 0
    dali_on_workers = tuple(k for k, r in routes.items() if r.in_dali and r.cached) if cache_on else ()
    why["dali_on_workers"] = ("the decoded-frame cache or the open episodes' frames keep their pictures: DALI's CPU "
                              "decoder runs on the workers" if dali_on_workers else "no dali-cpu camera" if cache_on
                              else "no decoded-frame cache, no open episodes' frames held")
    # DALI-decoded cameras: a batch as at most this many groups, each group's clips joined into one stream, one
    # decoder each (graph.joined). A mixture's cameras, an augment hook (it draws per sample) or no camera decoded in
    # the graph: one clip per sample.
    dali_decoded = any(r.in_dali for k, r in routes.items() if k not in dali_on_workers)
    if facts.mixture:
        join_streams, why["join_streams"] = 0, "a mixture decodes one clip per sample"
    elif not dali_decoded:
        join_streams, why["join_streams"] = 0, "no camera decodes in DALI"
    elif cfg.augment is not None:
        join_streams, why["join_streams"] = 0, "augment= draws per sample: one clip per sample"
    elif cfg.join_streams is not None:
        join_streams, why["join_streams"] = cfg.join_streams, given
    elif dali_nvdec:
        join_streams, why["join_streams"] = nvdec_engines, "one stream per NVDEC engine"
    else:
        join_streams, why["join_streams"] = dali_threads, "one stream per DALI thread"

    host_frames = (not facts.cuda_batches and cfg.augment is None and cfg.resize is None and cfg.crop is None)
    why["host_frames"] = ("batches on the CPU and no graph op on images: CPU-decoded frames skip the graph"
                          if host_frames else "batches on a GPU" if facts.cuda_batches
                          else "augment=, resize or crop run in the DALI graph")
    # Depth cameras and images stored in the tables are laid out by the workers whatever the batch (the graph takes
    # video pictures only)
    always = [k for k, r in routes.items() if r.depth or r.in_tables]
    host_cameras = tuple(k for k, r in routes.items() if k in always or host_frames and (
        r.torchcodec or k in dali_on_workers))
    why["host_cameras"] = ("the cameras decoded on the workers (torchcodec, DALI's CPU decoder there)" if host_frames
                           else why["host_frames"]) + (", and depth cameras and images stored in the tables, always"
                                                       if always else "")
    # Every camera on host frames (or none at all) and batches on the CPU: a DALI graph would only pass the tables
    # through, so there is none; the tables are stacked as the batch is handed over. Measured (AV1 480p, 2 cores,
    # uint8 channels_last, alternated twice): 875-885 against 812-815 samples/s with the graph.
    host_batches = not facts.cuda_batches and len(host_cameras) == len(routes)
    why["host_batches"] = ("every camera on host frames, batches on the CPU" if host_batches
                           else "batches on a GPU" if facts.cuda_batches
                           else "cameras go through the DALI graph")
    # A small host camera laid out channels-first is kept so by the decoded-frame cache: a later epoch's layout is
    # then one copy of the batch's frames instead of a strided byte transpose of each, paid once as they are kept
    # (2-core VM, every frame from the cache, 3 alternated rounds: 1.28x samples/s at 96x128, 1.74x at 256x256). At
    # 640x480 it was no faster (0.91x epoch 2, uint8) and epoch 1 paid the copy's new pages (0.92x): not there.
    small = [k for k in host_cameras if routes[k].cached and routes[k].rgb
             and 0 < facts.frame_bytes.get(k, 0) <= KEPT_CHW_BYTES]
    kept_chw = tuple(small) if frame_cache and cfg.memory_format != "channels_last" else ()
    why["kept_chw"] = (f"host cameras laid out channels-first, frames of at most {KEPT_CHW_BYTES >> 10} KiB: later "
                       "epochs copy frames in the batch's order" if kept_chw
                       else "no decoded-frame cache" if not frame_cache
                       else "memory_format='channels_last': the batch's order is the decoder's (H, W, 3)"
                       if cfg.memory_format == "channels_last"
                       else f"no camera on host frames that the cache keeps with frames of at most "
                            f"{KEPT_CHW_BYTES >> 10} KiB")
    # Host frames are output-sized: one batch ahead per worker plus one keeps the workers busy (measured as fast as
    # 2 per worker, 2-core VM) at less memory.
    if cfg.prefetch_batches is not None:
        prefetch_batches, why["prefetch_batches"] = cfg.prefetch_batches, given
    elif host_frames:
        prefetch_batches, why["prefetch_batches"] = workers + 1, "num_workers + 1 (host frames)"
    else:
        prefetch_batches, why["prefetch_batches"] = 2 * workers, "2 x num_workers"
    why["fetch_ahead"] = "episodes admitted this many batches beyond the built ones are fetched"

    # Local fetches are CPU work (remux): one thread per core; remote ones wait, and a global shuffle's batches
    # each admit as many episodes as samples (50 ms a request: 4 threads fetched 44 samples/s, 16 threads 643).
    if cfg.fetch_workers is not None:
        fetch_workers, why["fetch_workers"] = cfg.fetch_workers, given
    elif facts.local:
        fetch_workers = min(LOCAL_FETCHES, facts.cpu_count)
        why["fetch_workers"] = f"local: one per core, at most {LOCAL_FETCHES}"
    elif global_shuffle:
        fetch_workers, why["fetch_workers"] = REMOTE_GLOBAL_FETCHES, "remote, global shuffle"
    else:
        fetch_workers, why["fetch_workers"] = REMOTE_FETCHES, "remote"

    cpu_cameras = sum(1 for r in routes.values() if r.torchcodec)
    if cfg.max_decoders is not None:
        max_decoders, why["max_decoders"] = cfg.max_decoders, given
    else:  # what the builders touch per batch: every distinct segment, every thread
        max_decoders = max(1, workers) * max(1, cpu_cameras) * min(cfg.batch_size, pool or cfg.batch_size)
        why["max_decoders"] = "num_workers x torchcodec cameras x min(batch_size, pool)"

    # An episode's camera whose segment would take more than its share of the cache (half of cache_bytes over the
    # pool's episodes and cameras, at least LONG_SEGMENT_FLOOR) is read in pieces, one per sample (hour-long
    # recordings): the cache bound then holds for any episode length. A global shuffle has the rank's whole share
    # for a pool: where that share's segments fit in half of cache_bytes each episode is fetched whole once and
    # kept; where not, every sample reads its GOPs alone.
    rank_episodes = -(-facts.episodes // facts.world_size)
    why["rank_episodes"] = "selected episodes over the ranks, rounded up"
    cameras = max(1, len(routes))
    if cfg.segment_bytes is not None:
        segment_bytes, why["segment_bytes"] = cfg.segment_bytes, given
    elif global_shuffle:
        segment_bytes = max(1, cfg.cache_bytes // (2 * rank_episodes * cameras))
        why["segment_bytes"] = "half of cache_bytes over the rank's episodes and cameras (global shuffle)"
    else:
        segment_bytes = max(LONG_SEGMENT_FLOOR, cfg.cache_bytes // (2 * (pool or 1) * cameras))
        why["segment_bytes"] = f"half of cache_bytes over the pool's episodes and cameras, at least " \
                               f"{LONG_SEGMENT_FLOOR >> 20} MiB"
    epoch_episodes = None if global_shuffle else rank_episodes
    why["epoch_episodes"] = ("a global shuffle keeps retired episodes" if global_shuffle
                             else "the rank's episodes: retired ones are kept where its epoch fits cache_bytes")
    # Pieces (a few KB each) are cut further ahead than batches are built from a remote source: the reads in flight
    # are what many batches ahead ask for (50 ms a request: 3 batches ahead read 330 samples/s, 8 batches 640).
    cut_ahead = 0 if facts.local else REMOTE_CUT_AHEAD
    why["cut_ahead"] = "local: reads take microseconds" if facts.local else "remote: reads in flight hide latency"

    # the open-decoder engine: one thread per NVDEC engine (one decoder instance cannot use more than one engine), at
    # most 4 (`decode.route.OPEN_NVDEC_THREADS`: past it the threads contend for the host)
    engine_routes = sorted({r for r in routes.values() if r.engine}, key=lambda r: r.name)
    engine_threads = {r.name: cfg.decode_threads or r.threads(nvdec_engines, workers) for r in engine_routes}
    engine_processes = _engine_processes(cfg, facts, engine_routes, nvdec_engines, why)
    for name, processes in engine_processes.items():
        engine_threads[name] = 1 if processes else engine_threads[name]
    if engine_threads:
        why["engine_threads"] = given if cfg.decode_threads else (
            f"nvdec-open: one per NVDEC engine, at most {OPEN_NVDEC_THREADS} (past it the host binds, measured); "
            "cpu-open: num_workers, at least 1")
    # The decoded-frame cache keeps a resized or cropped camera's frames at the batch's size (smaller: more of them
    # fit, and later epochs neither resize nor crop again): the workers resize and crop them with DALI's own
    # operators on the CPU (`graph.resizer`), the pixels the graph gives on the CPU. Batches on a GPU resize there
    # (kept as decoded); an augment hook runs before the resize (kept as decoded). Images stored in the tables never
    # enter the graph: the workers shape them whatever the batch.
    shaping = cfg.resize is not None or cfg.crop is not None
    shaped_on_workers = tuple(k for k, r in routes.items() if r.in_tables) if shaping else ()
    if shaped_on_workers:
        why["shaped_on_workers"] = "images stored in the tables, resized and cropped by the workers (never in the graph)"
    if shaping and frame_cache:
        tables_too = " (images stored in the tables: resized and cropped by the workers)"
        if facts.cuda_batches:
            why["shaped_on_workers"] = "batches on a GPU resize and crop there: the cache keeps frames as decoded" + \
                tables_too
        elif cfg.augment is not None:
            why["shaped_on_workers"] = "augment= runs before resize and crop: the cache keeps frames as decoded" + \
                tables_too
        else:
            shaped_on_workers = tuple(k for k, r in routes.items() if r.cached and r.rgb)
            why["shaped_on_workers"] = "the decoded-frame cache keeps CPU-decoded frames resized and cropped: the " \
                                       "workers do it (DALI's operators on the CPU, as the graph's)"
    # lerobot's image_transforms: in processes of their own for batches on the CPU, else in the iterating thread
    if cfg.image_transforms is None:
        transform_processes, why["transform_processes"] = 0, "no image_transforms"
    elif facts.cuda_batches:
        transform_processes, why["transform_processes"] = 0, "batches on a GPU: transformed there, in the loop's thread"
    elif cfg.transform_workers is not None:
        transform_processes, why["transform_processes"] = cfg.transform_workers, given
    else:
        transform_processes, why["transform_processes"] = workers, "num_workers"
    return Resolved(num_workers=workers, drop_last=drop_last, frame_cache=frame_cache,
                    transform_processes=transform_processes, pool=pool, global_shuffle=global_shuffle, nvdec_engines=nvdec_engines,
                    dali_threads=dali_threads, join_streams=join_streams, host_frames=host_frames,
                    prefetch_batches=prefetch_batches, fetch_ahead=FETCH_AHEAD_BATCHES, fetch_workers=fetch_workers,
                    max_decoders=max_decoders, rank_episodes=rank_episodes, segment_bytes=segment_bytes,
                    epoch_episodes=epoch_episodes, cut_ahead=cut_ahead, engine_threads=engine_threads,
                    engine_processes=engine_processes,
                    shaped_on_workers=shaped_on_workers, episode_frames=episode_frames,
                    episode_frames_each=episode_frames_each,
                    dali_on_workers=dali_on_workers,
                    host_cameras=host_cameras, host_batches=host_batches, kept_chw=kept_chw,
                    table_cache_dir=_table_cache_dir(cfg, facts, why), reasons=why)


def _engine_processes(cfg: LoaderConfig, facts: Facts, engines: list[Route], nvdec_engines: int,
                      why: dict[str, str]) -> dict[str, int]:
    """Each open-decoder route's decode processes: as given (`decode_processes`), else the route's rule
    (`decode.route.Route.processes`: NVDEC's engines, within the rank's cores)."""
    if not engines:
        return {}
    if cfg.decode_processes is not None:
        why["engine_processes"] = "given"
        return {r.name: cfg.decode_processes for r in engines}
    why["engine_processes"] = (f"nvdec-open: one per NVDEC engine ({nvdec_engines}), at most the rank's "
                               f"{facts.rank_cores} cores less one, where that makes 2 or more (processes scale where "
                               "threads stop: measured); cpu-open: 0, its threads")
    return {r.name: r.processes(nvdec_engines, facts.rank_cores) for r in engines}


def _table_cache_dir(cfg: LoaderConfig, facts: Facts, why: dict[str, str]) -> str | None:
    """The folder of decoded row groups holding many episodes: as given, else beside the disk tier's blocks, else
    in the user's cache (as Hugging Face datasets keeps its decoded Arrow tables)."""
    if cfg.table_cache_dir is not None:
        why["table_cache_dir"] = "given"
        return None if cfg.table_cache_dir == TABLE_CACHE_OFF else cfg.table_cache_dir
    if cfg.disk_cache_dir is not None:
        why["table_cache_dir"] = "beside disk_cache_dir's blocks, on the node's local drive"
        return posixpath.join(cfg.disk_cache_dir, "tables")
    if facts.user_cache_dir is not None:
        why["table_cache_dir"] = "this user's cache folder ($XDG_CACHE_HOME or ~/.cache, or DALI_STREAM_CACHE)"
        return posixpath.join(facts.user_cache_dir, "tables")
    why["table_cache_dir"] = "no user cache folder (no home directory): kept in memory"
    return None
