"""An independent reading of a sample, the way lerobot's map-style LeRobotDataset.__getitem__ does it.

No planner, no segments: whole parquet files, clamped absolute indices, camera timestamps from the
clamped rows, and torchcodec on the original packed MP4 at round(timestamp * fps). Used to check the
loader's batches value for value.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


class Reference:
    def __init__(self, root, delta_timestamps=None):
        self.root = Path(root)
        self.info = json.loads((self.root / "meta/info.json").read_text())
        self.fps = self.info["fps"]
        eps = [pq.read_table(p).to_pylist() for p in sorted((self.root / "meta/episodes").glob("*/*.parquet"))]
        self.episodes = {e["episode_index"]: e for chunk in eps for e in chunk}
        self.rows = {}
        for path in sorted((self.root / "data").glob("*/*.parquet")):
            for row in pq.read_table(path).to_pylist():
                self.rows[row["index"]] = row
        tasks = pq.read_table(self.root / "meta/tasks.parquet").to_pylist()
        self.tasks = {t["task_index"]: t["__index_level_0__"] for t in tasks}
        self.video_keys = [k for k, f in self.info["features"].items() if f["dtype"] == "video"]
        self.delta = {k: [round(d * self.fps) for d in v] for k, v in (delta_timestamps or {}).items()}
        self._decoders = {}

    @staticmethod
    def _tensorish(value):
        arr = np.asarray(value)
        if arr.dtype.kind == "f":
            return arr.astype(np.float32)
        if arr.dtype.kind in "iu":
            return arr.astype(np.int64)
        return arr

    def item(self, index: int) -> dict:
        row = self.rows[index]
        ep = self.episodes[row["episode_index"]]
        start, end = ep["dataset_from_index"], ep["dataset_to_index"]
        out = {k: self._tensorish(v) for k, v in row.items()}
        query = {}
        for key, deltas in self.delta.items():
            q = [max(start, min(end - 1, index + d)) for d in deltas]
            out[f"{key}_is_pad"] = np.array([(index + d < start) or (index + d >= end) for d in deltas])
            query[key] = q
            if key not in self.video_keys:
                out[key] = np.stack([self._tensorish(self.rows[i][key]) for i in q])
        for key in self.video_keys:
            ts = [self.rows[i]["timestamp"] for i in query[key]] if key in query else [row["timestamp"]]
            out[key] = self._frames(ep, key, ts)
        out["task"] = self.tasks[row["task_index"]]
        return out

    def _frames(self, ep, key, timestamps):
        from torchcodec.decoders import VideoDecoder

        chunk, file = ep[f"videos/{key}/chunk_index"], ep[f"videos/{key}/file_index"]
        path = self.root / self.info["video_path"].format(video_key=key, chunk_index=chunk, file_index=file)
        dec = self._decoders.get(path)
        if dec is None:
            dec = self._decoders[path] = VideoDecoder(str(path), seek_mode="exact")
        shifted = [ep[f"videos/{key}/from_timestamp"] + t for t in timestamps]
        fps = dec.metadata.average_fps
        frames = dec.get_frames_at(indices=[round(t * fps) for t in shifted])
        assert np.allclose(frames.pts_seconds.numpy(), shifted, atol=1e-4), (frames.pts_seconds, shifted)
        data = frames.data.numpy()  # (T, C, H, W) uint8
        return data[0] if len(timestamps) == 1 else data
