"""How long a `dali-stream bench` run takes, phase by phase: each phase timed as it runs (`Phases`, the result's
`phases`), and the whole run estimated from what the loader's warm-up measured on this node (`estimate`), so the
time said before the window matches the run's."""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

SETUP, WARMUP, WINDOW, STATISTICS = "setup", "loader warm-up", "loader window", "the window's statistics"
LIMIT, BASELINE = "decode limit", "baseline"


class RssSampler:
    """Peak resident memory of this process and its children (psutil), sampled every 50 ms."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self) -> int:
        try:
            import psutil

            me = psutil.Process()
            total = me.memory_info().rss
            for child in me.children(recursive=True):
                try:
                    total += child.memory_info().rss
                except psutil.Error:
                    pass
            return total
        except ImportError:
            import resource

            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._sample())
            self._stop.wait(0.05)

    def __enter__(self) -> "RssSampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._sample())


class Phases:
    """A run's phases, timed: `phases(name)` ends the phase before and begins `name`, telling `progress(name)`;
    `seconds` holds each phase's wall time, in the order they ran."""

    def __init__(self, progress: Callable[[str], Any] | None = None) -> None:
        self.progress = progress
        self.seconds: dict[str, float] = {}
        self.started = time.perf_counter()
        self._name: str | None = None
        self._t0 = self.started

    def __call__(self, name: str) -> None:
        self.end()
        self._name, self._t0 = name, time.perf_counter()
        if self.progress is not None:
            self.progress(name)

    def end(self) -> dict[str, float]:
        if self._name is not None:
            self.seconds[self._name] = self.seconds.get(self._name, 0.0) + time.perf_counter() - self._t0
            self._name = None
        return self.seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


# What the phases after the window cost, in frames decoded at the loader's measured cost a frame (thread-seconds, its
# `builder.decode_s / decoded_frames`), fitted on a 2-core VM's runs of the bench samples and the test datasets: the
# decode limit decodes the window's frames again a sample at a time (cheaper a frame than the loader's, which shares
# its cores with the batches' assembly), the open episodes whole, and the frames again with the loader's write; the
# baseline decodes each sample's frames through a seek.
PER_SAMPLE, WHOLE, WITH_LAYOUT, BASELINE_SEEK = 0.5, 0.7, 1.5, 2.2
BASELINE_START_S, STATISTICS_S = 0.6, 1.0  # a DataLoader's workers started and its tables read; the window summed


def estimate(cfg, loader, phases: Phases, frames_per_sample: int, got: dict[str, Any] | None = None
             ) -> dict[str, Any]:
    """The run's phases in seconds: those done as timed, the rest from the loader's decode cost a frame measured so
    far (`per_frame_s`, thread-seconds) and the frames each phase decodes: the window's (`got`, once it closed), or
    before, the window's at the warm-up's frames delivered a frame decoded. `total_s`: their sum."""
    import os

    import numpy as np

    now = loader.stats()
    threads = max(1, loader.resolved.num_workers)
    decoded = now["build"]["decoded_frames"]
    per_frame = now["build"]["decode_s"] / decoded if decoded else 0.0
    out = dict(phases.seconds)
    if phases._name is not None:  # the phase under way, so far
        out[phases._name] = out.get(phases._name, 0.0) + time.perf_counter() - phases._t0
    lengths = np.asarray(loader.meta.lengths)
    cameras = len(loader.meta.camera_keys)
    if got is None:
        window = (cfg.num_batches * out.get(WARMUP, 0.0) / max(1, cfg.warmup_batches) if cfg.num_batches
                  else cfg.duration_s)
        out[WINDOW] = window
        delivered = cfg.warmup_batches * cfg.loader.batch_size * frames_per_sample
        frames = window * threads / per_frame * min(1.0, delivered / decoded) if per_frame and delivered else 0.0
        pool = min(len(lengths), loader.plan_config.pool_size)
        episodes = max(pool * float(np.mean(lengths)) * cameras, window * threads / per_frame if per_frame else 0.0)
    else:
        frames = got["frames"]
        touched = {int(e) for epoch, index in got["window"] for e in loader.batch_plan(epoch, index).episodes}
        episodes = float(sum(int(lengths[p]) for p in touched) * cameras)
    out[STATISTICS] = max(out.get(STATISTICS, 0.0), STATISTICS_S)  # under way as the window closed
    if cfg.limit:
        work = frames * PER_SAMPLE + (episodes * WHOLE if now["episode_frames"] is not None else 0.0)
        out[LIMIT] = (work + (frames * WITH_LAYOUT if loader.host_batches else 0.0)) * per_frame / threads
    if cfg.baseline:
        from .bench_baseline import window_s

        sample_s = frames_per_sample * per_frame * BASELINE_SEEK
        cores = len(os.sched_getaffinity(0))
        samples = frames / max(1, frames_per_sample)  # its sampler: the window's samples, then it stops
        each = [sample_s / min(max(1, workers), cores) for workers in cfg.baseline_workers]
        out[BASELINE] = sum(BASELINE_START_S + min(window_s(cfg) + (cfg.warmup_batches + 2) * cfg.loader.batch_size * s,
                                                   samples * s) for s in each)
    return {"when": "window" if got else "warm-up", "phases": out, "total_s": sum(out.values()),
            "per_frame_s": per_frame, "threads": threads, "frames": frames, "episode_frames": episodes}
