"""Write a real LeRobot v3.0 dataset with painted frame ids: the project's test and demo data.

Layout follows lerobot's v3 writer: meta/info.json, meta/stats.json, meta/tasks.parquet,
meta/episodes/chunk-XXX/file-XXX.parquet, data/chunk-XXX/file-XXX.parquet (one row group per episode)
and videos/<key>/chunk-XXX/file-XXX.mp4 packing several episodes back to back.

Each video file is encoded as one continuous stream with a fixed GOP, so episodes start anywhere inside
a GOP (the loader must cut from the keyframe at or before an episode's first frame), H.264/HEVC carry
B-frames, and every camera rolls over to a new file at a different episode, so each camera has its own
`from_timestamp` per episode. Frame (episode, frame_index) is painted into every image (see `paint`), and
every file is decoded back after writing: each frame must show its own ids (else it is encoded again with
careful settings, and failing that the writer raises), so tests can trust them.

A camera written `NAME:depth` is a depth camera as lerobot records one: 12-bit codes (`paint.depth_codes`, ids as
code values) in a grey HEVC video encoded losslessly with lerobot's depth encoder options (`lerobot_recorder.
encode_depth`), the quantiser's parameters in its feature's info, its stats in millimetres.

`recorder="lerobot"` writes the video files as lerobot's own recorder does instead (`lerobot_recorder`): each
episode encoded alone with lerobot's PyAV options, appended to its file through FFmpeg's concat demuxer, and
`from_timestamp`/`to_timestamp` taken from the files' durations. `recorder="encoder-defaults"` encodes each file
continuously with the encoders' own defaults (`default_recorder`: x265 open GOPs, VP9 alt-ref frames, AV1 hidden
frames; a camera may name another encoder, `aux:av1/libaom-av1`).
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np

from . import paint
from .lerobot_recorder import depth_info, stats_values
from .sample_defaults import CONTENTS, PIX_FMTS, RECORDERS, SAMPLE_DEFAULTS
from .sample_encode import _encode_files, _Job, encode_workers
from .scene import Scene

CODECS = ("h264", "hevc", "av1", "vp9")
DEPTH_CAMERA = "depth"  # NAME:depth in a camera list: a depth camera (a sample-writer word, not a decode route's)
TASKS = ("pick up the red cube", "stack the blue block on the green one", "open the top drawer",
         "push the button twice", "wipe the table")
STATE_DIM = 6
QUANTILES = (0.01, 0.10, 0.50, 0.90, 0.99)  # lerobot's per-episode stats: q01, q10, q50, q90, q99
EPISODES_ROW_GROUP = 10  # lerobot's recorder writes its episodes table 10 episodes a row group (its metadata buffer)


@dataclass(frozen=True)
class CameraSpec:
    name: str
    codec: str
    encoder: str | None = None  # recorder "encoder-defaults" only: another encoder of the codec (libaom-av1)
    depth: bool = False  # a depth camera ("NAME:depth"): 12-bit codes, HEVC, as lerobot records depth

    @property
    def key(self) -> str:
        return f"observation.images.{self.name}"

    def __post_init__(self) -> None:
        from .default_recorder import encoders_of

        if self.codec not in CODECS:
            raise ValueError(f"camera {self.name!r}: codec {self.codec!r} is not one of {CODECS}")
        if self.encoder is not None and self.encoder not in encoders_of(self.codec):
            raise ValueError(f"camera {self.name!r}: encoder {self.encoder!r} does not write {self.codec} here; "
                             f"choose one of {encoders_of(self.codec)}")

    def text(self) -> str:
        return f"{self.name}:{DEPTH_CAMERA}" if self.depth else f"{self.name}:{self.codec}{'/' + self.encoder if self.encoder else ''}"


def parse_cameras(text: str) -> tuple[CameraSpec, ...]:
    """'front:h264,wrist:av1,range:depth' -> camera specs."""
    specs = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, codec = part.partition(":")
        if not sep or not name:
            raise ValueError(f"camera {part!r} must look like NAME:CODEC, e.g. front:h264 (codecs: {', '.join(CODECS)}), "
                             "NAME:CODEC/ENCODER with recorder 'encoder-defaults', e.g. aux:av1/libaom-av1, or "
                             "NAME:depth, a depth camera")
        codec, _, encoder = codec.partition("/")
        if codec == DEPTH_CAMERA:
            specs.append(CameraSpec(name, "hevc", depth=True))
            continue
        specs.append(CameraSpec(name, codec, encoder or None))
    if len({s.name for s in specs}) != len(specs):
        raise ValueError(f"camera names must be unique: {text!r}")
    return tuple(specs)


@dataclass(frozen=True)
class SampleSpec:
    episodes: int = SAMPLE_DEFAULTS["episodes"]
    min_length: int = SAMPLE_DEFAULTS["min_length"]
    max_length: int = SAMPLE_DEFAULTS["max_length"]
    cameras: tuple[CameraSpec, ...] = field(default_factory=lambda: parse_cameras(SAMPLE_DEFAULTS["cameras"]))
    height: int = SAMPLE_DEFAULTS["height"]
    width: int = SAMPLE_DEFAULTS["width"]
    fps: int = SAMPLE_DEFAULTS["fps"]
    gop: int = SAMPLE_DEFAULTS["gop"]
    episodes_per_file: int = SAMPLE_DEFAULTS["episodes_per_file"]
    chunks_size: int = SAMPLE_DEFAULTS["chunks_size"]
    tasks: int = SAMPLE_DEFAULTS["tasks"]
    seed: int = SAMPLE_DEFAULTS["seed"]
    content: str = SAMPLE_DEFAULTS["content"]  # "pattern" or "scene" (`sample_defaults.CONTENTS`)
    crf: int | None = SAMPLE_DEFAULTS["crf"]  # every camera's encoder at this crf (lerobot: 30); None: `_ENCODERS`
    recorder: str = SAMPLE_DEFAULTS["recorder"]  # "dali_stream" (one stream a file) or "lerobot" (`lerobot_recorder`)
    pix_fmt: str = SAMPLE_DEFAULTS["pix_fmt"]  # "yuv420p" or "yuv444p" (AV1/HEVC stay 4:2:0, as lerobot keeps them)
    state_dim: int = SAMPLE_DEFAULTS["state_dim"]  # length of observation.state and action (6-dof, 7-dof, ...)
    # painted episode id and state/action's episode entry = episode_index + id_offset: members of a mixture written
    # with different offsets tell apart which dataset a frame or a row came from
    id_offset: int = SAMPLE_DEFAULTS["id_offset"]

    def __post_init__(self) -> None:
        if self.episodes < 1:
            raise ValueError(f"episodes must be >= 1. Found: {self.episodes}")
        if not 1 <= self.min_length <= self.max_length:
            raise ValueError(f"need 1 <= min_length <= max_length. Found: {self.min_length}, {self.max_length}")
        if self.fps <= 0 or self.gop <= 0 or self.episodes_per_file <= 0 or self.chunks_size <= 0:
            raise ValueError("fps, gop, episodes_per_file and chunks_size must be positive")
        if not 1 <= self.tasks <= len(TASKS):
            raise ValueError(f"tasks must be in [1, {len(TASKS)}]. Found: {self.tasks}")
        if not self.cameras:
            raise ValueError("at least one camera is needed")
        if self.content not in CONTENTS:
            raise ValueError(f"content must be one of {CONTENTS}. Found: {self.content!r}")
        if self.recorder not in RECORDERS:
            raise ValueError(f"recorder must be one of {RECORDERS}. Found: {self.recorder!r}")
        if self.pix_fmt not in PIX_FMTS:
            raise ValueError(f"pix_fmt must be one of {PIX_FMTS}. Found: {self.pix_fmt!r}")
        if self.state_dim < 1:
            raise ValueError(f"state_dim must be >= 1. Found: {self.state_dim}")
        if self.id_offset < 0:
            raise ValueError(f"id_offset must be >= 0. Found: {self.id_offset}")
        if self.crf is not None and not 0 <= self.crf <= 51:
            raise ValueError(f"crf must be in [0, 51] (every encoder here accepts that range). Found: {self.crf}")
        named = [c.text() for c in self.cameras if c.encoder]
        if named and self.recorder != "encoder-defaults":
            raise ValueError(f"cameras {named} name an encoder, which only recorder 'encoder-defaults' takes "
                             f"(recorder: {self.recorder!r})")
        paint.check_size(self.height, self.width)

    def record(self) -> dict:
        """The spec as JSON values: written into the sample's info.json (`SAMPLE_KEY`), so a reader can tell which
        settings wrote a sample (bench rewrites a default sample whose record differs from today's spec)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "cameras"}
        return out | {"cameras": ",".join(c.text() for c in self.cameras)}

    def painted(self, ids: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
        """The ids painted for (episode, frame) `ids`: the episode shifted by `id_offset`."""
        return [(e + self.id_offset, f) for e, f in ids]

    def frames(self, ids: Sequence[tuple[int, int]], camera: int) -> Iterator[np.ndarray]:
        """The RGB frames of camera `camera` (its position in `cameras`) of (episode, frame) `ids`, in order, each
        carrying its `painted` ids; a depth camera's (H, W) uint16 codes (`paint.depth_codes`)."""
        ids = self.painted(ids)
        if self.cameras[camera].depth:
            yield from (paint.depth_codes(self.height, self.width, e, f) for e, f in ids)
            return
        if self.content == "pattern":
            yield from (paint.render(self.height, self.width, e, f, camera) for e, f in ids)
            return
        scene = None
        for e, f in ids:
            if scene is None or scene.episode != e:  # ids run episode by episode: one scene each
                scene = Scene(self.height, self.width, e, camera, self.seed)
            yield scene.frame(f)

    def pix_fmt_of(self, codec: str) -> str:
        """The pixel format a camera of `codec` is written in: lerobot falls back to yuv420p for AV1 and HEVC."""
        return "yuv420p" if codec in ("av1", "hevc") else self.pix_fmt

    def lengths(self) -> np.ndarray:
        rng = np.random.default_rng(self.seed)
        return rng.integers(self.min_length, self.max_length + 1, size=self.episodes).astype(np.int64)


def state_row(episode: int, frame: int, task: int, dim: int = STATE_DIM) -> np.ndarray:
    """The observation.state written for (episode, frame) (the episode shifted by the sample's `id_offset`):
    recognisable values tests can recompute; `dim` entries (the first 6 as below, then (frame + k) / 4)."""
    t = frame / 10.0
    base = [episode, frame, math.sin(t), math.cos(t), episode * 0.5 + frame * 0.01, task]
    return np.array((base + [(frame + k) * 0.25 for k in range(dim - len(base))])[:dim], dtype=np.float32)


def action_row(episode: int, frame: int, task: int, dim: int = STATE_DIM) -> np.ndarray:
    return state_row(episode, frame + 1, task, dim) * np.float32(0.5)


def _chunk_file(n: int, chunks_size: int) -> tuple[int, int]:
    return n // chunks_size, n % chunks_size


def _groups(num: int, first: int, size: int) -> list[list[int]]:
    out, start = [], 0
    take = max(1, first)
    while start < num:
        out.append(list(range(start, min(num, start + take))))
        start += take
        take = size
    return out


def _tasks_table(names: Sequence[str]):
    import pyarrow as pa

    table = pa.table({"task_index": pa.array(range(len(names)), pa.int64()),
                      "__index_level_0__": pa.array(list(names), pa.string())})
    pandas_meta = {
        "index_columns": ["__index_level_0__"],
        "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode", "numpy_type": "object",
                            "metadata": {"encoding": "UTF-8"}}],
        "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                     "numpy_type": "int64", "metadata": None},
                    {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
                     "numpy_type": "object", "metadata": None}],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _stats(values: np.ndarray, quantiles: bool = False) -> dict[str, list]:
    v = values.astype(np.float64)
    if v.ndim == 1:
        v = v[:, None]
    out = {"min": v.min(0).tolist(), "max": v.max(0).tolist(), "mean": v.mean(0).tolist(),
           "std": v.std(0).tolist(), "count": [int(len(v))]}
    return out | ({f"q{round(q * 100):02d}": np.quantile(v, q, axis=0).tolist() for q in QUANTILES} if quantiles else {})


def _episode_stats(spec: SampleSpec, e: int, table, length: int) -> dict[str, list]:
    """lerobot's per-episode stats columns of episode `e` (`stats/<feature>/<stat>`, as lerobot's recorder writes
    them into the episodes table): every numeric feature of its rows `table`, and each camera per channel (shape
    (3, 1, 1), in [0, 1]) over up to 4 of its frames."""
    out: dict[str, list] = {}
    for key in table.column_names:
        values = np.asarray(table[key].to_pylist(), dtype=np.float64)
        out |= {f"stats/{key}/{k}": v for k, v in _stats(values, quantiles=True).items()}
    picks = sorted({0, length // 3, 2 * length // 3, length - 1})
    for c, cam in enumerate(spec.cameras):
        px = _camera_values(spec, c, [(e, f) for f in picks])
        channels = _stats(px, quantiles=True)
        out |= {f"stats/{cam.key}/{k}": ([len(picks)] if k == "count" else [[[x]] for x in v])
                for k, v in channels.items()}
    return out


def _camera_values(spec: SampleSpec, camera: int, ids: list[tuple[int, int]]) -> np.ndarray:
    return stats_values(np.stack(list(spec.frames(ids, camera))), spec.cameras[camera].depth)


# Below this many pixels of video in all (~650 frames at 640x480) files are encoded one after another: the
# test fixtures stay in one process, where starting encoder processes would cost more than it saves.
# info.json key of the settings that wrote a sample (`SampleSpec.record`); lerobot and dali_stream ignore it.
SAMPLE_KEY = "dali_stream_sample"


def partial_path(out: str | Path) -> Path:
    """Where `write_sample` writes `out` until it is complete (then renamed into place)."""
    out = Path(out)
    return out.with_name(f".{out.name}.partial")


def write_sample(out: str | Path, spec: SampleSpec = SampleSpec(), overwrite: bool = False,
                 progress: Callable[[int, int], None] | None = None, workers: int | None = None) -> Path:
    """Write the dataset under `out` and return its path. `progress(done, total)` counts written files;
    `workers`: processes encoding video files (default: see `encode_workers`).

    The dataset is written into `partial_path(out)` and renamed to `out` once complete, so an interrupted write
    (Ctrl-C, a killed job) never leaves a half dataset under `out`; the next write removes the partial folder."""
    if workers is not None and workers < 1:
        raise ValueError(f"workers (processes encoding the video files) must be at least 1. Found: {workers}; "
                         "leave it out for one per core on large samples")
    out = Path(out)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; pass overwrite=True (CLI: --overwrite) to replace it")
    partial = partial_path(out)
    if partial.exists():  # left by an interrupted write
        shutil.rmtree(partial)
    try:
        _write_into(partial, spec, progress, workers)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    if out.exists():
        shutil.rmtree(out) if out.is_dir() else out.unlink()
    partial.rename(out)
    return out


def _write_into(out: Path, spec: SampleSpec, progress: Callable[[int, int], None] | None,
                workers: int | None) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    out.mkdir(parents=True)
    lengths = spec.lengths()
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    task_of = [e % spec.tasks for e in range(spec.episodes)]
    ep_cols: dict[str, list] = {"episode_index": list(range(spec.episodes)),
                                "tasks": [[TASKS[t]] for t in task_of], "length": lengths.tolist(),
                                "dataset_from_index": starts.tolist(),
                                "dataset_to_index": (starts + lengths).tolist()}
    data_groups = _groups(spec.episodes, spec.episodes_per_file, spec.episodes_per_file)
    cam_groups = [_groups(spec.episodes, spec.episodes_per_file - c, spec.episodes_per_file)
                  for c in range(len(spec.cameras))]
    total_files = len(data_groups) + sum(len(g) for g in cam_groups)
    processes = encode_workers(spec, total_files - len(data_groups), workers)
    done = 0

    # ---- tables --------------------------------------------------------------------------------------
    ep_cols["data/chunk_index"] = [0] * spec.episodes
    ep_cols["data/file_index"] = [0] * spec.episodes
    all_state, all_action = [], []
    episode_stats: list[dict[str, list]] = []  # recorder "lerobot": each episode's stats columns
    for n, group in enumerate(data_groups):
        chunk, file = _chunk_file(n, spec.chunks_size)
        path = out / "data" / f"chunk-{chunk:03d}" / f"file-{file:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        writer = None
        for e in group:
            L = int(lengths[e])
            e_id = e + spec.id_offset
            state = np.stack([state_row(e_id, f, task_of[e], spec.state_dim) for f in range(L)])
            action = np.stack([action_row(e_id, f, task_of[e], spec.state_dim) for f in range(L)])
            all_state.append(state)
            all_action.append(action)
            table = pa.table({
                "observation.state": pa.FixedSizeListArray.from_arrays(pa.array(state.ravel()), spec.state_dim),
                "action": pa.FixedSizeListArray.from_arrays(pa.array(action.ravel()), spec.state_dim),
                "next.done": pa.array(np.arange(L) == L - 1),
                "timestamp": pa.array((np.arange(L) / spec.fps).astype(np.float32)),
                "frame_index": pa.array(np.arange(L, dtype=np.int64)),
                "episode_index": pa.array(np.full(L, e, dtype=np.int64)),
                "index": pa.array(np.arange(L, dtype=np.int64) + starts[e]),
                "task_index": pa.array(np.full(L, task_of[e], dtype=np.int64)),
            })
            writer = writer or pq.ParquetWriter(path, table.schema)
            writer.write_table(table)  # one row group per episode
            if spec.recorder == "lerobot":
                episode_stats.append(_episode_stats(spec, e, table, L))
            ep_cols["data/chunk_index"][e], ep_cols["data/file_index"][e] = chunk, file
        if writer is not None:
            writer.close()
        done += 1
        if progress:
            progress(done, total_files)

    # ---- videos --------------------------------------------------------------------------------------
    jobs: list[_Job] = []
    groups_of: dict[Path, tuple[str, list[int]]] = {}  # file -> (camera key, its episodes)
    for c, cam in enumerate(spec.cameras):
        p = f"videos/{cam.key}/"
        for col in ("chunk_index", "file_index", "from_timestamp", "to_timestamp"):
            ep_cols[p + col] = [0] * spec.episodes
        for n, group in enumerate(cam_groups[c]):
            chunk, file = _chunk_file(n, spec.chunks_size)
            path = out / "videos" / cam.key / f"chunk-{chunk:03d}" / f"file-{file:03d}.mp4"
            jobs.append((path, [(e, f) for e in group for f in range(int(lengths[e]))], c, cam.codec))
            groups_of[path] = (p, group)
            for e in group:
                ep_cols[p + "chunk_index"][e], ep_cols[p + "file_index"][e] = chunk, file

    def encoded() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total_files)

    careful, spans = _encode_files(jobs, spec, processes, encoded)
    for path, (p, group) in groups_of.items():
        for e, (start, end) in zip(group, spans[path]):
            ep_cols[p + "from_timestamp"][e], ep_cols[p + "to_timestamp"][e] = start, end

    # ---- meta ----------------------------------------------------------------------------------------
    # two files (a reader must join them); lerobot's recorder starts a new file only past 100 MB: one
    half = spec.episodes if spec.recorder == "lerobot" else max(1, spec.episodes // 2)
    for n, rows in enumerate((range(0, half), range(half, spec.episodes))):
        if not len(rows):
            continue
        cols = {k: [v[i] for i in rows] for k, v in ep_cols.items()}
        cols["meta/episodes/chunk_index"] = [0] * len(rows)
        cols["meta/episodes/file_index"] = [n] * len(rows)
        if episode_stats:
            cols |= {k: [episode_stats[i][k] for i in rows] for k in episode_stats[0]}
        path = out / "meta" / "episodes" / "chunk-000" / f"file-{n:03d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        if spec.recorder == "lerobot":  # as lerobot writes it: snappy, dictionaries, 10 episodes a row group
            pq.write_table(pa.table(cols), path, row_group_size=EPISODES_ROW_GROUP, compression="snappy",
                           use_dictionary=True)
        else:
            pq.write_table(pa.table(cols), path)
    pq.write_table(_tasks_table(TASKS[:spec.tasks]), out / "meta" / "tasks.parquet")

    total = int(lengths.sum())
    names_state = (["episode", "frame", "sin", "cos", "mix", "task"] +
                   [f"extra{k}" for k in range(spec.state_dim - STATE_DIM)])[:spec.state_dim]
    features = {
        "observation.state": {"dtype": "float32", "shape": [spec.state_dim], "names": names_state},
        "action": {"dtype": "float32", "shape": [spec.state_dim], "names": [f"a{i}" for i in range(spec.state_dim)]},
        "next.done": {"dtype": "bool", "shape": [1], "names": None},
    }
    for cam in spec.cameras:
        info: dict[str, object] = {
            "video.height": spec.height, "video.width": spec.width, "video.codec": cam.codec,
            "video.pix_fmt": spec.pix_fmt_of(cam.codec), "video.is_depth_map": False, "video.fps": spec.fps,
            "video.channels": 3, "has_audio": False}
        if cam.depth:
            info = depth_info(spec.height, spec.width, spec.fps, spec.gop)
        features[cam.key] = {"dtype": "video", "shape": [spec.height, spec.width, 1 if cam.depth else 3],
                             "names": ["height", "width", "channels"], "info": info}
    for key, dtype in (("timestamp", "float32"), ("frame_index", "int64"), ("episode_index", "int64"),
                       ("index", "int64"), ("task_index", "int64")):
        features[key] = {"dtype": dtype, "shape": [1], "names": None}
    info = {
        "codebase_version": "v3.0", "robot_type": "dali_stream_sample", "total_episodes": spec.episodes,
        "total_frames": total, "total_tasks": spec.tasks, "chunks_size": spec.chunks_size,
        "data_files_size_in_mb": 100, "video_files_size_in_mb": 200, "fps": spec.fps,
        "splits": {"train": f"0:{spec.episodes}"},
        "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
        "video_path": "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4",
        "features": features,
        # the settings, and the files whose ids needed careful encoder settings (larger, slower to decode)
        SAMPLE_KEY: spec.record() | {"careful_files": sorted(str(p.relative_to(out)) for p in careful)},
    }
    (out / "meta" / "info.json").write_text(json.dumps(info, indent=2))

    frame_idx = np.concatenate([np.arange(L) for L in lengths])
    ep_idx = np.repeat(np.arange(spec.episodes), lengths)
    stats = {"observation.state": _stats(np.concatenate(all_state)), "action": _stats(np.concatenate(all_action)),
             "timestamp": _stats(frame_idx / spec.fps), "frame_index": _stats(frame_idx),
             "episode_index": _stats(ep_idx), "index": _stats(np.arange(total)),
             "task_index": _stats(np.repeat(task_of, lengths)),
             "next.done": _stats(np.concatenate([np.arange(L) == L - 1 for L in lengths]))}
    for c, cam in enumerate(spec.cameras):
        firsts = [(e, 0) for e in range(min(4, spec.episodes))]
        stats[cam.key] = {k: [[[x]] for x in v] for k, v in _stats(_camera_values(spec, c, firsts)).items()
                          if k != "count"}
        stats[cam.key]["count"] = [len(firsts)]
    (out / "meta" / "stats.json").write_text(json.dumps(stats, indent=2))
