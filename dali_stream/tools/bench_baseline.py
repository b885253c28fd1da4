"""The peer `dali-stream bench` compares against: a map-style dataset read the way lerobot's LeRobotDataset does.

`LeRobotStyleDataset[index]` holds the data tables in memory (as Hugging Face datasets' Arrow does), clamps
window rows to the episode, and decodes every camera from the packed MP4 with torchcodec: one cached
`VideoDecoder(file, seek_mode="approximate")` per file per worker, `get_frames_at(round(t * fps))`, as
lerobot 0.6's `decode_video_frames_torchcodec`; a depth camera through PyAV as lerobot's `decode_video_frames_pyav`
(a seek to the keyframe before the first time asked, then forward, the nearest frames kept) and its codes turned into
millimetres; a camera stored as images in the tables decodes its rows' images (lerobot's `datasets.Image` does,
through PIL). A plain `torch.utils.data.DataLoader` batches it. The
samples are the ones the loader delivered in its measured window, in the same order.

One difference: where a file's frames run slightly ahead of k/fps (episodes concatenated as lerobot's recorder
does: an H.264 file of the sample writer's lerobot mode, 553 frames whose last shows at 18.399 s, not 552/30 =
18.400 s), an approximate seek for the last frame asks for a time no frame reaches and torchcodec raises "no more
frames left to decode" (lerobot 0.6 would raise there too); the baseline then reopens that file in exact seek mode
and decodes the same frames, so it times the work instead of failing.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np


class LeRobotStyleDataset:
    def __init__(self, meta, deltas: dict[str, list[float]]) -> None:
        import pyarrow as pa

        from ..fetch.tables import image_bytes
        from ..source.storage import read_parquet

        self.meta = meta
        self.cameras = list(meta.video_keys)
        paths = sorted({meta.data_file(p) for p in range(meta.num_episodes)})
        self.images = list(meta.image_keys)
        table = pa.concat_tables([read_parquet(meta.data_fs, p, columns=[*meta.table_keys, *self.images])
                                  for p in paths])
        order = np.argsort(table.column("index").to_numpy())
        self.columns = {k: _column(table.column(k))[order] for k in meta.table_keys}
        self.encoded = {k: image_bytes(table.column(k))[order] for k in self.images}
        self.episode_of = {int(e): p for p, e in enumerate(meta.episodes["episode_index"])}
        self.delta = {k: [round(d * meta.fps) for d in v] for k, v in deltas.items()}
        self._decoders: dict[str, Any] = {}
        self._exact: set[str] = set()  # files reopened in exact seek mode (module doc)

    def __len__(self) -> int:
        return len(self.columns["index"])

    def _decoder(self, path: str, exact: bool = False):
        """This worker's decoder of `path` (lerobot's approximate seek mode; exact where it cannot reach a frame)."""
        from torchcodec.decoders import VideoDecoder

        dec = self._decoders.get(path)
        if dec is None or (exact and path not in self._exact):
            mode = "exact" if exact else "approximate"
            dec = self._decoders[path] = VideoDecoder(self.meta.data_fs.open(path, "rb"), seek_mode=mode)
            if exact:
                self._exact.add(path)
        return dec

    def _depth(self, path: str, camera, times: list[float]):
        """A depth camera's frames at file times `times` as lerobot 0.6.1 reads them (module doc): (T, 1, H, W)
        float32 millimetres."""
        import av
        import torch

        from ..decode.depth import codes_of

        for start in (min(times), 0.0):  # where lerobot's seek lands past a frame (open GOPs over 2), from the start
            shown: list[tuple[float, Any]] = []
            with self.meta.data_fs.open(path, "rb") as raw, av.open(raw) as container:
                stream = container.streams.video[0]
                container.seek(round(start / stream.time_base) - 1, backward=True, any_frame=False, stream=stream)
                for frame in container.decode(stream):
                    if frame.pts is None:
                        continue
                    shown.append((float(frame.pts * stream.time_base), codes_of(frame)))
                    if shown[-1][0] >= max(times):
                        break
            at = np.array([t for t, _ in shown])
            nearest = [int(np.abs(at - t).argmin()) for t in times]
            if all(abs(at[n] - t) < 0.5 / self.meta.fps for n, t in zip(nearest, times)):
                break
        codes = np.stack([shown[n][1] for n in nearest])[:, None]
        out = np.empty(codes.shape, np.float32)
        camera.depth.write(codes, out, "mm")
        return torch.from_numpy(out)

    def __getitem__(self, index: int) -> dict[str, Any]:
        import torch

        meta = self.meta
        pos = self.episode_of[int(self.columns["episode_index"][index])]
        start, end = int(meta.episodes["dataset_from_index"][pos]), int(meta.episodes["dataset_to_index"][pos])
        item: dict[str, Any] = {k: torch.from_numpy(np.asarray(v[index])) for k, v in self.columns.items()}
        rows = {}
        for key, steps in self.delta.items():
            q = [min(max(index + d, start), end - 1) for d in steps]
            item[f"{key}_is_pad"] = torch.tensor([not start <= index + d < end for d in steps])
            rows[key] = q
            if key not in self.cameras and key not in self.images:
                item[key] = torch.from_numpy(self.columns[key][q])
        from ..decode.images import decode_image

        for key in self.images:
            pictures = [decode_image(self.encoded[key][i], key) for i in rows.get(key, [index])]
            frames = torch.from_numpy(np.stack(pictures)).permute(0, 3, 1, 2).float() / 255.0
            item[key] = frames if key in rows else frames[0]
        for key in self.cameras:
            ts = self.columns["timestamp"][rows[key]] if key in rows else [self.columns["timestamp"][index]]
            if meta.cameras[key].depth is not None:
                depth = self._depth(meta.video_file(pos, key), meta.cameras[key],
                                    [float(meta.cameras[key].from_timestamp[pos]) + float(t) for t in ts])
                item[key] = depth if key in rows else depth[0]
                continue
            dec = self._decoder(meta.video_file(pos, key))
            shifted = [float(meta.cameras[key].from_timestamp[pos]) + float(t) for t in ts]
            indices = [round(t * dec.metadata.average_fps) for t in shifted]
            try:
                frames = dec.get_frames_at(indices=indices).data
            except RuntimeError:  # an approximate seek past the file's last frame (module doc): exact mode
                dec = self._decoder(meta.video_file(pos, key), exact=True)
                frames = dec.get_frames_at(indices=indices).data
            frames = frames.float() / 255.0
            item[key] = frames if key in rows else frames[0]
        item["task"] = meta.tasks.get(int(self.columns["task_index"][index]), "")
        return item


def _column(col) -> np.ndarray:
    from ..fetch.tables import _to_numpy

    return _to_numpy(col)


def window_s(cfg) -> float:
    """Each worker count's measured window: `--duration-s` shared out over the worker counts (at least 2 s each),
    so the baseline takes about as long as the loader's own window, not once per worker count."""
    return max(2.0, cfg.duration_s / max(1, len(cfg.baseline_workers)))


def run_baseline(cfg, meta, deltas, loader, window) -> dict[str, Any]:
    """samples/s of the LeRobot-style DataLoader over the window's samples, at each worker count."""
    from torch.utils.data import DataLoader

    from .steady import SteadyWindow

    indices = []
    for epoch, index in window:
        plan = loader.batch_plan(epoch, index)
        starts = meta.episodes["dataset_from_index"][plan.episodes]
        indices.extend((starts + plan.frames).tolist())
    runs = []
    for workers in cfg.baseline_workers:
        dataset = LeRobotStyleDataset(meta, deltas)
        dl = DataLoader(dataset, batch_size=cfg.loader.batch_size, sampler=indices, num_workers=workers,
                        drop_last=True, persistent_workers=False)
        steady = SteadyWindow(cfg.warmup_batches, window_s(cfg))
        it = iter(dl)
        t_first = time.perf_counter()
        samples = 0
        for batch, in_window in steady.timed(it):
            if in_window:
                samples += len(batch["task"])
            if steady.closed:
                break
        first = None if steady.first_got is None else steady.first_got - t_first
        seconds = steady.seconds
        del it, dl
        runs.append({"num_workers": workers, "samples": samples, "seconds": seconds,
                     "samples_per_s": samples / seconds if seconds else 0.0, "first_batch_latency_s": first})
    return {"runs": runs, "what": "torch DataLoader over a LeRobotDataset-style map dataset (torchcodec per sample, "
                                  "approximate seek, cached decoders per worker)",
            "lerobot": _lerobot_note()}


def _lerobot_note() -> str:
    try:
        import lerobot  # noqa: F401

        return f"lerobot {lerobot.__version__} importable (not yet benchmarked directly)"
    except Exception:
        return "lerobot not importable in this environment (lerobot 0.6 needs Python >= 3.12)"
