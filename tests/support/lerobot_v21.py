"""A LeRobot v2.1 dataset as lerobot's v2.1 recorder wrote them, for lerobot's own v2.1 -> v3.0 converter (a developer
tool, not part of `make test`): most v3.0 datasets on the Hub came out of that converter, which concatenates each
camera's per-episode MP4s, places the episodes by the files' durations and writes each data file as one parquet row
group (decoded once into `table_cache_dir`).

    .venv/bin/python tests/support/lerobot_v21.py /tmp/v21                  # 7 episodes, H.264 + AV1 cameras, painted ids
    # in a Python 3.12 venv with lerobot 0.6.1 (it moves the v2.1 folder to /tmp/v21_old):
    python -c "from lerobot.scripts.convert_dataset_v21_to_v30 import convert_dataset as c; c('local/v21', root='/tmp/v21', push_to_hub=False)"
    python tests/support/lerobot_crosscheck.py dump /tmp/v21 items.npz      # lerobot's samples
    .venv/bin/python tests/support/lerobot_crosscheck.py compare /tmp/v21 items.npz
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dali_stream.tools.lerobot_recorder import encode_episode
from dali_stream.tools.paint import render

FPS, H, W = 30, 96, 128
CAMERAS = {"observation.images.front": "h264", "observation.images.wrist": "av1"}
TASKS = ["pick the cube", "place the cube"]


def _stats(x) -> dict:
    x = np.asarray(x, np.float64)
    return {"min": x.min(0).tolist(), "max": x.max(0).tolist(), "mean": x.mean(0).tolist(), "std": x.std(0).tolist(),
            "count": [len(x)]}


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_v21(root: Path, episodes: int = 7, seed: int = 5) -> int:
    """The dataset at `root` (replaced): `episodes` episodes of 25-69 frames; returns its frames."""
    shutil.rmtree(root, ignore_errors=True)
    (root / "meta").mkdir(parents=True)
    lengths = np.random.default_rng(seed).integers(25, 70, size=episodes).tolist()
    rows, stats, index = [], [], 0
    for e, n in enumerate(lengths):
        f = np.arange(n)
        state = np.stack([np.full(n, e), f, np.sin(f / 7), np.cos(f / 7), f * 0.01, np.full(n, e % 2)], 1)
        state = state.astype(np.float32)
        action = (state + 0.5).astype(np.float32)
        task = e % 2
        table = pa.table({"observation.state": pa.FixedSizeListArray.from_arrays(pa.array(state.ravel()), 6),
                          "action": pa.FixedSizeListArray.from_arrays(pa.array(action.ravel()), 6),
                          "timestamp": (f / FPS).astype(np.float32), "frame_index": f, "episode_index": np.full(n, e),
                          "index": np.arange(index, index + n), "task_index": np.full(n, task)})
        path = root / f"data/chunk-000/episode_{e:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        episode_stats = {"observation.state": _stats(state), "action": _stats(action),
                         "timestamp": _stats((f / FPS)[:, None]), "frame_index": _stats(f[:, None]),
                         "episode_index": _stats(np.full((n, 1), e)),
                         "index": _stats(np.arange(index, index + n)[:, None]),
                         "task_index": _stats(np.full((n, 1), task))}
        for c, (key, codec) in enumerate(CAMERAS.items()):
            frames = [render(H, W, e, k, c) for k in range(n)]
            video = root / f"videos/chunk-000/{key}/episode_{e:06d}.mp4"
            video.parent.mkdir(parents=True, exist_ok=True)
            encode_episode(video, frames, codec, FPS, 2, 30, "yuv420p", H, W)
            pixels = _stats(np.stack(frames).reshape(-1, 3) / 255.0)
            episode_stats[key] = {k: v if k == "count" else [[[x]] for x in v] for k, v in pixels.items()}
            episode_stats[key]["count"] = [n]
        stats.append({"episode_index": e, "stats": episode_stats})
        rows.append({"episode_index": e, "tasks": [TASKS[task]], "length": n})
        index += n
    _jsonl(root / "meta/episodes.jsonl", rows)
    _jsonl(root / "meta/episodes_stats.jsonl", stats)
    _jsonl(root / "meta/tasks.jsonl", [{"task_index": i, "task": t} for i, t in enumerate(TASKS)])
    scalar = {"dtype": "int64", "shape": [1], "names": None}
    video_info = {"video.height": H, "video.width": W, "video.pix_fmt": "yuv420p", "video.is_depth_map": False,
                  "video.fps": FPS, "video.channels": 3, "has_audio": False}
    features = {"observation.state": {"dtype": "float32", "shape": [6], "names": None},
                "action": {"dtype": "float32", "shape": [6], "names": None},
                **{k: {"dtype": "video", "shape": [H, W, 3], "names": ["height", "width", "channels"],
                       "info": {**video_info, "video.codec": codec}} for k, codec in CAMERAS.items()},
                "timestamp": {"dtype": "float32", "shape": [1], "names": None},
                **{k: scalar for k in ("frame_index", "episode_index", "index", "task_index")}}
    info = {"codebase_version": "v2.1", "robot_type": "so100", "total_episodes": episodes, "total_frames": index,
            "total_tasks": len(TASKS), "total_videos": episodes * len(CAMERAS), "total_chunks": 1,
            "chunks_size": 1000, "fps": FPS, "splits": {"train": f"0:{episodes}"},
            "data_path": "data/chunk-{episode_chunk:03d}/episode_{episode_index:06d}.parquet",
            "video_path": "videos/chunk-{episode_chunk:03d}/{video_key}/episode_{episode_index:06d}.mp4",
            "features": features}
    (root / "meta/info.json").write_text(json.dumps(info, indent=2))
    return index


if __name__ == "__main__":
    print(f"wrote a LeRobot v2.1 dataset of {write_v21(Path(sys.argv[1]))} frames to {sys.argv[1]}")
