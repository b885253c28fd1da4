"""lerobot's `image_transforms`, applied to each sample's camera tensor with torch's RNG seeded per (seed, epoch,
batch, sample, camera), so a resumed run transforms exactly as an uninterrupted one.

A transform such as torchvision's ColorJitter + RandomAffine takes milliseconds a sample on the CPU, and draws from
torch's one process-wide generator: threads cannot share it and keep the draws reproducible. So with
`transform_workers` > 0 (by default `num_workers`) the samples are transformed in that many worker processes
(spawned once, on the loader's first transformed batch; tensors travel through shared memory,
torch.multiprocessing's), each sample seeded as in one process: the same pixels as in the calling thread, in
parallel, while the loader's threads build the next batches. Batches on a GPU, or `transform_workers=0`, transform
in the calling thread (CUDA kernels are queued there anyway). The transform must be picklable to reach the
processes (torchvision's and lerobot's ImageTransforms are; a lambda is not: it then runs in the calling thread,
with a warning).

The processes are the loader's: they ignore Ctrl-C (a terminal sends it to every process of the foreground group)
and end when the loader closes, at the latest at interpreter exit, or when the loader's process is gone. A Ctrl-C
in the loop ends the epoch's builder threads without waiting for the transforms they asked for (`stop`): the first
batch's wait on processes still starting (importing torch and the transform's modules, seconds each) would
otherwise hold the process's exit that long.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import signal
import threading
import time
from typing import Any, Callable

import numpy as np

from ..decode.spawning import without_main
from ..plan import salts

log = logging.getLogger("dali_stream")
PARENT_CHECK_S = 1.0  # how often an idle worker process looks whether the loader's process is still there


def sample_seeds(seed: int, epoch: int, batch: int, camera: int, samples: int) -> np.ndarray:
    """The torch seed of each sample's transform of camera number `camera` (its place in the batch's cameras)."""
    return np.random.SeedSequence([seed, epoch, batch, camera, salts.TRANSFORMS]).generate_state(samples, dtype=np.uint64)


def plan_seeds(seed: int, plan: Any, camera: int) -> np.ndarray:
    """The torch seed of each sample of batch `plan` (`plan.epoch.BatchPlan`) for camera number `camera`; a batch
    of picked samples (`plan.picked`) gives each sample the seed `loader.dataset[i]` alone gets (batch i of epoch 0 of
    one sample), whatever was asked beside it."""
    if plan.samples is None:
        return sample_seeds(seed, plan.epoch, plan.index, camera, plan.size)
    return np.array([sample_seeds(seed, 0, int(i), camera, 1)[0] for i in plan.samples.tolist()], dtype=np.uint64)


def apply(transform: Callable[[Any], Any], frames: Any, seed_list: Any, devices: list[int]) -> Any:
    """`transform` on each of `frames` (a tensor, samples first) under its seed; torch's RNG restored after."""
    import torch

    out = []
    for j, sample in enumerate(frames):
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(int(seed_list[j]))
            out.append(transform(sample))
    return torch.stack(out)


def _work(transform: Callable[[Any], Any], jobs: Any, results: Any) -> None:
    """A worker process: (job, frames, seed_list) from `jobs` -> (job, transformed frames or the exception) to
    `results`, until None, or until the loader's process is gone (killed: nothing would end this one). Ctrl-C is
    ignored: the loader ends its processes (`TransformPool.close`, at exit the same), and one interrupted would print
    a traceback per process and fail the batches of a loop that goes on after a Ctrl-C it caught."""
    import queue

    import torch

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    torch.set_num_threads(1)  # one core a process: the processes are the parallelism
    parent = multiprocessing.parent_process()
    while True:
        try:
            item = jobs.get(timeout=PARENT_CHECK_S)
        except queue.Empty:
            if parent is not None and not parent.is_alive():
                return
            continue
        if item is None:
            return
        job, frames, seed_list = item
        try:
            results.put((job, apply(transform, frames, seed_list, [])))
        except BaseException as exc:  # noqa: BLE001 - handed to the loader, which raises it in the caller
            results.put((job, exc))




class TransformPool:
    """`processes` worker processes that transform CPU tensors in parallel, each sample under its own seed."""

    END_S = 10.0  # seconds `close` gives the workers to end before it terminates them

    def __init__(self, transform: Callable[[Any], Any], processes: int) -> None:
        self.transform, self.processes = transform, processes
        self.in_processes = processes > 0 and _picklable(transform)
        self._lock = threading.Lock()
        self._workers: list[Any] = []  # running
        self._started: list[Any] = []  # every worker started, to tell one that ended
        self._closed = False
        self._jobs: Any = None
        self._results: Any = None
        self._done: dict[int, Any] = {}  # results that came, by job, until their caller takes them
        self._abandoned: set[int] = set()  # jobs whose caller stopped waiting: their results are dropped
        self._next_job = 0
        self._arrived = threading.Condition()

    def __call__(self, frames: Any, seed_list: Any, stop: threading.Event | None = None) -> Any:
        """`frames` (CPU tensor, samples first) transformed, in the processes where it can be. `stop` (the epoch
        ended: a Ctrl-C, a `break`) set before they are done: DaliStreamError, their results dropped on arrival."""
        if not self.in_processes or len(frames) == 0:
            return apply(self.transform, frames, seed_list, [])
        import torch

        _stopped(stop)  # no process started for a batch nobody will take
        self._open()
        parts = [p for p in np.array_split(np.arange(len(frames)), min(self.processes, len(frames))) if len(p)]
        with self._lock:
            jobs = list(range(self._next_job, self._next_job + len(parts)))
            self._next_job += len(parts)
        sent: list[int] = []
        try:
            for job, p in zip(jobs, parts):  # each part copied once, into shared memory: it travels as a handle
                part = torch.empty(frames[p[0]:p[-1] + 1].shape, dtype=frames.dtype).share_memory_()
                part.copy_(frames[p[0]:p[-1] + 1])
                self._jobs.put((job, part, [int(s) for s in seed_list[p[0]:p[-1] + 1]]))
                sent.append(job)
            out = [self._result(job, stop) for job in jobs]
        except BaseException:  # stopped, closed, a worker gone, a Ctrl-C: results still to come are not kept
            self._abandon(sent)
            raise
        return torch.cat(out)

    def _abandon(self, jobs: list[int]) -> None:
        """Nobody waits for `jobs` any more: their results, filed or still to come, are dropped."""
        with self._arrived:
            for job in jobs:
                if self._done.pop(job, None) is None:
                    self._abandoned.add(job)

    def _result(self, job: int, stop: threading.Event | None = None) -> Any:
        """Job `job`'s result: whichever thread waits reads the results queue and files what it reads."""
        import queue

        while True:
            _stopped(stop)
            with self._arrived:
                if job in self._done:
                    got = self._done.pop(job)
                    break
            try:
                other, value = self._results.get(timeout=0.2)
            except queue.Empty:
                from ..errors import DaliStreamError

                if self._closed:  # the loader closed while a builder waited: nothing more will come
                    raise DaliStreamError("the loader was closed while a batch was being transformed") from None
                dead = [w for w in self._started if not w.is_alive()]
                if dead:
                    raise DaliStreamError(f"an image_transforms worker process ended (pids {[w.pid for w in dead]}, "
                                          f"exit codes {[w.exitcode for w in dead]}); see its output above, or pass "
                                          "transform_workers=0 to transform in the calling thread") from None
                continue
            with self._arrived:
                if other in self._abandoned:
                    self._abandoned.discard(other)
                else:
                    self._done[other] = value
                self._arrived.notify_all()
        if isinstance(got, BaseException):
            raise got
        return got

    def _open(self) -> None:
        with self._lock:
            if self._workers:
                return
            if self._closed:
                from ..errors import DaliStreamError

                raise DaliStreamError("image_transforms asked for after the loader was closed")
            import torch.multiprocessing  # noqa: F401 - tensors then cross processes through shared memory

            ctx = multiprocessing.get_context("spawn")
            self._jobs, self._results = ctx.Queue(), ctx.Queue()
            with without_main():
                for _ in range(self.processes):
                    worker = ctx.Process(target=_work, args=(self.transform, self._jobs, self._results), daemon=True,
                                         name="dali-stream-transforms")
                    worker.start()
                    self._workers.append(worker)
                    self._started.append(worker)
            log.info("image_transforms: %d worker processes", self.processes)

    def stats(self) -> dict[str, Any]:
        """Where the transforms run (`StreamLoader.stats()["transforms"]`): `in_processes`, `processes` (worker
        processes they may use), the `pids` of those running now (started on the first batch that needs them)."""
        workers = list(self._workers)  # no lock: `_open` holds it while the processes start
        return {"in_processes": self.in_processes, "processes": self.processes, "pids": [w.pid for w in workers]}

    def close(self, wait: bool = True) -> None:
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for _ in workers:
            self._jobs.put(None)
        # asked to end; those that have not within END_S (a loaded machine, a transform mid-call) are terminated,
        # and joined: close does not return with a worker alive (wait=False, at exit or collection: terminated at
        # once, not joined)
        deadline = time.monotonic() + (self.END_S if wait else 0)
        for worker in workers:
            worker.join(timeout=max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.is_alive():
                worker.terminate()
        for worker in workers if wait else ():
            worker.join(timeout=5)
            if worker.is_alive():  # SIGTERM ignored or blocked: SIGKILL cannot be
                worker.kill()
                worker.join()


def _stopped(stop: threading.Event | None) -> None:
    """Raise where `stop` is set: the batch being transformed will not be taken."""
    if stop is not None and stop.is_set():
        from ..errors import DaliStreamError

        raise DaliStreamError("image_transforms stopped: the epoch this batch was built for ended before it was "
                              "handed over (a Ctrl-C, a break out of the loop)")


def _picklable(transform: Callable[[Any], Any]) -> bool:
    """Whether `transform` can reach a worker process: it pickles, naming nothing of the `__main__` script (which
    the workers do not run)."""
    import pickletools

    try:
        data = pickle.dumps(transform)
        why = "it names something defined in the __main__ script" if any(
            isinstance(arg, str) and arg.split(" ")[0] in ("__main__", "__mp_main__")
            for _, arg, _ in pickletools.genops(data)) else None
    except Exception as exc:  # noqa: BLE001 - any pickling failure means: run it in the calling thread
        why = f"{type(exc).__name__}: {exc}"
    if why is None:
        return True
    log.warning("image_transforms %r cannot go to worker processes (%s), so it runs in the calling thread, one "
                "sample at a time; define it in an importable module (torchvision's transforms.v2 and lerobot's "
                "ImageTransforms are) to spread it over transform_workers processes", transform, why)
    return False
