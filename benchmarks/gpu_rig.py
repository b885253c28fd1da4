"""The open-decoder engine on its own, as the loader wires it but without DALI: a dataset's fetch stage, planner and
engine (`Rig`), batches decoded and every frame's painted ids checked, and a window of them timed from builder
threads as the loader's workers feed it (`warm`, `window`). What tier 1 of a GPU visit measures
(`benchmarks/gpu_first.py`) and its scaling step runs in several processes (`benchmarks/gpu_scaling.py`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np


class _Deny:
    """Imports the GPU node does not have, refused here too (`DALI_STREAM_DENY_IMPORTS=torchcodec,nvidia,...`):
    the CI dry run fails on a path that would need them there, as the node would."""

    def __init__(self, names: set[str]) -> None:
        self.names = names

    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in self.names:
            raise ImportError(f"{name} is not on the GPU node (DALI_STREAM_DENY_IMPORTS)")
        return None


if os.environ.get("DALI_STREAM_DENY_IMPORTS"):
    sys.meta_path.insert(0, _Deny(set(os.environ["DALI_STREAM_DENY_IMPORTS"].split(","))))  # type: ignore[arg-type]


BATCH, POOL, BUILDERS = 64, 16, 2
REFERENCE = [(0, 0), (0, 7), (1, 3), (2, 11)]  # (episode position, frame) whose pictures the colour check compares


class Rig:
    """One dataset's fetch stage, planner and open-decoder engine, as the loader wires them, without DALI."""

    def __init__(self, root: Path, route: str, threads: int, steps: int, device_index: int | None = None) -> None:
        from dali_stream.config import LoaderConfig
        from dali_stream.decode.colour import Colour
        from dali_stream.decode.cpu import DecoderCache
        from dali_stream.decode.route import route_named
        from dali_stream.fetch.store import EpisodeStore
        from dali_stream.graph.batches import BatchBuilder, BuildSpec
        from dali_stream.graph.engine_pictures import EngineFrames
        from dali_stream.graph.sources import EngineSource
        from dali_stream.loader.source_setup import open_source, windows

        self.root, self.route, self.steps = root, route_named(route), steps
        _, meta = open_source(str(root), LoaderConfig())
        self.cameras = list(meta.video_keys)
        fps = meta.fps
        deltas = {k: [(i - steps + 1) / fps for i in range(steps)] for k in self.cameras} if steps > 1 else {}
        cfg = LoaderConfig(delta_timestamps=deltas)
        self.catalog, self.meta = open_source(meta, cfg)
        self.deltas, _ = windows(self.catalog, cfg)
        self.store = EpisodeStore(self.catalog, cfg.tolerance_s, 1 << 30, DecoderCache(1, True), 2)
        sizes = {k: (c.height, c.width) for k, c in meta.cameras.items()}
        colours = None
        if (root / "colours.json").exists():  # what FFmpeg read on the CPU machine, keyed by this node's paths
            known = json.loads((root / "colours.json").read_text())
            colours = {}
            for pos in range(meta.num_episodes):
                for key in self.cameras:
                    path = meta.video_file(pos, key)
                    rel = os.path.relpath(path, str(root))
                    if rel in known:
                        colours[path] = Colour(int(known[rel]["matrix"]), bool(known[rel]["full_range"]))
        self.engine = self.route.make_engine(threads, device_index, sizes, colours)
        pictures = EngineFrames(self.catalog, {self.route: self.engine}, {}, lambda key, steps: None)
        self.builder = BatchBuilder(self.catalog, self.store, {k: EngineSource(k, self.route, pictures) for k in self.cameras},
                                    BuildSpec(self.deltas, cfg.tolerance_s))
        # builder-thread seconds: episodes' rows and segments from the fetch stage, the engine's decode call, the
        # painted-id check (the engine's own phases: `OpenDecoders.seconds`)
        self.seconds = dict.fromkeys(("fetch", "engine", "check"), 0.0)
        self.lock = threading.Lock()

    def plan(self, epoch: int):
        from dali_stream.plan.epoch import PlanConfig, resume_plan
        from dali_stream.plan.world import World

        config = PlanConfig(batch_size=BATCH, pool_size=POOL, seed=0, drop_last=False, delta_indices=self.deltas)
        return resume_plan(self.catalog.lengths, config, World(rank=0, world_size=1), epoch, [])

    def expected(self, plan, key: str) -> list[tuple[int, int]]:
        """(episode, frame) painted in each frame the batch shows of `key`, sample after sample, step after step."""
        rows = plan.windows[key].rows if key in plan.windows else plan.frames[:, None]
        return [(self.meta.episode_index(int(pos)), int(f)) for pos, r in zip(plan.episodes, rows) for f in r]

    def decode(self, plan, check: bool = True) -> tuple[int, list[str]]:
        """Batch `plan` through the fetch stage and the engine: (pictures decoded, wrong frames said)."""
        t0 = time.perf_counter()
        rows = [self.store.rows(int(p)) for p in plan.episodes]
        decoded, wrong = 0, []
        spent = dict.fromkeys(("fetch", "engine", "check"), 0.0)
        spent["fetch"] = time.perf_counter() - t0
        for key in self.cameras:
            t1 = time.perf_counter()
            segs, idx = self.builder.locate(plan, rows, key)
            t2 = time.perf_counter()
            frames, n = self.engine.decode(key, segs, idx)
            t3 = time.perf_counter()
            decoded += n
            if check:
                wrong += self._check(frames, self.expected(plan, key), key, plan)
            spent["fetch"] += t2 - t1
            spent["engine"] += t3 - t2
            spent["check"] += time.perf_counter() - t3
        with self.lock:
            for phase, seconds in spent.items():
                self.seconds[phase] += seconds
        return decoded, wrong

    def _check(self, frames, expected, key: str, plan) -> list[str]:
        from dali_stream.tools.paint import UnreadableIds, ids_of

        cells = block_cells(frames, self.engine.stream)
        out = []
        for n, (got_cells, want) in enumerate(zip(cells, expected)):
            try:
                got = ids_of(got_cells)
            except UnreadableIds as exc:
                got = f"unreadable ({exc})"
            if got != want:
                out.append(f"{key} batch {plan.index} frame {n}: painted {got}, planned {want}")
        if len(cells) != len(expected):
            out.append(f"{key} batch {plan.index}: {len(cells)} frames for {len(expected)} planned")
        return out

    def reference_pictures(self) -> dict[str, np.ndarray]:
        """The REFERENCE samples of every camera as this engine decodes them (H, W, 3) uint8, on the host."""
        from dali_stream.plan.epoch import BatchPlan

        chosen = [(p, f) for p, f in REFERENCE if p < self.meta.num_episodes and f < int(self.meta.lengths[p])]
        plan = BatchPlan(0, 0, np.array([p for p, _ in chosen]), np.array([f for _, f in chosen]), {})
        rows = [self.store.rows(int(p)) for p in plan.episodes]
        out = {}
        for key in self.cameras:
            segs, idx = self.builder.locate(plan, rows, key)
            frames, _ = self.engine.decode(key, segs, [i[:1] for i in idx])
            host = frames.cpu().numpy() if hasattr(frames, "cpu") else np.asarray(frames)
            for (p, f), picture in zip(chosen, host):
                out[f"{key}|{p}|{f}"] = picture
        return out

    def close(self) -> None:
        self.engine.close()
        self.store.close()


def block_cells(frames, stream=None) -> np.ndarray:
    """The mean luma of each painted id block of every frame (N, H, W, 3) uint8, (N, 3, 16), computed where the
    frames are (`paint.block_cells`; a CUDA tensor on the engine's stream, so only these numbers reach the host)."""
    from dali_stream.tools.paint import block_cells as cells_of

    if isinstance(frames, np.ndarray):
        return cells_of(frames.astype(np.float32).mean(axis=-1))
    import torch

    with torch.cuda.stream(stream) if stream is not None else _nothing():
        return cells_of(frames.float().mean(dim=-1)).cpu().numpy()


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def warm(rig: Rig):
    """The rig's batches, epoch after epoch, two of them decoded (decoders opened, first segments fetched, kernels
    loaded): what is left to measure."""
    def batches():
        epoch = 0
        while True:
            plan = rig.plan(epoch)
            for i in range(plan.num_batches):
                yield plan.batch(i)
            epoch += 1

    source = batches()
    for _ in range(2):
        rig.decode(next(source))
    return source


def window(rig: Rig, source, window_s: float) -> dict[str, Any]:
    """Batches of `source` decoded and checked by BUILDERS threads for `window_s` seconds: samples/s, CPU ms per
    sample of this process, wrong frames, and where a sample's time went."""
    wrong: list[str] = []
    samples = decoded = 0
    rig_before, engine_before = dict(rig.seconds), dict(rig.engine.seconds)
    order: deque = deque()
    pool = ThreadPoolExecutor(BUILDERS)
    t0, cpu0 = time.perf_counter(), time.process_time()
    for _ in range(BUILDERS):
        order.append(pool.submit(_timed, rig, next(source)))
    while order:
        size, got, bad = order.popleft().result()
        samples, decoded, wrong = samples + size, decoded + got, wrong + bad
        if time.perf_counter() - t0 < window_s:
            order.append(pool.submit(_timed, rig, next(source)))
    seconds, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    pool.shutdown()
    # thread-milliseconds per sample in each phase: the builder threads' (fetch, engine, check) and, inside the
    # engine's call, its decode threads' (summed over threads: more than the wall time when they overlap)
    phases = {f"builder_{k}": 1e3 * (v - rig_before[k]) / samples for k, v in rig.seconds.items()}
    phases.update({f"engine_{k}": 1e3 * (v - engine_before[k]) / samples for k, v in rig.engine.seconds.items()})
    return {"batch": BATCH, "samples": samples, "seconds": seconds, "samples_per_s": samples / seconds,
            "pictures_decoded": decoded, "cpu_ms_per_sample": 1e3 * cpu / samples, "wrong_frames": len(wrong),
            "wrong_examples": wrong[:5], "frames_checked": samples * rig.steps * len(rig.cameras),
            "decoders_opened": rig.engine.opened, "ms_per_sample": phases}


def _timed(rig: Rig, plan) -> tuple[int, int, list[str]]:
    decoded, wrong = rig.decode(plan)
    return plan.size, decoded, wrong
