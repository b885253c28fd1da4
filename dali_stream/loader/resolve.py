"""Every setting a loader derives, from its `LoaderConfig` and what the source and the node are: pure functions, one
per concern, composed by `resolve`.

`resolve(config, facts)` is the one place each default is worked out (threads, streams joined per batch, batches
ahead, fetch threads, decoders kept open, the piece limit, ...), each with the reason it has that value; the
loader's stages are built from what it returns (`loader.assemble`) and `inspect`/`bench` print it
(`Resolved.describe`). Each concern is a resolver returning its values and their reasons (a `resolve_base.Part`):
how a rank draws and its threads, engines and transforms (`loader.resolve_threads`), the decoded frames held and
the batch's layout (`loader.resolve_frames`), fetching and remote reads (`loader.resolve_fetch`). Nothing here opens
a file, probes a device or imports torch or DALI: `Facts` carries what those found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..config import LoaderConfig
from .resolve_base import Facts, Part
from .resolve_fetch import LONG_SEGMENT_FLOOR, REMOTE_CUT_AHEAD, fetching
from .resolve_frames import EPISODE_FRAMES_BYTES, KEPT_CHW_BYTES, batch_layout, held_frames, kept_frames
from .resolve_threads import MAX_WORKERS, MIN_WORKERS, engines, sampling, transforms, worker_threads

__all__ = ["EPISODE_FRAMES_BYTES", "KEPT_CHW_BYTES", "LONG_SEGMENT_FLOOR", "MAX_WORKERS", "MEANING", "MIN_WORKERS",
           "REMOTE_CUT_AHEAD", "Facts", "Resolved", "nvdec_joins", "resolve"]


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
    "host_buffers": "host-frame buffers of one shape kept for reuse: those alive at once",
    "augment_seed": "what augment='s numbers per sample and camera are drawn from (None: no augment= hook)",
    "remote_concurrency": "remote requests this rank has in flight at once, its part of the node's remote_concurrency "
                          "(None: no limit but the fetch threads')",
}


@dataclass(frozen=True)
class Resolved:
    """The derived settings (module doc); `reasons[name]` says why each has its value, `MEANING[name]` what it is.
    Every field is some resolver's (`resolve`: each comes from exactly one part)."""

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
    engine_threads: Mapping[str, int]  # open-decoder engine route -> threads
    engine_processes: Mapping[str, int]  # route -> decode processes (0: threads)
    frame_cache: bool  # decoded frames kept for later epochs (`decode.frame_cache`)
    transform_processes: int  # processes lerobot's image_transforms run in (0: the iterating thread)
    shaped_on_workers: tuple[str, ...]  # cameras resized and cropped before the decoded-frame cache keeps them
    episode_frames: int  # bytes of the pool's open episodes' frames held (`decode.open_episodes`; 0: off)
    episode_frames_each: int  # an episode's camera is held where its frames take at most this
    dali_on_workers: tuple[str, ...]  # dali-cpu cameras decoded on the workers (the decoded-frame cache keeps them)
    host_cameras: tuple[str, ...]  # cameras on host frames: laid out by the workers, never in the graph
    host_batches: bool  # no DALI graph: every camera on host frames, batches on the CPU
    kept_chw: tuple[str, ...]  # cameras the decoded-frame cache keeps as (3, H, W), the others (H, W, 3)
    table_cache_dir: str | None  # decoded shared row groups' folder (`fetch.decoded_groups`; None: memory)
    host_buffers: int  # host-frame buffers of one shape kept for reuse (`graph.buffers.BufferPool`)
    augment_seed: int | None  # what the augment= hook's numbers are drawn from (`graph.batches.BuildSpec`; None: no hook)
    remote_concurrency: int | None  # this rank's remote requests in flight (`source.storage.RemoteOptions`; None: no limit)
    reasons: Mapping[str, str]

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
    """Every derived setting (module doc): each concern's resolver, fed the settings, the facts and the parts it
    follows from."""
    drawn = sampling(config)
    threads = worker_threads(config, facts, drawn)
    held = held_frames(config, facts, drawn)
    layout = batch_layout(config, facts, threads, held)
    return _merged(threads, drawn, held, layout, kept_frames(config, facts, held, layout),
                   fetching(config, facts, drawn), engines(config, facts, threads), transforms(config, facts, threads))


def _merged(*parts: Part) -> Resolved:
    """One `Resolved` of the parts' values and reasons, in the parts' order; a value two parts give is refused."""
    values: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    for part in parts:
        found = part.values()
        twice = sorted(set(found) & set(values))
        if twice:
            raise ValueError(f"derived settings {twice} resolved twice (by {type(part).__name__} again)")
        values.update(found)
        reasons.update(part.why)
    return Resolved(**values, reasons=reasons)
