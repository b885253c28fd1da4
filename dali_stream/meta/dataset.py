"""Read a LeRobot v3 dataset's metadata: meta/info.json, meta/episodes/*/*.parquet, meta/tasks.parquet.

`DatasetMeta.open(source)` validates what the loader relies on and fails with a message that names the
file and the fix. Sources are local paths or fsspec URLs; only metadata is read here.
"""

from __future__ import annotations

import functools
import json
import math
import os
import posixpath
import warnings
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ..config import DepthOutputUnit
from ..errors import DatasetError, DatasetNotFoundError, RemoteError, UnsupportedVersionError
from ..source.storage import (
    RemoteOptions,
    is_local,
    lerobot_home,
    open_fs,
    read_parquet,
    resolve_source,
)
from .depth import DepthCoding
from .episode_table import EpisodeTable, read_episode_tables, refuse_doubled_episodes
from .schema import TEXT_DTYPES

INFO_PATH = "meta/info.json"


def _below(fs: Any, root: str) -> str:
    """The datasets in `root`'s folders, as the end of the error that `root` is none ('' where there are none)."""
    try:
        found = sorted(posixpath.dirname(posixpath.dirname(p)) for p in fs.glob(posixpath.join(root, "*", INFO_PATH)))
    except Exception:  # noqa: BLE001 - only a hint: a store that cannot list leaves the error as it is
        return ""
    names = ", ".join(posixpath.basename(p) for p in found[:5]) + (f" and {len(found) - 5} more" if len(found) > 5 else "")
    return f"; the datasets in it: {names} (pass one, e.g. {found[0]})" if found else ""


def _parents(root: str, levels: int = 3) -> list[str]:
    """The folders above `root`, nearest first, `levels` at most (a dataset's meta/, a camera's chunk folder)."""
    out: list[str] = []
    while len(out) < levels and posixpath.dirname(root) not in ("", root):
        root = posixpath.dirname(root)
        out.append(root)
    return out
TASKS_PATH = "meta/tasks.parquet"
STATS_PATH = "meta/stats.json"
EPISODES_GLOB = "meta/episodes/*/*.parquet"
# Columns every frame row carries in v3 (lerobot's DEFAULT_FEATURES).
INDEX_COLUMNS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@dataclass(frozen=True)
class Camera:
    key: str
    codec: str  # normalised: h264 | hevc | av1 | vp9 | ...
    height: int
    width: int
    pix_fmt: str | None  # info.json's video.pix_fmt; None when not recorded
    from_timestamp: np.ndarray  # (E,) float64 per episode position
    to_timestamp: np.ndarray
    chunk_index: np.ndarray  # (E,) int64
    file_index: np.ndarray
    depth: DepthCoding | None = None  # a depth camera (`meta.depth`): one channel of depth, not RGB

    @property
    def channels(self) -> int:
        return 1 if self.depth is not None else 3


_CODEC_ALIASES = {"h264": "h264", "avc": "h264", "avc1": "h264", "libx264": "h264", "hevc": "hevc", "h265": "hevc",
                  "libx265": "hevc", "hvc1": "hevc", "av1": "av1", "libdav1d": "av1", "libaom-av1": "av1",
                  "libsvtav1": "av1", "av01": "av1", "vp9": "vp9", "libvpx-vp9": "vp9", "vp09": "vp9", "vp8": "vp8"}


def normalise_codec(name: str) -> str:
    return _CODEC_ALIASES.get(str(name).lower(), str(name).lower())


def source_repo_id(source: str) -> str:
    """"org/name" of an hf://datasets/org/name[@revision][/...] source; any other source as it is."""
    if source.startswith("hf://datasets/"):
        parts = source[len("hf://datasets/"):].split("/")
        if len(parts) >= 2:
            return f"{parts[0]}/{parts[1].split('@', 1)[0]}"
    return source


class LerobotMetadata:
    """The attributes of lerobot's `LeRobotDatasetMetadata` that training code reads, computed from `features` and
    `info` (a subclass sets both): `dataset.meta.camera_keys` and its kin carry over to `loader.meta`."""

    features: dict[str, dict[str, Any]]
    info: dict[str, Any]

    @property
    def camera_keys(self) -> list[str]:
        """Keys of the visual features, video or image, in the features' order."""
        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]

    @property
    def depth_keys(self) -> list[str]:
        """Keys of the depth cameras (`meta.depth`: 12-bit codes of depth in a grey video, lerobot's depth maps)."""
        from .depth import is_depth

        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image") and is_depth(f)]

    @property
    def image_keys(self) -> list[str]:
        """Keys of visual features stored as images in the frame tables (lerobot's `use_videos=False`): one PNG a row,
        decoded on the workers (route `table-images`)."""
        return [k for k, f in self.features.items() if f.get("dtype") == "image"]

    def image_size(self, key: str) -> tuple[int, int]:
        """(height, width) of camera `key` stored as images in the frame tables: its feature's shape[:2], as the
        loader lays its pictures out (lerobot writes (H, W, C))."""
        height, width = (int(x) for x in (self.features[key].get("shape") or (0, 0))[:2])
        return height, width

    @property
    def names(self) -> dict[str, Any]:
        """Feature key -> the names of its dimensions (info.json's `names`)."""
        return {k: f.get("names") for k, f in self.features.items()}

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        """Feature key -> its shape as info.json gives it (cameras (H, W, C))."""
        return {k: tuple(f.get("shape") or ()) for k, f in self.features.items()}

    @property
    def total_episodes(self) -> int:
        return int(self.num_episodes)  # type: ignore[attr-defined]

    @property
    def total_tasks(self) -> int:
        return int(self.info.get("total_tasks", len(getattr(self, "tasks", {}) or {})))

    @property
    def robot_type(self) -> str | None:
        return self.info.get("robot_type")


class DatasetMeta(LerobotMetadata):
    """Everything the planner and fetchers need to know about a dataset, without touching frames; also lerobot's
    `LeRobotDatasetMetadata` in the parts training code reads (`features`, `fps`, `stats`, `camera_keys`,
    `video_keys`, `image_keys`, `names`, `shapes`, `total_episodes`, `total_frames`, `repo_id`, ...)."""

    def __init__(self, source: str, fs, root: str, info: dict[str, Any], episodes: dict[str, np.ndarray],
                 tasks: dict[int, str]) -> None:
        self.source = str(source)
        self.fs = fs
        self.data_fs, self.data_root = fs, root  # where data/ and videos/ live (see `open`)
        self.root = root
        self.info = info
        self.fps = float(info["fps"])
        self.features: dict[str, dict[str, Any]] = info["features"]
        self.episodes = EpisodeTable(episodes)  # columns by name; rows by position, as lerobot's
        self.tasks = tasks
        # the unit depth cameras' frames and stats come in (lerobot's `depth_output_unit`; the loader sets it)
        self.depth_output_unit: DepthOutputUnit = "mm"
        self.video_keys = [k for k, f in self.features.items() if f.get("dtype") == "video"]
        self.table_keys = [k for k, f in self.features.items() if f.get("dtype") not in ("video", "image", *TEXT_DTYPES)]
        # strings, and lerobot's language annotations (`language_persistent`, `language_events`): one Python value
        # per sample in the batch (a list of row dicts for the annotations), as lerobot's dataset[i] returns them
        self.text_keys = [k for k, f in self.features.items() if f.get("dtype") in TEXT_DTYPES]
        self.lengths = episodes["length"]
        self.cameras = {k: self._camera(k) for k in self.video_keys}
        # lerobot's name for the dataset: the Hub id ("lerobot/pusht") where the source is a Hub dataset, else the
        # source as given (a folder or URL)
        self.repo_id = source_repo_id(self.source)

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def open(cls, source: str, data_files_root: str | None = None, *, remote: RemoteOptions | None = None,
             revision: str | None = None) -> "DatasetMeta":
        """Metadata from `source`; data/ and videos/ from `data_files_root` when given (e.g. meta from a Hub
        dataset, bulk files from a bucket), else from `source`. `revision` applies to `source` (an hf://
        repository); `remote` (fsspec's storage options, the retry policy) to both roots."""
        fs, root = open_fs(source, remote, revision)
        try:
            info = cls._read_info(source, fs, root)
        except RemoteError as exc:
            resolved = resolve_source(source, revision)
            if not (resolved.startswith("hf://") and not str(source).startswith("hf://")):
                raise
            raise RemoteError(
                f"{source!r} is not a local folder (working directory {os.getcwd()}) nor downloaded by lerobot "
                f"({lerobot_home() / str(source)}), so it was read as the Hub dataset {resolved}, and the Hub could "
                f"not be reached: {exc}. If you meant a local dataset, check the path (a typo?); offline, set "
                "HF_HUB_OFFLINE=1 to read only local copies") from None
        except DatasetNotFoundError:
            resolved = resolve_source(source, revision)
            if resolved.startswith("hf://") and not str(source).startswith("hf://"):
                raise DatasetNotFoundError(
                    f"{source!r} is not a local folder (working directory {os.getcwd()}) nor downloaded by lerobot "
                    f"({lerobot_home() / str(source)}), so it was read as the Hub dataset {resolved}"
                    f"{f' at revision {revision!r}' if revision else ''}, which does not exist or the token cannot "
                    "see (HF_TOKEN / `hf auth login`); pass a local dataset root (a typo in the path?), or check the "
                    "repo id") from None
            if revision is None:
                raise
            raise DatasetNotFoundError(
                f"{source!r} at revision {revision!r} was not found: the repository, or that branch, tag or "
                "commit, does not exist or the token cannot see it; check `revision` and the token"
            ) from None
        episodes = cls._read_episodes(source, fs, root, info)
        tasks = cls._read_tasks(source, fs, root)
        meta = cls(resolve_source(source, revision), fs, root, info, episodes, tasks)
        if data_files_root is not None:
            meta.data_fs, meta.data_root = open_fs(data_files_root, remote)
            if not meta.data_fs.exists(meta.data_root):
                raise DatasetNotFoundError(f"data_files_root {data_files_root!r} does not exist; it must hold the "
                                           "dataset's data/ and videos/ folders")
        meta._validate()
        return meta

    @staticmethod
    def _read_info(source, fs, root) -> dict[str, Any]:
        if not fs.exists(root):
            remote = "; a private repository, bucket or server also looks missing without valid credentials " \
                     "(HF_TOKEN / `hf auth login`, the AWS environment, or storage_options)" if "://" in str(source) else ""
            raise DatasetNotFoundError(
                f"dataset folder {source!r} does not exist; pass the root of a LeRobot v3 dataset "
                f"(the folder holding meta/, data/ and videos/), or write one with `dali-stream make-sample`{remote}"
            )
        path = posixpath.join(root, INFO_PATH)
        if is_local(fs) and os.path.isfile(root):
            raise DatasetNotFoundError(
                f"{source!r} is a file, not a dataset folder: pass a LeRobot dataset's root folder (holding meta/, "
                "data/ and videos/)" + ("; a mixture file is read by `dali_stream.mixture.load_mixture(path)` (the "
                "CLI reads it itself)" if str(source).endswith(".json") else ""))
        if not fs.exists(path):
            up = next((p for p in _parents(root) if fs.exists(posixpath.join(p, INFO_PATH))), None)
            raise DatasetNotFoundError(
                f"{path} is missing: {source!r} is not a LeRobot dataset root (expected meta/info.json "
                "beside data/ and videos/); point at the dataset's root folder"
                + (f": {source!r} is inside the dataset at {up}" if up else _below(fs, root)))
        try:
            with fs.open(path, "rb") as f:
                info = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise DatasetError(f"{path} is not valid JSON ({exc}); re-download the dataset's meta folder") from exc
        if not isinstance(info, dict):
            raise DatasetError(f"{path} holds a JSON {type(info).__name__}, not an object with codebase_version, fps, "
                               "features and data_path; re-download the dataset's meta folder")
        version = str(info.get("codebase_version", ""))
        if not version.startswith("v3."):
            raise UnsupportedVersionError(
                f"{path} says codebase_version={version!r}; dali_stream reads LeRobot v3.x datasets only. "
                "Convert it with lerobot's `convert_dataset_v21_to_v30` script first"
            )
        for key in ("fps", "features", "data_path"):
            if key not in info:
                raise DatasetError(f"{path} has no {key!r} entry; the file is incomplete, re-download it")
        fps = info["fps"]
        if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not math.isfinite(fps) or fps <= 0:
            raise DatasetError(f"{path}: fps must be a positive number of frames per second. Found: {fps!r}; "
                               "fix info.json (lerobot writes e.g. 30) or re-download it")
        if not isinstance(info["features"], dict) or not all(isinstance(f, dict) for f in info["features"].values()):
            raise DatasetError(f"{path}: 'features' must map each feature key to an object (dtype, shape, ...). "
                               f"Found: {type(info['features']).__name__}; re-download the dataset's meta folder")
        if info.get("video_path", "") is None:  # lerobot writes null for a dataset recorded without videos
            del info["video_path"]
        for key in ("data_path", "video_path"):
            if key in info and not isinstance(info[key], str):
                raise DatasetError(f"{path}: {key!r} must be a path template string. Found: {info[key]!r}")
        return info

    @staticmethod
    def _read_episodes(source, fs, root, info) -> dict[str, np.ndarray]:
        files = sorted(fs.glob(posixpath.join(root, EPISODES_GLOB)))
        if not files:
            raise DatasetNotFoundError(
                f"no episode tables under {posixpath.join(root, 'meta/episodes/')} in {source!r}; "
                "a v3 dataset keeps them as meta/episodes/chunk-XXX/file-XXX.parquet: re-download meta/"
            )
        required = ["episode_index", "length", "dataset_from_index", "dataset_to_index",
                    "data/chunk_index", "data/file_index"]
        for key, ft in info["features"].items():
            if ft.get("dtype") == "video":
                required += [f"videos/{key}/{c}" for c in ("chunk_index", "file_index", "from_timestamp",
                                                            "to_timestamp")]
        table, rows = read_episode_tables(fs, files, required)
        missing = [c for c in required if c not in table.column_names]
        if missing:
            raise DatasetError(
                f"episode tables in {posixpath.join(root, 'meta/episodes/')} lack columns {missing}; "
                "they are needed to locate each episode's rows and video bytes: re-download meta/episodes"
            )
        index = table.column("episode_index").to_numpy()
        order = np.argsort(index, kind="stable")
        refuse_doubled_episodes(index, order, rows, files)
        out = {}
        for c in required:
            col = table.column(c).to_numpy()[order]
            out[c] = col.astype(np.float64 if c.endswith("timestamp") else np.int64)
        return out

    def episode_rows(self) -> list[dict[str, Any]]:
        """Each episode's row of meta/episodes as lerobot's `filter_episodes` sees it (every column but the per-episode
        stats), in episode order; read again on each call (the loader keeps only the columns it plans with)."""
        rows = read_episode_tables(self.fs, sorted(self.fs.glob(posixpath.join(self.root, EPISODES_GLOB))))[0].to_pylist()
        return sorted(rows, key=lambda row: row["episode_index"])

    @staticmethod
    def _read_tasks(source, fs, root) -> dict[int, str]:
        path = posixpath.join(root, TASKS_PATH)
        if not fs.exists(path):
            raise DatasetNotFoundError(f"{path} is missing in {source!r}; re-download the dataset's meta folder")
        table = read_parquet(fs, path)
        if "task_index" not in table.column_names:
            raise DatasetError(f"{path} has no 'task_index' column; re-download the dataset's meta folder")
        names = [c for c in table.column_names if c != "task_index"]
        text = next((c for c in ("task", "__index_level_0__", *names) if c in table.column_names), None)
        if text is None:
            raise DatasetError(f"{path} has no task text column (expected 'task' or a pandas index)")
        return dict(zip(table.column("task_index").to_pylist(), table.column(text).to_pylist()))

    # ---- validation and views -----------------------------------------------------------------------
    def _validate(self) -> None:
        e = self.episodes
        bad = np.flatnonzero(e["dataset_to_index"] - e["dataset_from_index"] != e["length"])
        if len(bad):
            i = int(bad[0])
            raise DatasetError(
                f"episode {int(e['episode_index'][i])} in {self.source!r}: length={int(e['length'][i])} but "
                f"dataset_from_index..dataset_to_index spans {int(e['dataset_to_index'][i] - e['dataset_from_index'][i])} "
                "rows; the episodes table is inconsistent, re-download meta/episodes"
            )
        if self.video_keys and "video_path" not in self.info:
            raise DatasetError(f"{INFO_PATH} in {self.source!r} declares video features but no 'video_path'")

    def refuse_depth_images(self, kept: Iterable[str], member: str | None = None) -> None:
        """Raise DatasetError where a feature of `kept` (the keys a batch takes) is a depth map stored as images in the
        tables (lerobot's TIFFs of depth), which the loader does not read; `member`: the mixture member's name."""
        from .depth import is_depth

        images = [k for k in kept if k in self.image_keys and is_depth(self.features[k])]
        if not images:
            return
        who = f"mixture member {member!r} ({self.source})" if member else repr(self.source)
        where = f"--repo_id {self.repo_id}" if self.source.startswith("hf://") else \
            f"--repo_id local/{posixpath.basename(self.source.rstrip('/'))} --root {self.source}"
        raise DatasetError(
            f"{who} stores the depth maps {images} as images in its tables; dali_stream reads depth from lerobot's "
            "depth videos. Convert the dataset to videos with lerobot's "
            f"`lerobot-edit-dataset {where} --new_root NEW_FOLDER --operation.type convert_image_to_video` and load "
            f"NEW_FOLDER, or leave those cameras out: Mixture([Member({self.source!r}, keys={{{images[0]!r}: None}})])")

    def _camera(self, key: str) -> Camera:
        ft = self.features[key]
        vinfo = ft.get("info") or {}
        shape = ft.get("shape") or [vinfo.get("video.height", 0), vinfo.get("video.width", 0), 3]
        names = ft.get("names") or ["height", "width", "channels"]
        dims = dict(zip(names, shape))
        height = int(vinfo.get("video.height", dims.get("height", shape[0])))
        width = int(vinfo.get("video.width", dims.get("width", shape[1])))
        p = f"videos/{key}/"
        try:
            depth = DepthCoding.of(ft)
        except ValueError as exc:
            raise DatasetError(f"{posixpath.join(self.root, INFO_PATH)}: depth camera {key!r}: {exc}; fix its "
                               "video.depth_min and video.shift, or re-record it") from None
        return Camera(
            key=key,
            codec=normalise_codec(vinfo.get("video.codec", "unknown")),
            height=height,
            width=width,
            pix_fmt=str(vinfo["video.pix_fmt"]) if vinfo.get("video.pix_fmt") else None,
            from_timestamp=self.episodes[p + "from_timestamp"],
            to_timestamp=self.episodes[p + "to_timestamp"],
            chunk_index=self.episodes[p + "chunk_index"],
            file_index=self.episodes[p + "file_index"],
            depth=depth,
        )

    @property
    def num_episodes(self) -> int:
        return int(len(self.lengths))

    @property
    def total_frames(self) -> int:
        return int(self.lengths.sum())

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """meta/stats.json as lerobot's `dataset.meta.stats`: feature -> statistic (mean, std, min, max, count,
        quantiles such as q01/q99 where the writer computed them) -> numpy array, e.g. for a policy's
        normalisation; {} for a dataset without the file, with a warning (once a dataset: a policy's normalisation
        would see nothing). A depth camera's are in `depth_output_unit`, as lerobot's dataset rescales them from the
        unit they were recorded in (all but `count`). Read on first use."""
        stats = self._stats_as_recorded
        for key, cam in self.cameras.items():
            factor = cam.depth.stats_factor(self.depth_output_unit) if cam.depth is not None else 1.0
            if factor != 1.0 and key in stats:
                stats = {**stats, key: {k: v if k == "count" else v * factor for k, v in stats[key].items()}}
        return stats

    @functools.cached_property
    def _stats_as_recorded(self) -> dict[str, dict[str, np.ndarray]]:
        path = posixpath.join(self.root, STATS_PATH)
        if not self.fs.exists(path):
            # once a dataset: Python shows a warning once for each text, and this one names the file
            warnings.warn(f"{self.source!r} has no {STATS_PATH} ({path} does not exist), so `meta.stats` is {{}} and a "
                          "policy's normalisation sees no statistics (lerobot's normalisers then pass the features "
                          "through unnormalised). Compute the stats with lerobot (`compute_episode_stats` and "
                          f"`aggregate_stats` of lerobot.datasets.compute_stats) and write them to {path}, or copy "
                          "the file from the dataset's origin", stacklevel=4)
            return {}
        try:
            raw = json.loads(self.fs.cat_file(path))
            return {str(feature): {str(name): np.asarray(value) for name, value in values.items()}
                    for feature, values in raw.items()}
        except (ValueError, AttributeError) as exc:
            raise DatasetError(f"{path} of {self.source!r} is not lerobot's stats.json (feature -> statistic -> "
                               f"values): {exc}; re-download the dataset's meta folder") from exc

    def episode_index(self, pos: int) -> int:
        return int(self.episodes["episode_index"][pos])

    def data_file(self, pos: int) -> str:
        rel = self.info["data_path"].format(chunk_index=int(self.episodes["data/chunk_index"][pos]),
                                            file_index=int(self.episodes["data/file_index"][pos]))
        return posixpath.join(self.data_root, rel)

    def video_file(self, pos: int, key: str) -> str:
        cam = self.cameras[key]
        rel = self.info["video_path"].format(video_key=key, chunk_index=int(cam.chunk_index[pos]),
                                             file_index=int(cam.file_index[pos]))
        return posixpath.join(self.data_root, rel)

    def fingerprint(self) -> dict[str, Any]:
        """What a saved loader state must agree on to resume against this dataset (see `dali_stream.plan.state`):
        plans depend on the episodes' number, order and lengths, held as a SHA-256 of (episode_index, length)
        pairs in table order; fps and camera keys refuse a state from a dataset of another layout."""
        import hashlib

        pairs = np.stack([self.episodes["episode_index"], self.lengths]).astype("<i8").tobytes()
        return {"total_episodes": self.num_episodes, "total_frames": self.total_frames, "fps": self.fps,
                "cameras": sorted(self.video_keys), "episodes_sha256": hashlib.sha256(pairs).hexdigest()}
