"""Resolvers of `loader.resolve` for decoded frames: which are held and for how long (`held_frames`: the
decoded-frame cache, a pool's open episodes' frames), where each camera's are decoded and laid out into the batch,
and whether a DALI graph takes it at all (`batch_layout`), and in which shape and order the cache keeps them
(`kept_frames`). Pure (`loader.resolve_base`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config import LoaderConfig
from ..decode.route import Route
from .resolve_base import Facts, Part
from .resolve_threads import GIVEN, Sampling, Threads

KEPT_CHW_BYTES = 256 << 10  # a host camera's frames at most this size are kept channels-first (`kept_chw`)
EPISODE_FRAMES_BYTES = 1 << 30  # a pool's open episodes' decoded frames held at most, per rank (`decode.open_episodes`)


def _whole_on_workers(route: Route) -> bool:
    """A camera whose open episodes the workers may decode whole (`decode.open_episodes`)."""
    return route.from_segments_on_workers or (route.in_dali and route.cached)


@dataclass(frozen=True, kw_only=True)
class Held(Part):
    frame_cache: bool = field(metadata={  # `decode.frame_cache`
        "what": "decoded frames are kept for later epochs (frame_cache_bytes, frame_cache_dir)"})
    episode_frames: int = field(metadata={"what": (  # `decode.open_episodes`
        "bytes of a pool's open episodes' decoded frames held while they stay open, each camera decoded on the CPU "
        "once per episode, front to back (0: off)")})
    episode_frames_each: int = field(metadata={
        "what": "an open episode's camera is held where its decoded frames take at most this"})


def held_frames(cfg: LoaderConfig, facts: Facts, drawn: Sampling) -> Held:
    """Whether decoded frames are kept for later epochs, and the bytes of a pool's open episodes' frames held."""
    routes, why = facts.routes, {}
    frame_cache = bool(cfg.frame_cache_bytes or cfg.frame_cache_dir)
    why["frame_cache"] = ("frame_cache_bytes or frame_cache_dir given" if frame_cache
                          else "neither frame_cache_bytes nor frame_cache_dir")
    # A pool's open episodes: each camera the workers decode is decoded once per episode, front to back, and its
    # frames held while the episode is open (decode.open_episodes): a sample's frame asked alone costs a decode from
    # the keyframe before it and a call (2-core VM, torchcodec: 13-15x the cost a frame at 96x128 GOP 30, 9-12x at
    # 256x256 AV1). A global shuffle draws an episode's frames all along its epoch: one decoded whole for a sample
    # would be mostly thrown away.
    if cfg.episode_frames_bytes is not None:
        episode_frames, why["episode_frames"] = cfg.episode_frames_bytes, "episode_frames_bytes given"
    elif drawn.global_shuffle:
        episode_frames = 0
        why["episode_frames"] = "a global shuffle draws an episode's frames all along its epoch"
    elif not any(_whole_on_workers(r) for r in routes.values()):
        episode_frames, why["episode_frames"] = 0, "no camera decoded on the CPU by torchcodec, dali-cpu or " \
                                                   "PyAV (depth)"
    else:
        episode_frames = EPISODE_FRAMES_BYTES
        why["episode_frames"] = f"{EPISODE_FRAMES_BYTES >> 20} MiB a rank: a pool of 16 episodes of two 256x256 " \
                                "cameras up to 170 frames each"
    # An episode's camera is held only where all the pool's could be: the bound shared out over the pool's episodes
    # and the cameras decoded on the workers. Bigger ones (480p: 0.9 MB a frame) are decoded per sample, so the first
    # episodes admitted never take the room of the rest.
    workers_cameras = sum(1 for r in routes.values() if _whole_on_workers(r))
    episode_frames_each = episode_frames // ((drawn.pool or 1) * max(1, workers_cameras))
    why["episode_frames_each"] = "episode_frames over the pool's episodes and the cameras decoded on the workers"
    return Held(frame_cache=frame_cache, episode_frames=episode_frames, episode_frames_each=episode_frames_each,
                why=why)


@dataclass(frozen=True, kw_only=True)
class Layout(Part):
    dali_on_workers: tuple[str, ...] = field(metadata={"what": (  # `graph.dali_on_workers`
        "cameras DALI's CPU decoder decodes on the decoding threads (for the decoded-frame cache and the open "
        "episodes' frames)")})
    join_streams: int = field(metadata={"what": (  # `graph.joined`
        "groups a batch's clips are decoded in, one decoder each, for cameras DALI decodes (0: a clip a sample)")})
    host_frames: bool = field(metadata={  # `graph.host`
        "what": "frames decoded on the CPU go straight into the batch, skipping DALI's graph"})
    host_cameras: tuple[str, ...] = field(metadata={  # never in the graph
        "what": "cameras whose frames the decoding threads lay out into the batch (host frames)"})
    host_batches: bool = field(metadata={
        "what": "no DALI graph at all: every camera on host frames and batches on the CPU"})
    prefetch_batches: int = field(metadata={"what": "batches built ahead of the training loop"})
    host_buffers: int = field(metadata={  # `graph.buffers.BufferPool`
        "what": "host-frame buffers of one shape kept for reuse: those alive at once"})


def batch_layout(cfg: LoaderConfig, facts: Facts, threads: Threads, held: Held) -> Layout:
    """Where each camera's frames are decoded and laid out (in the DALI graph, or by the workers: host frames),
    whether a graph takes the batch at all, the batches built ahead and the host-frame buffers they keep alive."""
    routes, why = facts.routes, {}
    # The decoded-frame cache keeps the pictures the workers hold: DALI's CPU decoder then runs there
    # (graph.dali_on_workers: the same decoder on the same clips as the graph's, the same pixels), not in the graph.
    cache_on = held.frame_cache or held.episode_frames > 0
    dali_on_workers = tuple(k for k, r in routes.items() if r.in_dali and r.cached) if cache_on else ()
    why["dali_on_workers"] = ("the decoded-frame cache or the open episodes' frames keep their pictures: DALI's CPU "
                              "decoder runs on the workers" if dali_on_workers else "no dali-cpu camera" if cache_on
                              else "no decoded-frame cache, no open episodes' frames held")
    join_streams, why["join_streams"] = _join_streams(cfg, facts, threads, dali_on_workers)
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
    # Host frames are output-sized: one batch ahead per worker plus one keeps the workers busy (measured as fast as
    # 2 per worker, 2-core VM) at less memory.
    if cfg.prefetch_batches is not None:
        prefetch_batches, why["prefetch_batches"] = cfg.prefetch_batches, GIVEN
    elif host_frames:
        prefetch_batches, why["prefetch_batches"] = threads.num_workers + 1, "num_workers + 1 (host frames)"
    else:
        prefetch_batches, why["prefetch_batches"] = 2 * threads.num_workers, "2 x num_workers"
    # host-frame buffers alive at once, per host camera (cameras of one shape share them)
    host_buffers = (prefetch_batches + 3) * max(1, len(host_cameras))
    why["host_buffers"] = ("(prefetch_batches + 3) x host cameras, at least 1: the batches built ahead "
                           "(prefetch_batches + 1), the one DALI holds and the one the caller holds, per host camera")
    return Layout(dali_on_workers=dali_on_workers, join_streams=join_streams, host_frames=host_frames,
                  host_cameras=host_cameras, host_batches=host_batches, prefetch_batches=prefetch_batches,
                  host_buffers=host_buffers, why=why)


def _join_streams(cfg: LoaderConfig, facts: Facts, threads: Threads, dali_on_workers: tuple[str, ...]
                  ) -> tuple[int, str]:
    """DALI-decoded cameras: a batch as at most this many groups, each group's clips joined into one stream, one
    decoder each (graph.joined), and why. A mixture's cameras, an augment hook (it draws per sample) or no camera
    decoded in the graph: one clip per sample."""
    routes = facts.routes
    if facts.mixture:
        return 0, "a mixture decodes one clip per sample"
    if not any(r.in_dali for k, r in routes.items() if k not in dali_on_workers):
        return 0, "no camera decodes in DALI"
    if cfg.augment is not None:
        return 0, "augment= draws per sample: one clip per sample"
    if cfg.join_streams is not None:
        return cfg.join_streams, GIVEN
    if any(r.dali_gpu for r in routes.values()):
        return threads.nvdec_engines, "one stream per NVDEC engine"
    return threads.dali_threads, "one stream per DALI thread"


@dataclass(frozen=True, kw_only=True)
class Kept(Part):
    kept_chw: tuple[str, ...] = field(metadata={  # the others kept (H, W, 3)
        "what": "cameras whose frames the decoded-frame cache keeps channels-first, (3, H, W): the batch's own order"})
    shaped_on_workers: tuple[str, ...] = field(metadata={  # `graph.resizer`
        "what": "cameras resized and cropped by the decoding threads, before the decoded-frame cache"})


def kept_frames(cfg: LoaderConfig, facts: Facts, held: Held, layout: Layout) -> Kept:
    """In which order (channels-first or as decoded) and at which size (the batch's, or as decoded) the
    decoded-frame cache keeps each camera's frames; images stored in the tables are shaped by the workers always."""
    routes, why = facts.routes, {}
    frame_cache = held.frame_cache
    # A small host camera laid out channels-first is kept so by the decoded-frame cache: a later epoch's layout is
    # then one copy of the batch's frames instead of a strided byte transpose of each, paid once as they are kept
    # (2-core VM, every frame from the cache, 3 alternated rounds: 1.28x samples/s at 96x128, 1.74x at 256x256). At
    # 640x480 it was no faster (0.91x epoch 2, uint8) and epoch 1 paid the copy's new pages (0.92x): not there.
    small = [k for k in layout.host_cameras if routes[k].cached and routes[k].rgb
             and 0 < facts.frame_bytes.get(k, 0) <= KEPT_CHW_BYTES]
    kept_chw = tuple(small) if frame_cache and cfg.memory_format != "channels_last" else ()
    why["kept_chw"] = (f"host cameras laid out channels-first, frames of at most {KEPT_CHW_BYTES >> 10} KiB: later "
                       "epochs copy frames in the batch's order" if kept_chw
                       else "no decoded-frame cache" if not frame_cache
                       else "memory_format='channels_last': the batch's order is the decoder's (H, W, 3)"
                       if cfg.memory_format == "channels_last"
                       else f"no camera on host frames that the cache keeps with frames of at most "
                            f"{KEPT_CHW_BYTES >> 10} KiB")
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
    return Kept(kept_chw=kept_chw, shaped_on_workers=shaped_on_workers, why=why)
