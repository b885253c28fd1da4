"""Every setting of a `StreamLoader`, in one frozen object validated when it is made.

`StreamLoader(source, batch_size=32, ...)` builds a `LoaderConfig` from its keyword arguments (or takes one:
`StreamLoader(source, config=cfg)`, with keywords overriding its fields). The loader, `state_dict()`,
`dali-stream bench` and the CLI's flags (`tools/flags.py`) read the settings, their defaults and their help
from here, so each setting is defined once. Checks here are the ones that need no dataset; those that do
(unknown feature keys, episode indices, image sizes against crops) run when the loader opens the dataset.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import (
    Any,
    Callable,
    Literal,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    TypedDict,
    Union,
    get_args,
)

from .errors import ConfigError
from .lerobot_arguments import LEROBOT_ARGUMENTS

Decode = Literal["auto", "gpu", "cpu", "cpu-open", "dali-cpu"]
NvdecEngine = Literal["auto", "dali", "open"]
ImageDtype = Literal["float32", "uint8"]
MemoryFormat = Literal["contiguous", "channels_last"]
DepthOutputUnit = Literal["mm", "m"]
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


def _s(default: Any, help: str, *, factory: Callable[[], Any] | None = None) -> Any:
    meta = {"help": help}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True, kw_only=True)
class LoaderConfig:
    """The settings of a `StreamLoader` (all keyword-only; `help(LoaderConfig)` lists them with their help)."""

    # what a batch is
    batch_size: int = _s(16, "samples per batch (per rank)")
    delta_timestamps: Mapping[str, Tuple[float, ...]] = _s(
        None, "feature key -> offsets in seconds; those keys get a time axis and `<key>_is_pad`", factory=dict)
    tolerance_s: float = _s(1e-4, "largest allowed gap between a queried timestamp and the frame returned "
                                  "(lerobot's default; raise it for a camera whose clock jitters)")
    check_frames: bool = _s(True, "check every torchcodec-decoded frame's presentation time against the planned "
                                  "frame's and raise WrongFrameError on a mismatch (one comparison a frame)")
    drop_last: Optional[bool] = _s(None, "drop the last partial batch of each epoch (default: True when shuffling, "
                                         "False for an evaluation pass, shuffle=False, so it yields every frame)")
    # which samples
    episode_pool_size: Union[int, Literal["all"]] = _s(
        16, "whole episodes each rank keeps open and samples across; 'all': a global shuffle (every sample drawn "
            "from anywhere in the rank's share: docs/sampling.md)")
    seed: int = _s(0, "shuffling seed; plans depend only on (seed, epoch, rank, position)")
    shuffle: bool = _s(True, "False for an evaluation pass: every frame once, episodes and frames in order (ranks "
                             "get contiguous blocks of episodes)")
    partition: str = _s("rank", "how a shuffled epoch's episodes split over ranks: 'rank' (afresh each epoch over "
                                "all ranks) or 'node' (each node keeps the same share every epoch, split afresh over "
                                "its ranks: with disk_cache_dir a node's drive holds ~1/nodes of a remote dataset; "
                                "docs/sampling.md#node-partition)")
    episodes: Optional[Tuple[int, ...]] = _s(None, "episode indices to use (a train/val split); the others are "
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
    # decode and images
    decode: Union[Decode, Mapping[str, Decode]] = _s(
        "auto", "auto | gpu | cpu | cpu-open | dali-cpu, or camera key -> one of those (see "
                "dali_stream.decode.routes; cpu-open: FFmpeg's decoders kept open and fed packets, the open-decoder "
                "engine on the CPU; dali-cpu: DALI's CPU decoder for VP8/VP9/MJPEG cameras, torchcodec for the rest)")
    nvdec_engine: NvdecEngine = _s(
        "auto", "which engine decodes NVDEC cameras: dali (DALI's fn.decoders.video, a decoder per stream), "
                "open (PyNvVideoCodec's decoders kept open for the loader's life and fed packets: "
                "dali_stream/decode/engine.py; pip install '.[nvdec]' in the checkout), or auto (dali until the open "
                "engine is proven on this node: decode/proven.py)")
    decode_threads: Optional[int] = _s(
        None, "threads of the open-decoder engine, each with its own decoders (default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py)")
    decode_processes: Optional[int] = _s(
        None, "processes the open-decoder engine decodes in, each one thread with its decoders kept open (0: its "
              "threads in the loader's process; default derived: `dali-stream inspect` shows the value and why, "
              "dali_stream/decode/route.py)")
    join_streams: Optional[int] = _s(
        None, "DALI-decoded cameras: a batch is decoded in at most this many groups, each group's clips of a "
              "camera joined into one stream, one decoder each (DALI 2.4 opens a decoder per stream: ~8 ms "
              "on NVDEC); 0: one clip per sample, as with augment= (graph/joined.py); default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py")
    device: Optional[str] = _s(None, "where batches land: cpu, cuda or cuda:N, or a torch.device (default: cuda "
                                     "when DALI and torch both see a GPU, else cpu)")
    image_dtype: ImageDtype = _s("float32", "float32 (in [0, 1], lerobot's default) or uint8 (or torch.float32 / "
                                            "torch.uint8)")
    memory_format: MemoryFormat = _s(
        "contiguous", "how camera tensors (..., 3, H, W) are stored: contiguous (CHW, as lerobot's) or "
                      "channels_last (HWC storage, torch.channels_last for 4-D batches; same shape and values): the "
                      "CPU route then skips the CHW transpose, and convnets run channels_last as is")
    depth_output_unit: DepthOutputUnit = _s(
        "mm", "depth cameras (lerobot's depth maps: 12-bit codes in a grey video) come as (..., 1, H, W) float32 "
              "depth in this unit, 'mm' (whole millimetres, lerobot's default) or 'm', and their stats with them; "
              "image_dtype, resize, crop, mean/std and augment= apply to RGB cameras only")
    resize: Optional[Tuple[int, int]] = _s(None, "(height, width) every RGB camera image is resized to "
                                                 "(antialiased), in the DALI graph")
    crop: Optional[Tuple[int, int]] = _s(None, "(height, width) of a centre crop, after resize")
    mean: Union[float, Tuple[float, ...], None] = _s(None, "per-channel mean in [0, 1] units: (x - mean) / std "
                                                           "(float32 only)")
    std: Union[float, Tuple[float, ...], None] = _s(None, "per-channel standard deviation, with mean")
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
    # threads and memory
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
    max_decoders: Optional[int] = _s(None, "CPU (torchcodec) decoders kept open for reuse, least recently used "
                                           "closed first (default derived: `dali-stream inspect` shows the value and why, dali_stream/loader/resolve.py)")
    # the job
    rank: Optional[int] = _s(None, "this process's rank (default: torchrun/SLURM environment, else 0)")
    world_size: Optional[int] = _s(None, "number of ranks (default: torchrun/SLURM environment, else 1)")
    # where the bytes are
    revision: Optional[str] = _s(None, "branch, tag or commit of an hf://datasets/... source")
    data_files_root: Optional[str] = _s(None, "where data/ and videos/ live when not under the source (e.g. a "
                                              "bucket next to a Hub repo)")
    storage_options: Mapping[str, Any] = _s(None, "fsspec options for the remote filesystem(s), e.g. "
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
        fix = object.__setattr__
        deltas = self.delta_timestamps
        if not isinstance(deltas, Mapping):
            raise ConfigError(f"`delta_timestamps` must map feature keys to lists of offsets in seconds. Found: "
                              f"{deltas!r}")
        fix(self, "delta_timestamps", MappingProxyType({str(k): _offsets(k, v) for k, v in deltas.items()}))
        fix(self, "storage_options", MappingProxyType(dict(self.storage_options or {})))
        if isinstance(self.decode, Mapping):
            fix(self, "decode", MappingProxyType(dict(self.decode)))
        elif self.decode not in DECODE_CHOICES:
            raise ConfigError(f"decode={self.decode!r} is not one of {DECODE_CHOICES} (or a dict camera key -> one "
                              "of those)")
        if self.nvdec_engine not in NVDEC_ENGINES:
            raise ConfigError(f"`nvdec_engine` must be one of {NVDEC_ENGINES}. Found: {self.nvdec_engine!r}")
        if not isinstance(self.image_dtype, str):  # torch.uint8 / torch.float32, by name
            fix(self, "image_dtype", str(self.image_dtype).removeprefix("torch."))
        if self.image_dtype not in IMAGE_DTYPES:
            raise ConfigError(f"`image_dtype` must be 'float32' or 'uint8' (or torch.float32 / torch.uint8). Found: "
                              f"{self.image_dtype!r}")
        if not isinstance(self.memory_format, str):  # torch.channels_last / torch.contiguous_format, by name
            named = {"torch.channels_last": "channels_last", "torch.contiguous_format": "contiguous"}
            fix(self, "memory_format", named.get(str(self.memory_format), self.memory_format))
        if self.depth_output_unit not in DEPTH_OUTPUT_UNITS:
            raise ConfigError(f"`depth_output_unit` must be 'mm' or 'm' (lerobot's values). Found: "
                              f"{self.depth_output_unit!r}")
        if self.memory_format not in MEMORY_FORMATS:
            raise ConfigError(f"`memory_format` must be 'contiguous' or 'channels_last' (or torch.channels_last / "
                              f"torch.contiguous_format). Found: {self.memory_format!r}")
        for name in ("batch_size", "episode_pool_size", "cache_bytes", "index_bytes", "footer_bytes"):
            if name == "episode_pool_size" and self.episode_pool_size == GLOBAL_POOL:
                continue
            _integer(name, getattr(self, name), 1, "or 'all' (a global shuffle)" if name == "episode_pool_size" else "")
        for name in ("seed", "drop_n_first_frames", "drop_n_last_frames", "frame_cache_bytes"):
            _integer(name, getattr(self, name), 0)
        for name, low in (("num_workers", 0), ("join_streams", 0), ("decode_threads", 1), ("decode_processes", 0), ("prefetch_batches", 0), ("fetch_workers", 0), ("transform_workers", 0), ("max_decoders", 1),
                          ("episode_frames_bytes", 0), ("max_episodes", 1), ("segment_bytes", 1),
                          ("rank", 0), ("world_size", 1), ("remote_max_retries", 0), ("disk_cache_bytes", 1),
                          ("remote_concurrency", 1), ("table_cache_bytes", 1)):
            if getattr(self, name) is not None:
                _integer(name, getattr(self, name), low)
        for name in ("drop_last", "shuffle", "check_frames"):
            if not isinstance(getattr(self, name), bool) and not (name == "drop_last" and self.drop_last is None):
                raise ConfigError(f"`{name}` must be True or False. Found: {getattr(self, name)!r}")
        if not (isinstance(self.tolerance_s, (int, float)) and not isinstance(self.tolerance_s, bool)
                and math.isfinite(self.tolerance_s) and self.tolerance_s >= 0):
            raise ConfigError(f"`tolerance_s` must be a number >= 0. Found: {self.tolerance_s!r}")
        for name in ("remote_timeout_s", "remote_deadline_s"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and value > 0):
                raise ConfigError(f"`{name}` must be a number of seconds > 0. Found: {value!r}")
        if self.episodes is not None:
            if isinstance(self.episodes, (str, bytes)) or not isinstance(self.episodes, Sequence):
                raise ConfigError(f"`episodes` must be a list of episode indices. Found: {self.episodes!r}")
            fix(self, "episodes", tuple(self.episodes))
        for name in ("resize", "crop"):
            value = getattr(self, name)
            if value is not None and isinstance(value, list):
                fix(self, name, tuple(value))
        for name in ("mean", "std"):
            value = getattr(self, name)
            if isinstance(value, list):
                fix(self, name, tuple(value))
        if self.image_transforms is not None and not callable(self.image_transforms):
            raise ConfigError(f"`image_transforms` must be a callable taking and returning an image tensor (e.g. "
                              f"torchvision.transforms.v2.Compose([...])). Found: {self.image_transforms!r}")
        if self.episode_filter is not None and not callable(self.episode_filter):
            raise ConfigError(f"`episode_filter` must be a function of an episode's row (a dict) returning True to "
                              f"keep it, as lerobot's. Found: {self.episode_filter!r}")
        if self.augment is not None and not callable(self.augment):
            raise ConfigError(f"`augment` must be a function (video, key, rand) -> video. Found: {self.augment!r}")
        for name, kept in (("frame_cache_dir", "decoded frames are written there and read back memory-mapped"),
                           ("disk_cache_dir", "a remote dataset's bytes are kept there"),
                           ("table_cache_dir", "decoded parquet row groups are kept there ('off': none)")):
            value = getattr(self, name)
            if isinstance(value, os.PathLike):
                fix(self, name, value := os.fspath(value))
            if value is not None and not (name == "table_cache_dir" and value == TABLE_CACHE_OFF) and (
                    not isinstance(value, str) or not value or re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", value)):
                raise ConfigError(f"`{name}` must be a local folder's path: {kept}. Found: {value!r}. Point it at a "
                                  f"local drive (e.g. $TMPDIR/{name.replace('_dir', '').replace('_', '-')} or a node's "
                                  "scratch disk); the dataset itself may stay remote")
        if self.device is not None:  # a torch.device reads as "cpu", "cpu:0", "cuda:1" (checked by decode.device)
            fix(self, "device", str(self.device))

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    @classmethod
    def make(cls, base: LoaderConfig | None = None, **options: Any) -> LoaderConfig:
        """`base` (or the defaults) with `options` replacing fields; an unknown name is a ConfigError naming
        the closest setting."""
        known = cls.names()
        for name in options:
            if name in LEROBOT_ARGUMENTS:
                raise ConfigError(f"StreamLoader has no setting `{name}` (lerobot's LeRobotDataset argument): "
                                  f"{LEROBOT_ARGUMENTS[name]}")
            if name not in known:
                close = difflib.get_close_matches(name, known, n=1)
                hint = f"; did you mean `{close[0]}`?" if close else f"; the settings are {list(known)}"
                raise ConfigError(f"StreamLoader has no setting `{name}`{hint}")
        if base is None:
            return cls(**options)
        if not isinstance(base, LoaderConfig):
            raise ConfigError(f"`config` must be a LoaderConfig. Found: {type(base).__name__}")
        return dataclasses.replace(base, **options) if options else base

    def help(self, name: str) -> str:
        return next(f.metadata["help"] for f in dataclasses.fields(self) if f.name == name)


class LoaderSettings(TypedDict, total=False):
    """`StreamLoader(source, **settings)`'s keywords as a type checker and an editor see them (the values each
    setting accepts; `LoaderConfig` holds them normalised, and documents them: `help(LoaderConfig)`).
    tests/test_config.py keeps the two in step."""

    batch_size: int
    delta_timestamps: Mapping[str, Sequence[float]]
    tolerance_s: float
    check_frames: bool
    drop_last: Optional[bool]
    episode_pool_size: Union[int, str]  # or "all": a global shuffle
    seed: int
    shuffle: bool
    partition: str  # "rank" | "node"
    episodes: Optional[Sequence[int]]
    episode_filter: Optional[Callable[[Mapping[str, Any]], bool]]
    max_episodes: Optional[int]
    drop_n_first_frames: int
    drop_n_last_frames: int
    decode: Union[str, Mapping[str, str]]  # "auto" | "gpu" | "cpu" | "cpu-open" | "dali-cpu", or key -> one of them
    nvdec_engine: str  # "auto" | "dali" | "open"
    decode_threads: Optional[int]
    decode_processes: Optional[int]
    join_streams: Optional[int]
    device: Any  # "cpu", "cuda", "cuda:N" or a torch.device
    image_dtype: Any  # "float32" | "uint8", or torch.float32 / torch.uint8
    memory_format: Any  # "contiguous" | "channels_last", or torch.contiguous_format / torch.channels_last
    depth_output_unit: str  # "mm" | "m"
    resize: Optional[Sequence[int]]
    crop: Optional[Sequence[int]]
    mean: Union[float, Sequence[float], None]
    std: Union[float, Sequence[float], None]
    augment: Optional[Callable[[Any, str, Any], Any]]
    image_transforms: Optional[Callable[[Any], Any]]
    transform_workers: Optional[int]
    num_workers: Optional[int]
    prefetch_batches: Optional[int]
    fetch_workers: Optional[int]
    cache_bytes: int
    segment_bytes: Optional[int]
    index_bytes: int
    footer_bytes: int
    frame_cache_bytes: int
    frame_cache_dir: Optional[str]
    episode_frames_bytes: Optional[int]
    max_decoders: Optional[int]
    rank: Optional[int]
    world_size: Optional[int]
    revision: Optional[str]
    data_files_root: Optional[str]
    storage_options: Optional[Mapping[str, Any]]
    remote_max_retries: Optional[int]
    remote_timeout_s: Optional[float]
    remote_deadline_s: Optional[float]
    remote_concurrency: Optional[int]
    disk_cache_dir: Optional[str]
    disk_cache_bytes: Optional[int]
    table_cache_dir: Optional[str]  # a local folder, or "off"
    table_cache_bytes: Optional[int]


def _settings_doc() -> str:
    """Every setting with its default and help, for `help(LoaderConfig)` (the help lives in field metadata)."""
    lines = ["", "Settings (default: help):"]
    for f in dataclasses.fields(LoaderConfig):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        lines.append(f"    {f.name} = {default!r}: {f.metadata['help']}")
    return "\n".join(lines)


LoaderConfig.__doc__ = (LoaderConfig.__doc__ or "") + "\n" + _settings_doc()


def _integer(name: str, value: Any, low: int, other: str = "") -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        what = "a positive integer" if low == 1 else f"an integer >= {low}"
        unit = " (bytes)" if name.endswith("_bytes") else ""
        raise ConfigError(f"`{name}` must be {what}{unit}{' ' + other if other else ''}. Found: {value!r}")


def pool_size(config: LoaderConfig) -> int | None:
    """The planner's pool size: None for a global shuffle (`episode_pool_size='all'`)."""
    return None if config.episode_pool_size == GLOBAL_POOL else int(config.episode_pool_size)


def _offsets(key: Any, value: Any) -> tuple[float, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or not value:
        raise ConfigError(f"delta_timestamps[{key!r}] must be a non-empty list of offsets in seconds. Found: "
                          f"{value!r}")
    out = []
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise ConfigError(f"delta_timestamps[{key!r}] holds {v!r}: every offset must be a finite number of "
                              "seconds (e.g. -0.1, 0.0)")
        out.append(float(v))
    return tuple(out)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if callable(value):
        return f"{getattr(value, '__module__', '?')}.{getattr(value, '__qualname__', repr(value))}"
    return value


def as_dict(config: LoaderConfig) -> dict[str, Any]:
    """The settings as JSON-ready values (mappings as dicts, tuples as lists, a function by its name)."""
    return {f.name: _plain(getattr(config, f.name)) for f in dataclasses.fields(config)}
