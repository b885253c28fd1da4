"""The loader's settings in six groups: each group a frozen dataclass that declares its settings (type, default and
help, once) and checks them. `LoaderConfig` (dali_stream/config.py) is the six at once, behind flat keywords.

| group (`config.<group>`) | class | what it settles |
|---|---|---|
| sampling | `SamplingConfig` | what a batch is and which samples an epoch draws, in which order |
| decoding | `DecodeConfig` | how each camera is decoded, by how many threads or processes, and how frames are checked |
| output | `OutputConfig` | where batches land and what their images are: dtype, layout, resize/crop, normalisation, |
| | | augment= and image_transforms= |
| caches | `CacheConfig` | the threads that fetch and decode ahead, and the bounds of what is kept in memory and on |
| | | local drives |
| storage | `StorageConfig` | where the bytes are and how remote ones are read (retries, limits, a node's disk tier) |
| world | `WorldConfig` | this process's place in a multi-process job |

A field's annotation is the type a caller may pass (a list for a tuple, a torch dtype for its name): `StreamLoader`'s
keywords are typed from it. A setting of a few words is typed `Literal[...] | str`: the Literal names the choices
(an editor offers them, the CLI's flags take them as `choices`), `str` lets a word held in a variable through. Each group's `__post_init__` refuses a bad value with a `ConfigError` naming it and
stores the normal form the loader reads: tuples for lists (and for numpy arrays and torch tensors), read-only mappings,
torch's objects by name, Python's numbers for numpy's (`config_values`: `np.int64(4)` is the batch size 4).
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Callable, Literal, Mapping, Optional, Sequence, Union, get_args

from .config_values import as_bool, as_float, as_int, as_list, episode_indices, is_int
from .config_values import offsets as _offsets
from .errors import ConfigError

Decode = Literal["auto", "gpu", "cpu", "cpu-open", "dali-cpu"]
NvdecEngine = Literal["auto", "dali", "open"]
ImageDtype = Literal["float32", "uint8"]
MemoryFormat = Literal["contiguous", "channels_last"]
DepthOutputUnit = Literal["mm", "m"]
# torch's objects a setting takes (torch.device, torch.uint8, torch.channels_last), for a type checker: torch is not
# imported by the settings, so any value passes there and `__post_init__` checks it
TorchDevice = Any
TorchDtype = Any
TorchMemoryFormat = Any
DECODE_CHOICES: tuple[str, ...] = get_args(Decode)
NVDEC_ENGINES: tuple[str, ...] = get_args(NvdecEngine)
IMAGE_DTYPES: tuple[str, ...] = get_args(ImageDtype)
MEMORY_FORMATS: tuple[str, ...] = get_args(MemoryFormat)
DEPTH_OUTPUT_UNITS: tuple[str, ...] = get_args(DepthOutputUnit)
DEFAULT_CACHE_BYTES = 4 << 30
DEFAULT_INDEX_BYTES = 256 << 20  # ~9 bytes a frame of lerobot-written H.264/HEVC: ~29 million frames
DEFAULT_FOOTER_BYTES = 128 << 20  # ~8x a footer's serialized size: ~20 data files of 1,000 row groups
GLOBAL_POOL = "all"  # episode_pool_size for a global shuffle
TABLE_CACHE_OFF = "off"  # table_cache_dir: no folder, decoded shared row groups kept in memory only
fix = object.__setattr__  # how a frozen group stores a value's normal form


def frozen_reduce(self: Any) -> tuple:
    """`__reduce__` of the frozen settings (the groups, LoaderConfig, a mixture's Member): pickled and deep-copied
    through the constructor, their mappings (frozen as `MappingProxyType` views, which neither pickle nor deepcopy
    takes) as dicts, frozen again there. A spawned process (torch's DataLoader workers on macOS, or with
    `multiprocessing_context="spawn"`/"forkserver") gets its settings this way."""
    return _rebuilt, (type(self), {f.name: _thawed(getattr(self, f.name)) for f in fields(self) if f.init})


def _rebuilt(cls: type, values: dict[str, Any]) -> Any:
    return cls(**values)


def _thawed(value: Any) -> Any:
    return {k: _thawed(v) for k, v in value.items()} if isinstance(value, MappingProxyType) else value


def _s(default: Any, help: str, *, factory: Callable[[], Any] | None = None, engine: bool = False) -> Any:
    """A setting's field: its default (or `factory`) and help; `engine`: it sizes a form of the open-decoder engine
    (`ENGINE_SETTINGS`)."""
    meta: dict[str, Any] = {"help": help, **({"engine": True} if engine else {})}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class SamplingConfig:
    """What a batch is and which samples an epoch draws: batch size, windows (delta_timestamps), the episode pool and
    shuffle, the episodes selected, and how far a frame's time may stray from the one asked."""

    __reduce__ = frozen_reduce

    batch_size: int = _s(16, "samples per batch (per rank)")
    delta_timestamps: Mapping[str, Sequence[float]] = _s(
        None, "feature key -> offsets in seconds; those keys get a time axis and `<key>_is_pad`", factory=dict)
    tolerance_s: float = _s(1e-4, "largest allowed gap between a queried timestamp and the frame returned "
                                  "(lerobot's default; raise it for a camera whose clock jitters)")
    drop_last: Optional[bool] = _s(None, "drop the last partial batch of each epoch (default: True when shuffling, "
                                         "False for an evaluation pass, shuffle=False, so it yields every frame)")
    episode_pool_size: Union[int, Literal["all"], str] = _s(
        16, "whole episodes each rank keeps open and samples across; 'all': a global shuffle (every sample drawn "
            "from anywhere in the rank's share: docs/sampling.md)")
    seed: int = _s(0, "shuffling seed; plans depend only on (seed, epoch, rank, position)")
    shuffle: bool = _s(True, "False for an evaluation pass: every frame once, episodes and frames in order (ranks "
                             "get contiguous blocks of episodes)")
    partition: str = _s("rank", "how a shuffled epoch's episodes split over ranks: 'rank' (afresh each epoch over "
                                "all ranks) or 'node' (each node keeps the same share every epoch, split afresh over "
                                "its ranks: with disk_cache_dir a node's drive holds ~1/nodes of a remote dataset; "
                                "docs/sampling.md#node-partition)")
    episodes: Optional[Sequence[int]] = _s(None, "episode indices to use (a train/val split); the others are "
                                                 "never drawn or fetched")
    episode_filter: Optional[Callable[[Mapping[str, Any]], bool]] = _s(
        None, "lerobot's: a predicate over each episode's row of meta/episodes (every column but the per-episode "
              "stats: episode_index, length, tasks, ...), e.g. lambda ep: ep['length'] >= 100; the episodes it keeps, "
              "intersected with `episodes` where both are given (one dataset; a mixture's members take `episodes`)")
    max_episodes: Optional[int] = _s(None, "use at most this many episodes (the first ones of `episodes`, or of "
                                           "the dataset)")
    drop_n_first_frames: int = _s(0, "never draw an episode's first n frames as samples (they still serve as "
                                     "window context), as lerobot's EpisodeAwareSampler")
    drop_n_last_frames: int = _s(0, "never draw an episode's last n frames as samples")

    def __post_init__(self) -> None:
        deltas = self.delta_timestamps
        if not isinstance(deltas, Mapping):
            raise ConfigError(f"`delta_timestamps` must map feature keys to lists of offsets in seconds. Found: "
                              f"{deltas!r}")
        fix(self, "delta_timestamps", MappingProxyType({str(k): _offsets(k, v) for k, v in deltas.items()}))
        _integer(self, "batch_size", 1)
        if not (isinstance(self.episode_pool_size, str) and self.episode_pool_size == GLOBAL_POOL):
            _integer(self, "episode_pool_size", 1, "or 'all' (a global shuffle)")
        for name in ("seed", "drop_n_first_frames", "drop_n_last_frames"):
            _integer(self, name, 0)
        _optional_integers(self, max_episodes=1)
        _booleans(self, "shuffle", *(() if self.drop_last is None else ("drop_last",)))
        tolerance = as_float(self.tolerance_s)
        if not (isinstance(tolerance, float) and math.isfinite(tolerance) and tolerance >= 0):
            raise ConfigError(f"`tolerance_s` must be a number >= 0. Found: {self.tolerance_s!r}")
        fix(self, "tolerance_s", tolerance)
        if self.episodes is not None:
            fix(self, "episodes", episode_indices(self.episodes))
        if self.episode_filter is not None and not callable(self.episode_filter):
            raise ConfigError(f"`episode_filter` must be a function of an episode's row (a dict) returning True to "
                              f"keep it, as lerobot's. Found: {self.episode_filter!r}")


@dataclass(frozen=True, kw_only=True)
class DecodeConfig:
    """How each camera is decoded (the route, the NVDEC engine), by how many threads or processes, how a batch's DALI
    streams are joined, how many CPU decoders stay open, and whether each decoded frame's time is checked."""

    __reduce__ = frozen_reduce

    decode: Union[Decode, str, Mapping[str, Union[Decode, str]]] = _s(
        "auto", "auto | gpu | cpu | cpu-open | dali-cpu, or camera key -> one of those (see "
                "dali_stream.decode.routes; cpu-open: FFmpeg's decoders kept open and fed packets, the open-decoder "
                "engine on the CPU; dali-cpu: DALI's CPU decoder for VP8/VP9/MJPEG cameras, torchcodec for the rest)")
    nvdec_engine: Union[NvdecEngine, str] = _s(
        "auto", "which engine decodes NVDEC cameras: dali (DALI's fn.decoders.video, a decoder per stream), "
                "open (PyNvVideoCodec's decoders kept open for the loader's life and fed packets: "
                "dali_stream/decode/engine.py; pip install '.[nvdec]' in the checkout), or auto (dali until the open "
                "engine is proven on this node: decode/proven.py)")
    decode_threads: Optional[int] = _s(
        None, "threads of the open-decoder engine, each with its own decoders (default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py)",
        engine=True)
    decode_processes: Optional[int] = _s(
        None, "processes the open-decoder engine decodes in, each one thread with its decoders kept open (0: its "
              "threads in the loader's process; default derived: `dali-stream inspect` shows the value and why, "
              "dali_stream/decode/route.py)", engine=True)
    join_streams: Optional[int] = _s(
        None, "DALI-decoded cameras: a batch is decoded in at most this many groups, each group's clips of a "
              "camera joined into one stream, one decoder each (DALI 2.4 opens a decoder per stream: ~8 ms "
              "on NVDEC); 0: one clip per sample, as with augment= (graph/joined.py); default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py")
    check_frames: bool = _s(True, "check every torchcodec-decoded frame's presentation time against the planned "
                                  "frame's and raise WrongFrameError on a mismatch (one comparison a frame)")
    max_decoders: Optional[int] = _s(None, "CPU (torchcodec) decoders kept open for reuse, least recently used "
                                           "closed first (default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py)")

    def __post_init__(self) -> None:
        if isinstance(self.decode, Mapping):
            fix(self, "decode", MappingProxyType(dict(self.decode)))
        elif self.decode not in DECODE_CHOICES:
            raise ConfigError(f"decode={self.decode!r} is not one of {DECODE_CHOICES} (or a dict camera key -> one "
                              "of those)")
        if self.nvdec_engine not in NVDEC_ENGINES:
            raise ConfigError(f"`nvdec_engine` must be one of {NVDEC_ENGINES}. Found: {self.nvdec_engine!r}")
        _optional_integers(self, join_streams=0, decode_threads=1, decode_processes=0, max_decoders=1)
        _booleans(self, "check_frames")


# The settings that size a form of the open-decoder engine (`_s(..., engine=True)`), each None by default (derived:
# `loader.resolve_threads.engines`): bench takes each as a flag and leaves them derived where it runs the CPU route.
ENGINE_SETTINGS: tuple[str, ...] = tuple(f.name for f in fields(DecodeConfig) if f.metadata.get("engine"))


@dataclass(frozen=True, kw_only=True)
class OutputConfig:
    """Where batches land and what their images are: the device, dtype and memory layout, depth's unit, resize and
    crop, normalisation, augment= in the DALI graph and lerobot's image_transforms= (and the processes they run in)."""

    __reduce__ = frozen_reduce

    device: Union[str, TorchDevice, None] = _s(
        None, "where batches land: cpu, cuda or cuda:N, or a torch.device (default: cuda when DALI and torch both see "
              "a GPU, else cpu)")
    image_dtype: Union[ImageDtype, TorchDtype] = _s(
        "float32", "float32 (in [0, 1], lerobot's default) or uint8 (or torch.float32 / torch.uint8)")
    memory_format: Union[MemoryFormat, TorchMemoryFormat] = _s(
        "contiguous", "how camera tensors (..., 3, H, W) are stored: contiguous (CHW, as lerobot's) or "
                      "channels_last (HWC storage, torch.channels_last for 4-D batches; same shape and values): the "
                      "CPU route then skips the CHW transpose, and convnets run channels_last as is")
    depth_output_unit: DepthOutputUnit = _s(
        "mm", "depth cameras (lerobot's depth maps: 12-bit codes in a grey video) come as (..., 1, H, W) float32 "
              "depth in this unit, 'mm' (whole millimetres, lerobot's default) or 'm', and their stats with them; "
              "image_dtype, resize, crop, mean/std and augment= apply to RGB cameras only")
    resize: Optional[Sequence[int]] = _s(None, "(height, width) every RGB camera image is resized to "
                                               "(antialiased), in the DALI graph")
    crop: Optional[Sequence[int]] = _s(None, "(height, width) of a centre crop, after resize")
    mean: Union[float, Sequence[float], None] = _s(None, "per-channel mean in [0, 1] units: (x - mean) / std "
                                                         "(float32 only)")
    std: Union[float, Sequence[float], None] = _s(None, "per-channel standard deviation, with mean")
    augment: Optional[Callable[[Any, str, Any], Any]] = _s(
        None, "augment(video, key, rand) -> video, inside the DALI graph on each camera's decoded FHWC uint8 "
              "frames (on the GPU where the camera is); draw every random parameter from `rand` (16 uniform "
              "numbers per sample, a pure function of seed, epoch, batch, sample, camera) so a resumed run "
              "augments as an uninterrupted one (dali_stream.augment: a ready one)")
    image_transforms: Optional[Callable[[Any], Any]] = _s(
        None, "lerobot's image_transforms: a callable (e.g. torchvision.transforms.v2.Compose) applied to each "
              "sample's camera tensor ((3, H, W), or (T, 3, H, W) with a window) after resize/crop/normalise: in "
              "transform_workers processes for batches on the CPU, else in the iterating thread; torch's RNG is seeded "
              "per (seed, epoch, batch, sample, camera) around each call, so a resumed run transforms as an "
              "uninterrupted one (dali_stream/graph/transforms.py)")
    transform_workers: Optional[int] = _s(
        None, "processes image_transforms runs in for batches on the CPU (default num_workers; 0: in the iterating "
              "thread, where torch spreads each op over the cores: better for large images on few cores, "
              "docs/configuration.md#transforms)")

    def __post_init__(self) -> None:
        if self.device is not None:  # a torch.device reads as "cpu", "cpu:0", "cuda:1" (checked by decode.device)
            fix(self, "device", str(self.device))
        if not isinstance(self.image_dtype, str):  # torch.uint8 / torch.float32, by name
            fix(self, "image_dtype", str(self.image_dtype).removeprefix("torch."))
        if self.image_dtype not in IMAGE_DTYPES:
            raise ConfigError(f"`image_dtype` must be 'float32' or 'uint8' (or torch.float32 / torch.uint8). Found: "
                              f"{self.image_dtype!r}")
        if not isinstance(self.memory_format, str):  # torch.channels_last / torch.contiguous_format, by name
            named = {"torch.channels_last": "channels_last", "torch.contiguous_format": "contiguous"}
            fix(self, "memory_format", named.get(str(self.memory_format), self.memory_format))
        if self.memory_format not in MEMORY_FORMATS:
            raise ConfigError(f"`memory_format` must be 'contiguous' or 'channels_last' (or torch.channels_last / "
                              f"torch.contiguous_format). Found: {self.memory_format!r}")
        if self.depth_output_unit not in DEPTH_OUTPUT_UNITS:
            raise ConfigError(f"`depth_output_unit` must be 'mm' or 'm' (lerobot's values). Found: "
                              f"{self.depth_output_unit!r}")
        for name, number in (("resize", as_int), ("crop", as_int), ("mean", as_float), ("std", as_float)):
            value = as_list(getattr(self, name))  # a list, array or tensor as a tuple; numpy's numbers as Python's
            if isinstance(value, (list, tuple)):
                fix(self, name, tuple(number(v) for v in value))
            elif name in ("mean", "std"):
                fix(self, name, number(value))
        _optional_integers(self, transform_workers=0)
        if self.image_transforms is not None and not callable(self.image_transforms):
            raise ConfigError(f"`image_transforms` must be a callable taking and returning an image tensor (e.g. "
                              f"torchvision.transforms.v2.Compose([...])). Found: {self.image_transforms!r}")
        if self.augment is not None and not callable(self.augment):
            raise ConfigError(f"`augment` must be a function (video, key, rand) -> video. Found: {self.augment!r}")


@dataclass(frozen=True, kw_only=True)
class CacheConfig:
    """The threads that fetch and decode ahead (num_workers, prefetch_batches, fetch_workers) and the bounds of what
    is kept: fetched episodes, long episodes' pieces, MP4 indexes, parquet footers, decoded frames (in memory, on a
    local drive, an open episode's), decoded row groups on a local drive."""

    __reduce__ = frozen_reduce

    num_workers: Optional[int] = _s(None, "threads that fetch and CPU-decode batches ahead (0: in the calling thread; "
                                          "default derived from the cores this rank may use: `dali-stream inspect` "
                                          "shows the value and why, dali_stream/loader/resolve.py)")
    prefetch_batches: Optional[int] = _s(None, "batches prepared ahead of DALI (default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py)")
    fetch_workers: Optional[int] = _s(None, "threads fetching admitted episodes in the background, and as many "
                                            "cutting long episodes' pieces ahead of the builders (0: when a batch "
                                            "needs it; default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py)")
    cache_bytes: int = _s(DEFAULT_CACHE_BYTES, "bound of the fetched episodes kept in memory (compressed segments "
                                               "and rows, their images stored in the tables included); episodes "
                                               "open in the pool are never evicted")
    segment_bytes: Optional[int] = _s(None, "an episode's camera whose compressed bytes exceed this (an hour-long "
                                            "recording) is not fetched whole: each sample reads a piece, its frames' "
                                            "GOPs (default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py)")
    index_bytes: int = _s(DEFAULT_INDEX_BYTES, "bound of the video files' MP4 sample indexes kept in memory (~9 bytes "
                                               "a frame of lerobot's H.264/HEVC); least recently used files are "
                                               "indexed again when needed (docs/memory.md)")
    footer_bytes: int = _s(DEFAULT_FOOTER_BYTES, "bound of the data files' parsed parquet footers kept open (~8x a "
                                                 "footer's size on disk); least recently used files are reopened "
                                                 "when needed (docs/memory.md)")
    frame_cache_bytes: int = _s(0, "bound of decoded frames kept in memory for later epochs (0: off): each "
                                   "(video file, frame) decoded on the CPU (routes torchcodec, cpu-open, dali-cpu, "
                                   "depth; images stored in the tables, table-images) is kept "
                                   "while there is room, as decoded (resized and cropped first where set and "
                                   "batches are on the CPU; before dtype, normalisation, augment), and read instead of "
                                   "decoded again: bit for bit the same batches (docs/memory.md#decoded-frames)")
    frame_cache_dir: Optional[str] = _s(None, "a local folder where decoded frames past frame_cache_bytes are kept, "
                                              "one file each, read back into arrays of their own; ranks of a node and later "
                                              "runs share it (a changed video file is a new name: never stale); "
                                              "the spill leaves the drive 5% free (at least 1 GiB)")
    episode_frames_bytes: Optional[int] = _s(
        None, "bound of the decoded frames of a pool's open episodes, held while they stay open: each camera decoded "
              "on the CPU (torchcodec, dali-cpu, depth) is decoded once per episode, front to back, instead of from a "
              "keyframe for every sample (0: off; a segment that does not fit is decoded per sample; "
              "docs/memory.md#open-episodes-frames; default derived: `dali-stream inspect` shows the value and why, "
              "dali_stream/loader/resolve.py)")
    table_cache_dir: Optional[str] = _s(None, "a local folder where parquet row groups holding many episodes are "
                                              "kept decoded, read memory-mapped (lerobot's dataset tools and its "
                                              "v2.1 converter write a data file as one group): each decoded once a "
                                              "node, for every rank and later run; and where images stored in the "
                                              "tables of open episodes past cache_bytes are kept; 'off': the last 2 "
                                              "groups stay in memory, the others decoded again per episode, and "
                                              "the images in memory (default derived: "
                                              "`dali-stream inspect` shows the value and why, "
                                              "dali_stream/loader/resolve.py)")
    table_cache_bytes: Optional[int] = _s(None, "bound of table_cache_dir's decoded row groups on the drive, the "
                                                "least recently read deleted past it, by any rank of the node; None: "
                                                "no bound but the drive's floor (5%, at least 1 GiB, kept free)")

    def __post_init__(self) -> None:
        for name in ("cache_bytes", "index_bytes", "footer_bytes"):
            _integer(self, name, 1)
        _integer(self, "frame_cache_bytes", 0)
        _optional_integers(self, num_workers=0, prefetch_batches=0, fetch_workers=0, episode_frames_bytes=0,
                           segment_bytes=1, table_cache_bytes=1)
        _local_folder(self, "frame_cache_dir", "decoded frames are written there and read back memory-mapped")
        _local_folder(self, "table_cache_dir", "decoded parquet row groups are kept there ('off': none)")


@dataclass(frozen=True, kw_only=True)
class StorageConfig:
    """Where the bytes are and how they are read: a Hub revision, data files under another root, fsspec's options,
    the remote reads' retries, time limits and concurrency, and a node-local disk tier for a remote dataset."""

    __reduce__ = frozen_reduce

    revision: Optional[str] = _s(None, "branch, tag or commit of an hf://datasets/... source")
    data_files_root: Optional[str] = _s(None, "where data/ and videos/ live when not under the source (e.g. a "
                                              "bucket next to a Hub repo)")
    storage_options: Optional[Mapping[str, Any]] = _s(None, "fsspec options for the remote filesystem(s), e.g. "
                                                            "{'endpoint_url': ...} for s3://", factory=dict)
    remote_max_retries: Optional[int] = _s(None, "retries of a failing remote read (default: env "
                                                 "DALI_STREAM_REMOTE_MAX_RETRIES or 5)")
    remote_timeout_s: Optional[float] = _s(None, "limit of one remote request attempt (default: env "
                                                 "DALI_STREAM_REMOTE_TIMEOUT_S or 60)")
    remote_deadline_s: Optional[float] = _s(None, "limit of all attempts of one remote read together (default: "
                                                  "env DALI_STREAM_REMOTE_DEADLINE_S, else none)")
    remote_concurrency: Optional[int] = _s(None, "remote requests in flight at once per node, split evenly over "
                                                 "the node's ranks (at least 1 each; ranks per node from "
                                                 "LOCAL_WORLD_SIZE or SLURM_TASKS_PER_NODE): a budget for a store that "
                                                 "throttles; None: no limit but fetch_workers'")
    disk_cache_dir: Optional[str] = _s(None, "a node-local folder where the bytes read from a remote dataset are "
                                             "kept, read from there on every later use (in this run and the next, "
                                             "by every rank of the node): each byte fetched once a node "
                                             "(docs/remote.md#the-node-local-disk-tier); None: off")
    disk_cache_bytes: Optional[int] = _s(None, "bound of disk_cache_dir, least recently read blocks deleted past "
                                               "it (default: 80% of the drive's free space when the loader starts)")

    def __post_init__(self) -> None:
        fix(self, "storage_options", MappingProxyType(dict(self.storage_options or {})))
        _optional_integers(self, remote_max_retries=0, disk_cache_bytes=1, remote_concurrency=1)
        for name in ("remote_timeout_s", "remote_deadline_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(as_float(value), float) and value > 0):
                raise ConfigError(f"`{name}` must be a number of seconds > 0. Found: {value!r}")
            fix(self, name, None if value is None else as_float(value))
        _local_folder(self, "disk_cache_dir", "a remote dataset's bytes are kept there")


@dataclass(frozen=True, kw_only=True)
class WorldConfig:
    """This process's place in a job of several (rank, world_size); by default read from the torchrun/accelerate or
    SLURM environment (`dali_stream.plan.world`)."""

    __reduce__ = frozen_reduce

    rank: Optional[int] = _s(None, "this process's rank (default: torchrun/SLURM environment, else 0)")
    world_size: Optional[int] = _s(None, "number of ranks (default: torchrun/SLURM environment, else 1)")

    def __post_init__(self) -> None:
        _optional_integers(self, rank=0, world_size=1)


# The groups, in the order `help(LoaderConfig)` and docs/configuration.md list them: `config.<name>` reads one
GROUPS: dict[str, Any] = {"sampling": SamplingConfig, "decoding": DecodeConfig, "output": OutputConfig,
                          "caches": CacheConfig, "storage": StorageConfig, "world": WorldConfig}


def _integer(group: Any, name: str, low: int, other: str = "") -> None:
    """The setting `name` an integer of at least `low`, stored as a Python int (a numpy integer too; never a bool)."""
    value = getattr(group, name)
    if not is_int(as_int(value)) or as_int(value) < low:
        what = "a positive integer" if low == 1 else f"an integer >= {low}"
        unit = " (bytes)" if name.endswith("_bytes") else ""
        raise ConfigError(f"`{name}` must be {what}{unit}{' ' + other if other else ''}. Found: {value!r}")
    fix(group, name, as_int(value))


def _optional_integers(group: Any, **least: int) -> None:
    """Each named setting None (derived, or off) or an integer of at least its value."""
    for name, low in least.items():
        if getattr(group, name) is not None:
            _integer(group, name, low)


def _booleans(group: Any, *names: str) -> None:
    """Each named setting True or False, stored as a Python bool (numpy's and torch's too; never an int)."""
    for name in names:
        value = as_bool(getattr(group, name))
        if not isinstance(value, bool):
            raise ConfigError(f"`{name}` must be True or False. Found: {getattr(group, name)!r}")
        fix(group, name, value)


def _local_folder(group: Any, name: str, kept: str) -> None:
    """A folder setting as a str (an os.PathLike's path), refused when it is empty or a URL."""
    value = getattr(group, name)
    if isinstance(value, os.PathLike):
        fix(group, name, value := os.fspath(value))
    if value is not None and not (name == "table_cache_dir" and value == TABLE_CACHE_OFF) and (
            not isinstance(value, str) or not value or re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value)):
        raise ConfigError(f"`{name}` must be a local folder's path: {kept}. Found: {value!r}. Point it at a local "
                          f"drive (e.g. $TMPDIR/{name.replace('_dir', '').replace('_', '-')} or a node's scratch "
                          "disk); the dataset itself may stay remote")
