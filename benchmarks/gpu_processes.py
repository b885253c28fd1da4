"""Tier 2's first step on a GPU node: the whole loader on NVDEC's open engine in decode processes, against the CPU
route on every core of the node, every frame's painted ids checked.

    python benchmarks/gpu_processes.py --out DIR [--data .demo/gpu-first] [--route nvdec-open|cpu-open]
        [--processes 0,1,2,4,7] [--window-s 2] [--budget-s 140]

The cases (`CASES`: tier 1's datasets, `gpu_first.DATASETS`; batches of 64, two cameras): H.264 640x480 and
256x256 one frame per camera, each against the CPU route (`decode="cpu"`, torchcodec) with a worker per core and
the loader on NVDEC (`decode="gpu", nvdec_engine="open"`) at `decode_processes` 0 (the threaded engine), 7, 4, 2, 1;
HEVC 640x480 one frame against FFmpeg's decoders (`cpu-open`: the node's torchcodec 0.11.1 misreads lerobot-recorded
HEVC with the FFmpeg it finds there, an H200 2026-11-29), the loader at 0; H.264 640x480 and 256x256 in 8-step
windows of consecutive frames, the CPU route and the loader at 0. The loader's default (`Route.processes`: one
process per NVDEC engine within the rank's cores less one; 7 on an H100 or H200 with 16 cores) is measured in every
case and marked `default`: what `decode="auto"` would give users, which `gpu_decide.py` reads its ratios from. The
most wanted first, so that a sweep stopped by its budget loses the least: every one-frame case's CPU route, 0, 7
and default; then 4, 2, 1; then the windows (~130 s in all on an H200, planned: ~4 s a run on threads, ~8 s one
that spawns its decode processes).

Each run is one loader: built, `WARMUP` batches, then a window of `--window-s` seconds (opened when the batch after
the warm-up is asked for, closed at the first batch delivered after it; epochs follow one another as a training
loop's do: the datasets are small, ~7 batches an epoch, so an epoch's start is inside every window, and its waits
are reported apart). Recorded per run: samples/s; the same without the waits for each epoch's first batch (what a
larger dataset would approach); NVDEC utilisation over the window from NVML (the driver's libnvidia-ml, polled every
0.1 s; `nvidia-smi dmon` where NVML does not load); the engine's own counters (`loader.stats()["engines"]`:
processes, their ids, restarts, pictures, seconds by phase: restarts must be 0); CPU milliseconds per sample of the
loader's process and of its decode processes; and every delivered frame's painted ids against the batch's
episode and frame indices (the id blocks averaged on the device, read back after the window: 0 wrong frames).

The runs go in a child process (`child`), one loader after another, each result appended to an events file as it
ends; a child that dies (PyNvVideoCodec ends its process on a failed CUDA call) or a run that takes over
`RUN_TIMEOUT_S` is written down as that run's failure and a new child goes on with the rest. No run starts after
`--budget-s`. DIR/processes.json is rewritten as each run ends, so a call cut short keeps what it got; a table is
printed at the end. With `--route cpu-open` (the CI dry run and the CPU rehearsal): FFmpeg's decoders in NVDEC's
place, `--processes 0,2` by default, no NVDEC.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / ".demo/gpu-first"
BATCH = 64
WARMUP = 4  # batches before the window: the decode processes spawned and their decoders open
WINDOW_S = 2.0
BUDGET_S = 140.0  # no run starts after this many seconds of the sweep
RUN_TIMEOUT_S = 90.0  # one run (loader built, warmed, measured, closed) taking longer is stopped and written down
PROCESSES = {"nvdec-open": (0, 7, 4, 2, 1), "cpu-open": (0, 2)}
FIRST_PROCESSES = 2  # of --processes measured with each case's CPU route; the others once every case has those
FRAMES = {"single": 1, "window8": 8}  # frames per camera per sample (tier 1's modes)
# (dataset, mode, CPU route on every core, decode_processes: "all" of --processes, else these and the default)
CASES = (("h264", "single", "cpu", "all"), ("h264-256", "single", "cpu", "all"), ("hevc", "single", "cpu-open", (0,)),
         ("h264", "window8", "cpu", (0,)), ("h264-256", "window8", "cpu", (0,)))
NVML_EVERY_S = 0.1


# ---- NVDEC utilisation -----------------------------------------------------------------------------------------
class NvdecBusy:
    """NVDEC utilisation (%) of GPU `index` while the `with` block runs: NVML's `nvmlDeviceGetDecoderUtilization`
    through the driver's libnvidia-ml (no Python bindings needed) every NVML_EVERY_S; where NVML does not load,
    `nvidia-smi dmon` once a second (`bench_gpu.NvdecUtilisation`); `index` None: not measured (no GPU)."""

    def __init__(self, index: int | None) -> None:
        self.index, self.values, self.period_us = index, [], None
        self.why: str | None = None if index is not None else "no GPU in use"
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._dmon = None
        self._lib = self._handle = None
        if index is None:
            return
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            handle = ctypes.c_void_p()
            lib.nvmlDeviceGetHandleByIndex_v2.argtypes = [ctypes.c_uint, ctypes.POINTER(ctypes.c_void_p)]
            lib.nvmlDeviceGetDecoderUtilization.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint),
                                                            ctypes.POINTER(ctypes.c_uint)]
            for call, args in (("nvmlInit_v2", ()), ("nvmlDeviceGetHandleByIndex_v2", (index, ctypes.byref(handle)))):
                status = getattr(lib, call)(*args)
                if status != 0:
                    raise OSError(f"{call} returned NVML status {status}")
            self._lib, self._handle = lib, handle
        except (OSError, AttributeError) as exc:
            self.why = f"NVML: {exc}"

    def __enter__(self) -> "NvdecBusy":
        if self._lib is not None:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        elif self.index is not None:
            from dali_stream.tools.bench_gpu import NvdecUtilisation

            self._dmon = NvdecUtilisation(self.index).__enter__()
        return self

    def _poll(self) -> None:
        util, period = ctypes.c_uint(), ctypes.c_uint()
        while not self._stop.wait(NVML_EVERY_S):
            if self._lib.nvmlDeviceGetDecoderUtilization(self._handle, ctypes.byref(util), ctypes.byref(period)) == 0:
                self.values.append(int(util.value))
                self.period_us = int(period.value)

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._dmon is not None:
            self._dmon.__exit__(None, None, None)

    def result(self) -> dict[str, Any]:
        if self._dmon is not None:
            return {**self._dmon.result(), "nvml": self.why}
        if not self.values:
            return {"available": False, "why": self.why or "NVML reported no NVDEC utilisation"}
        return {"available": True, "mean_pct": float(np.mean(self.values)), "max_pct": int(max(self.values)),
                "samples": len(self.values), "sampling_period_us": self.period_us,
                "source": f"NVML nvmlDeviceGetDecoderUtilization every {NVML_EVERY_S:g} s"}


# ---- every frame's painted ids -------------------------------------------------------------------------------
class IdCheck:
    """Every delivered frame's painted ids against its batch's episode and frame indices (windows clamped at the
    episode's ends, as the loader pads them). `add` averages each frame's id blocks where the batch is (on the GPU:
    kernels queued on the caller's stream, no copy, no wait); `result` reads them back after the window."""

    def __init__(self, loader, cameras: list[str], steps: int) -> None:
        self.cameras, self.steps = cameras, steps
        self.lengths = {int(e): int(n) for e, n in zip(loader.meta.episodes["episode_index"], loader.meta.lengths)}
        self.cells: list = []
        self.indices: list = []

    def add(self, batch) -> None:
        from dali_stream.tools.paint import BITS, ROWS, block_cells, block_size

        self.indices.append((_kept(batch["episode_index"]), _kept(batch["frame_index"])))
        for key in self.cameras:
            x = batch[key]  # (B, 3, H, W), or (B, T, 3, H, W) with a window
            b = block_size(x.shape[-1])
            luma = x[..., :ROWS * b, :BITS * b].float().mean(dim=-3)
            if x.is_floating_point():
                luma = luma * 255.0
            self.cells.append(block_cells(luma, ROWS).reshape(-1, self.steps, ROWS, BITS))

    def result(self) -> dict[str, Any]:
        from dali_stream.tools.paint import BITS, DARK, LIGHT, MARGIN, UnreadableIds, check_value, ids_of

        if not self.cells:
            return {"wrong_frames": 0, "frames_checked": 0, "wrong_examples": []}
        import torch

        cells = torch.cat([c.cpu() for c in self.cells]).numpy()  # (samples x cameras in order, steps, rows, 16)
        want = []
        for episodes, frames in self.indices:
            pairs = [[(e, min(max(f + s, 0), self.lengths[e] - 1)) for s in range(1 - self.steps, 1)]
                     for e, f in zip(_listed(episodes), _listed(frames))]
            want += pairs * len(self.cameras)  # the batch's cameras one after the other, each over its samples
        want_ids = np.array(want, dtype=np.int64).reshape(len(want), self.steps, 2)
        checks: dict[tuple[int, int], int] = {}
        rows = np.empty(want_ids.shape[:2] + (3,), dtype=np.int64)
        rows[..., :2] = want_ids
        rows[..., 2] = [[checks.setdefault((e, f), check_value(e, f)) for e, f in w] for w in want_ids.tolist()]
        bits = (cells > (LIGHT + DARK) / 2).astype(np.int64) << np.arange(BITS)
        unclear = ((cells > DARK + MARGIN) & (cells < LIGHT - MARGIN)).any(axis=(-2, -1))
        wrong = unclear | (bits.sum(axis=-1) != rows).any(axis=-1)  # (frames, steps)
        examples = []
        for n, s in zip(*np.nonzero(wrong)):
            if len(examples) == 5:
                break
            try:
                got: Any = ids_of(cells[n, s])
            except UnreadableIds as exc:
                got = f"unreadable ({exc})"
            examples.append(f"sample-camera {n} step {s}: painted {got}, planned {tuple(want_ids[n, s].tolist())}")
        return {"wrong_frames": int(wrong.sum()), "frames_checked": int(wrong.size), "wrong_examples": examples}


def _kept(v):
    """A batch's index column, kept past the batch (a tensor copied where it is, without waiting for it)."""
    return v.clone() if hasattr(v, "clone") else np.array(v)


def _listed(v) -> list[int]:
    return [int(x) for x in (v.cpu().tolist() if hasattr(v, "cpu") else np.asarray(v).tolist())]


# ---- one run ---------------------------------------------------------------------------------------------------
def _cpu_seconds(pids: list[int]) -> float:
    """CPU seconds of these processes so far (0 for one that is gone or where psutil is missing)."""
    try:
        import psutil
    except ImportError:
        return 0.0
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def one_run(root: Path, mode: str, decode: Any, processes: int | None, cpu_route: bool, window_s: float,
            gpu: bool) -> dict[str, Any]:
    """One loader on dataset `root`: built, warmed, measured over `window_s`, checked, closed."""
    from dali_stream.decode.node import rank_cores
    from dali_stream.loader import StreamLoader
    from dali_stream.meta.dataset import DatasetMeta

    steps = FRAMES[mode]
    meta = DatasetMeta.open(str(root))
    cameras = list(meta.video_keys)
    deltas = {k: [(i - steps + 1) / meta.fps for i in range(steps)] for k in cameras} if steps > 1 else {}
    settings: dict[str, Any] = dict(batch_size=BATCH, delta_timestamps=deltas, drop_last=True)
    if cpu_route:
        settings.update(decode=decode, num_workers=len(os.sched_getaffinity(0)))
    else:
        settings.update(decode=decode, nvdec_engine="open", decode_processes=processes)
    t0 = time.perf_counter()
    loader = StreamLoader(str(root), **settings)
    out: dict[str, Any] = {"setup_s": time.perf_counter() - t0}
    try:
        engines = sorted({r for r in loader.decode_routes.values() if r.engine}, key=lambda r: r.name)
        out.update(routes=dict(loader.routes), num_workers=loader.resolved.num_workers,
                   engine_processes=dict(loader.resolved.engine_processes),
                   engine_threads=dict(loader.resolved.engine_threads),
                   default_processes={r.name: r.processes(loader.resolved.nvdec_engines, rank_cores())
                                      for r in engines},
                   codecs={k: c.codec for k, c in meta.cameras.items()},
                   frame_size={k: [int(c.height), int(c.width)] for k, c in meta.cameras.items()},
                   device=str(loader.device))
        check = IdCheck(loader, cameras, steps)
        device = str(loader.device)
        index = int(device.partition(":")[2] or 0) if gpu and not cpu_route and device.startswith("cuda") else None
        out.update(_stream(loader, check, window_s, NvdecBusy(index)))
        out.update(check.result())
        out["engines"] = loader.stats()["engines"]
        out["restarts"] = sum(int(e.get("restarts") or 0) for e in out["engines"].values())
    finally:
        t1 = time.perf_counter()
        loader.close()
        out["close_s"] = time.perf_counter() - t1
    return out


def _stream(loader, check: IdCheck, window_s: float, busy: NvdecBusy) -> dict[str, Any]:
    """Warm-up batches, then the window (module doc); epoch after epoch, each a new `for`."""
    t_start = time.perf_counter()
    delivered = samples = batches = epochs = 0
    first_s = opened = None
    check_s = 0.0
    waits: list[tuple[float, bool]] = []  # each window batch's wait, and whether it was its epoch's first
    cpu0 = pids = None
    closed = False
    while not closed and epochs < 1000:
        epochs += 1
        it = iter(loader)
        first_of_epoch = True
        while True:
            t0 = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                break
            t1 = time.perf_counter()
            delivered += 1
            first_s = t1 - t_start if first_s is None else first_s
            if opened is not None:
                samples += len(batch["task"])
                batches += 1
                waits.append((t1 - t0, first_of_epoch))
                check.add(batch)
                check_s += time.perf_counter() - t1
                if t1 - opened >= window_s:
                    closed = True
                    seconds = t1 - opened
                    break
            elif delivered == WARMUP:
                pids = [os.getpid(), *[p for e in loader.stats()["engines"].values() for p in (e.get("pids") or [])]]
                cpu0 = (time.process_time(), _cpu_seconds(pids[1:]))
                busy.__enter__()
                opened = time.perf_counter()
            first_of_epoch = False
        if hasattr(it, "close"):
            it.close()
        if delivered == 0:
            break
    busy.__exit__(None, None, None)
    if not closed or not samples:
        return {"samples_per_s": 0.0, "error": f"the window did not close: {delivered} batches in {epochs} epochs",
                "nvdec_utilisation": busy.result()}
    own, children = time.process_time() - cpu0[0], _cpu_seconds(pids[1:]) - cpu0[1]
    # an epoch's start costs its first batch's wait beyond a batch's usual one (the median of the others)
    usual = float(np.median([w for w, first in waits if not first] or [0.0]))
    epoch_starts = sum(max(0.0, w - usual) for w, first in waits if first)
    return {"samples_per_s": samples / seconds,
            "samples_per_s_within_epochs": samples / max(1e-9, seconds - epoch_starts),
            "window": {"seconds": seconds, "batches": batches, "samples": samples,
                       "epoch_starts": sum(first for _, first in waits), "epoch_starts_s": epoch_starts,
                       "median_wait_ms": 1e3 * usual, "check_s": check_s},
            "first_batch_s": first_s, "nvdec_utilisation": busy.result(),
            "cpu_ms_per_sample": {"loader": 1e3 * own / samples,
                                  "decode_processes": 1e3 * children / samples if len(pids) > 1 else None}}


# ---- the child: runs one after another -------------------------------------------------------------------------
def plan(route: str, processes: tuple[int, ...]) -> list[dict[str, Any]]:
    """The sweep's runs in order (module doc); `decode_processes` "default" is filled in once the loader said it."""
    runs = []
    for dataset, mode, cpu, which in CASES:
        case = f"{dataset}/{mode}"
        first = 0 if mode == "single" else 2  # windows after every one-frame run
        runs.append({"id": f"{case}/cpu", "case": case, "dataset": dataset, "mode": mode, "kind": "cpu",
                     "cpu_route": cpu, "priority": first})
        listed = list(processes if which == "all" else which)
        for i, n in enumerate(listed):
            runs.append({"id": f"{case}/{n}", "case": case, "dataset": dataset, "mode": mode, "kind": "engine",
                         "decode_processes": n, "priority": first if i < FIRST_PROCESSES else 1})
        runs.append({"id": f"{case}/default", "case": case, "dataset": dataset, "mode": mode, "kind": "engine",
                     "decode_processes": "default", "listed": listed, "priority": first})
    return sorted(runs, key=lambda r: r["priority"])


def child(args) -> int:
    from dali_stream.decode.node import Node
    from dali_stream.decode.routes import formats_of
    from dali_stream.meta.dataset import DatasetMeta
    from dali_stream.tools.bench import loader_decode

    given = json.loads(Path(args.runs).read_text())
    todo, defaults = given["runs"], given["defaults"]  # case -> the loader's default, from runs already done
    gpu = args.route == "nvdec-open"
    node = Node.probe() if gpu else None
    with open(args.events, "a") as events:
        def say(event: dict[str, Any]) -> None:
            events.write(json.dumps(event, default=_plain) + "\n")
            events.flush()

        for run in todo:
            if time.time() > args.deadline:
                say({"event": "skipped", "id": run["id"], "why": "the sweep's budget was spent"})
                continue
            root = Path(args.data) / run["dataset"]
            n = run.get("decode_processes")
            if n == "default":
                n = defaults.get(run["case"], defaults.get("any"))
                if n is None or n in run["listed"]:  # the default measured under its number: marked there
                    say({"event": "same", "id": run["id"], "decode_processes": n})
                    continue
            cpu = run["kind"] == "cpu"
            decode = run["cpu_route"] if cpu else (
                loader_decode("gpu", formats_of(DatasetMeta.open(str(root))), node) if gpu else "cpu-open")
            say({"event": "start", "id": run["id"], "time": time.time()})
            t0 = time.perf_counter()
            try:
                got = one_run(root, run["mode"], decode, n, cpu, args.window_s, gpu)
            except Exception as exc:  # noqa: BLE001 - a failure is a finding: written down, the next run goes on
                got = {"samples_per_s": 0.0, "error": f"{type(exc).__name__}: {exc}"[:2000]}
            got["seconds"] = time.perf_counter() - t0
            if not cpu:
                for r, d in (got.get("default_processes") or {}).items():
                    defaults.setdefault(run["case"], d)
                    defaults.setdefault("any", d)
            say({"event": "end", "id": run["id"], "decode_processes": n, "result": got})
    return 0


def _plain(v):
    """JSON for what json does not know (numpy's scalars and arrays)."""
    return v.item() if hasattr(v, "item") and getattr(v, "ndim", 1) == 0 else (
        v.tolist() if hasattr(v, "tolist") else str(v))


# ---- the parent: children, budget, report ----------------------------------------------------------------------
def measure(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    processes = tuple(int(p) for p in args.processes.split(",")) if args.processes else PROCESSES[args.route]
    runs = plan(args.route, processes)
    spec = {r["id"]: r for r in runs}
    t_begin, deadline = time.time(), time.time() + args.budget_s
    report: dict[str, Any] = {"route": args.route, "date": time.strftime("%Y-%m-%d %H:%M"), "batch": BATCH,
                              "window_s": args.window_s, "budget_s": args.budget_s, "warmup_batches": WARMUP,
                              "runs": []}
    done: dict[str, dict[str, Any]] = {}
    started: dict[str, float] = {}
    work = Path(tempfile.mkdtemp(prefix="gpu-processes-"))
    events, seen = work / "events.jsonl", 0

    def save() -> None:
        order = list(spec)
        report["runs"] = sorted(done.values(), key=lambda r: order.index(r["id"]))
        report["seconds"] = time.time() - t_begin
        (out / "processes.json").write_text(json.dumps(report, indent=1, default=_plain) + "\n")

    def end(run_id: str, got: dict[str, Any]) -> None:
        done[run_id] = {**spec[run_id], **got}
        if "event" not in got:
            _said(done[run_id])

    def read() -> str | None:
        """Fold the events written since the last read; returns the id of a run started and not ended."""
        nonlocal seen
        lines = events.read_text().splitlines() if events.exists() else []
        for line in lines[seen:]:
            e = json.loads(line)
            if e["event"] == "start":
                started[e["id"]] = e["time"]
            elif e["event"] == "end":
                end(e["id"], {**e["result"], "decode_processes": e["decode_processes"]})
            else:  # skipped (the budget), same (the default measured under its number)
                end(e["id"], {k: v for k, v in e.items() if k != "id"})
        seen = len(lines)
        save()
        return next((i for i in started if i not in done), None)

    while True:
        todo = [r for r in runs if r["id"] not in done]
        if not todo:
            break
        if time.time() > deadline:
            for r in todo:
                end(r["id"], {"event": "skipped", "why": "the sweep's budget was spent"})
            break
        defaults = {r["case"]: d for r in done.values() if r["kind"] == "engine"
                    for d in (r.get("default_processes") or {}).values()}
        defaults.update({"any": d for d in defaults.values()})
        (work / "runs.json").write_text(json.dumps({"runs": todo, "defaults": defaults}))
        cmd = [sys.executable, str(Path(__file__).resolve()), "child", "--runs", str(work / "runs.json"),
               "--events", str(events), "--data", args.data, "--route", args.route, "--window-s", str(args.window_s),
               "--deadline", str(deadline)]
        proc = subprocess.Popen(cmd, cwd=ROOT, start_new_session=True)  # its decode processes in its group
        status: int | str | None = None
        while status is None:
            time.sleep(0.5)
            status = proc.poll()
            running = read()
            if status is None and running is not None and time.time() - started[running] > RUN_TIMEOUT_S:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                status = f"stopped after {RUN_TIMEOUT_S:g} s"
        with _quiet():
            os.killpg(proc.pid, signal.SIGKILL)  # decode processes a dead child left behind
        running = read()
        if running is not None:  # it died or was stopped inside this run: written down, a new child goes on
            end(running, {"samples_per_s": 0.0, "error": f"the run's process ended: {status}"})
        else:  # it ended between runs: what it did not run is said, not retried
            for r in runs:
                if r["id"] not in done:
                    end(r["id"], {"samples_per_s": 0.0, "error": f"the sweep's process ended ({status}) before it"})
    save()
    for line in table(report):
        print(line, flush=True)
    events.unlink(missing_ok=True)
    (work / "runs.json").unlink(missing_ok=True)
    work.rmdir()
    bad = [r["id"] for r in report["runs"] if r.get("error") or r.get("wrong_frames") or r.get("restarts")]
    return 1 if bad else 0


class _quiet:
    """Ignores a process group already gone."""

    def __enter__(self):
        return self

    def __exit__(self, kind, *exc):
        return kind is not None and issubclass(kind, (ProcessLookupError, PermissionError))


def _said(r: dict[str, Any]) -> None:
    if r.get("error"):
        print(f"{r['id']}: failed: {r['error'][:300]}", flush=True)
        return
    util = r.get("nvdec_utilisation") or {}
    busy = f"NVDEC {util['mean_pct']:.0f} %" if util.get("available") else "NVDEC -"
    print(f"{r['id']}: {r['samples_per_s']:.0f} samples/s ({r['samples_per_s_within_epochs']:.0f} within epochs), "
          f"{busy}, wrong {r['wrong_frames']} of {r['frames_checked']}, restarts {r['restarts']}, "
          f"{r['seconds']:.1f} s", flush=True)


def runs_of(report: dict[str, Any]) -> dict[str, dict[Any, Any]]:
    """case -> {"cpu": the CPU route's run, n: the loader's run at decode_processes n, "default": the loader's
    default n, "failed": runs that failed or were skipped}."""
    cases: dict[str, dict[Any, Any]] = {}
    for r in report.get("runs", []):
        c = cases.setdefault(r["case"], {})
        if r.get("event") == "same":
            continue
        if r.get("event") or r.get("error"):
            c.setdefault("failed", []).append(r)
        elif r["kind"] == "cpu":
            c["cpu"] = r
        else:
            c[int(r["decode_processes"])] = r
            for d in (r.get("default_processes") or {}).values():
                c["default"] = d
    return cases


def table(report: dict[str, Any]) -> list[str]:
    """The sweep as Markdown: per case, the CPU route and the loader at each decode_processes."""
    lines = [f"# the loader in decode processes ({report['route']}), {report['date']}: batches of {report['batch']}, "
             f"{report['window_s']:g} s windows", "",
             "| case | decode_processes | samples/s | within epochs | ÷ CPU route | ÷ threads (0) | NVDEC % | "
             "CPU ms/sample (loader + processes) | restarts | wrong frames |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for case, c in runs_of(report).items():
        cpu, threads = c.get("cpu"), c.get(0)
        if cpu:
            lines.append(f"| {case} | CPU route {cpu['cpu_route']}, {cpu.get('num_workers')} workers | "
                         f"{cpu['samples_per_s']:.0f} | {cpu['samples_per_s_within_epochs']:.0f} | 1 | - | - | "
                         f"{_cpu_ms(cpu)} | - | {cpu['wrong_frames']} of {cpu['frames_checked']} |")
        for n in sorted(k for k in c if isinstance(k, int)):
            r = c[n]
            util = r.get("nvdec_utilisation") or {}
            cells = [case, f"{n}{' (default)' if c.get('default') == n else ''}", f"{r['samples_per_s']:.0f}",
                     f"{r['samples_per_s_within_epochs']:.0f}",
                     f"{r['samples_per_s'] / cpu['samples_per_s']:.2f}" if cpu and cpu["samples_per_s"] else "-",
                     f"{r['samples_per_s'] / threads['samples_per_s']:.2f}" if threads and threads["samples_per_s"]
                     else "-",
                     f"{util['mean_pct']:.0f} (max {util['max_pct']})" if util.get("available") else "-",
                     _cpu_ms(r), str(r["restarts"]), f"{r['wrong_frames']} of {r['frames_checked']}"]
            lines.append("| " + " | ".join(cells) + " |")
        for r in c.get("failed", []):
            what = "CPU route" if r["kind"] == "cpu" else r.get("decode_processes")
            lines.append(f"| {case} | {what} | {r.get('event') or 'failed'}: "
                         f"{(r.get('error') or r.get('why') or '')[:200]} |||||||")
    return lines


def _cpu_ms(r: dict[str, Any]) -> str:
    ms = r.get("cpu_ms_per_sample") or {}
    own, procs = ms.get("loader"), ms.get("decode_processes")
    return "-" if own is None else f"{own:.2f}" + (f" + {procs:.2f}" if procs is not None else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command")
    p = sub.add_parser("child", help="(internal) the runs of --runs, each appended to --events")
    p.add_argument("--runs", required=True)
    p.add_argument("--events", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--route", required=True)
    p.add_argument("--window-s", type=float, required=True)
    p.add_argument("--deadline", type=float, required=True)
    ap.add_argument("--out", help="the folder processes.json is written to")
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--route", default="nvdec-open", choices=tuple(PROCESSES))
    ap.add_argument("--processes", help="decode_processes measured on the one-frame H.264 cases (default "
                                        "0,7,4,2,1 on nvdec-open, 0,2 on cpu-open)")
    ap.add_argument("--window-s", type=float, default=WINDOW_S)
    ap.add_argument("--budget-s", type=float, default=BUDGET_S)
    args = ap.parse_args(argv)
    if args.command == "child":
        return child(args)
    if not args.out:
        ap.error("--out is required")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
