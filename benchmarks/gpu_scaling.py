"""Tier 1's last step on the GPU node: what the open engine's decode threads wait for, measured two ways.

Past 2-4 decode threads the engine's samples/s fall while NVDEC stays 4-14 % busy and the host's CPU is far from
full (H200, 2026-11-29: 1.5 CPU ms a sample at 1,008 samples/s): the threads wait on something they share. This
step tells which, so the engine's next form is chosen on a measurement:

1. **Processes against threads**: P processes, each with the rig of `gpu_first.py` at one decode thread (its own
   engine, decoders, CUDA context and interpreter), measured over the same window after a barrier; their summed
   samples/s against one process at P decode threads (`gpu_first.py`'s runs of the same dataset). Processes that
   scale where threads do not: the threads wait on something per process (the interpreter's lock, or a lock of
   the CUDA context they share), and an engine in several processes is worth building.
2. **Processes handing their frames to one consumer**, as an engine of several processes would: each process
   decodes whole batches (one decode thread) and puts each camera's frames on a `torch.multiprocessing` queue
   (CUDA tensors cross by CUDA IPC, host ones by shared memory); the consumer reads every frame's painted ids on
   the device and drops it. Its samples/s against the processes' own (1.) is what the hand-off costs.
3. **The interpreter's lock during the decoder's calls**: one decoder fed a batch's packets call after call while
   a Python thread spins, and the time it slept waiting for the lock is read from Linux's schedstat
   (`lock_share`). Near 0: the decoder releases the lock
   while it works (FFmpeg's through PyAV); near 1: it holds it, and every decode thread of a process waits on the
   others' calls.

    python benchmarks/gpu_scaling.py --data .demo/gpu-first/h264 [--route cpu-open] [--procs 1,2,4,7]

`gpu_first.py measure` runs them after its colour check and writes them into `gpu_first.json` ("scaling").
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

PROCS = (1, 2, 4, 7)
HANDOFF_PROCS = (2, 4)  # processes handing frames to one consumer (2.)
START_TIMEOUT_S = 120  # a child that has not warmed up by then is reported, not waited for


def processes(root: Path, route: str, procs: int, window_s: float, device_index: int | None) -> dict[str, Any]:
    """`procs` processes, each one rig at one decode thread on dataset `root` (one frame per camera), measured over
    `window_s` after all have warmed up: their summed samples/s and each one's figures."""
    ctx = multiprocessing.get_context("spawn")  # a fresh interpreter and CUDA context each
    barrier, results = ctx.Barrier(procs + 1), ctx.Queue()
    children = [ctx.Process(target=_child, args=(str(root), route, device_index, window_s, barrier, results),
                            daemon=True) for _ in range(procs)]
    for child in children:
        child.start()
    t0 = time.perf_counter()
    try:
        barrier.wait(timeout=START_TIMEOUT_S)
    except threading.BrokenBarrierError:
        return {"processes": procs, "error": _said(results) or f"not every process warmed up within {START_TIMEOUT_S} s",
                "exit_codes": [c.exitcode for c in children]}
    started_s = time.perf_counter() - t0
    got = []
    for _ in children:
        try:
            got.append(results.get(timeout=window_s + 30))
        except Exception:  # noqa: BLE001 - reported: a child that died says so by its exit code
            break
    for child in children:
        child.join(timeout=30)
    failed = [r["error"] for r in got if "error" in r]
    runs = [r for r in got if "error" not in r]
    out: dict[str, Any] = {"processes": procs, "start_s": started_s, "exit_codes": [c.exitcode for c in children]}
    if failed or len(runs) < procs:
        out["error"] = failed[0] if failed else f"{procs - len(runs)} of {procs} processes sent no result"
        return out
    seconds = max(r["seconds"] for r in runs)
    out.update(samples_per_s=sum(r["samples"] for r in runs) / seconds,
               cpu_ms_per_sample=sum(r["cpu_ms_per_sample"] * r["samples"] for r in runs)
               / max(1, sum(r["samples"] for r in runs)),
               wrong_frames=sum(r["wrong_frames"] for r in runs), each=[
                   {k: r[k] for k in ("samples", "seconds", "samples_per_s", "cpu_ms_per_sample", "wrong_frames",
                                      "ms_per_sample")} for r in runs])
    return out


def _rig_or_say(root: str, route: str, device_index: int | None, barrier, queue):
    """A child's rig at one decode thread; None where it cannot be built, the error put on `queue` for the parent
    and the start barrier broken so that nobody waits for this child."""
    from gpu_rig import Rig

    try:
        return Rig(Path(root), route, 1, 1, device_index)
    except Exception as exc:  # noqa: BLE001 - sent to the parent, which reports it
        barrier.abort()
        queue.put({"error": f"{type(exc).__name__}: {exc}"})
        return None


def _said(queue) -> str | None:
    """The error a child that could not start put on `queue`, if it said one within a few seconds."""
    try:
        return queue.get(timeout=5).get("error")
    except Exception:  # noqa: BLE001 - none said
        return None


def _child(root: str, route: str, device_index: int | None, window_s: float, barrier, results) -> None:
    from gpu_rig import warm, window

    rig = _rig_or_say(root, route, device_index, barrier, results)
    if rig is None:
        return
    try:
        source = warm(rig)
        barrier.wait(timeout=START_TIMEOUT_S)
        results.put(window(rig, source, window_s))
    except Exception as exc:  # noqa: BLE001
        results.put({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        rig.close()


def handoff(root: Path, route: str, procs: int, window_s: float, device_index: int | None) -> dict[str, Any]:
    """`procs` decoding processes handing each camera's frames of every batch to this one (module doc, 2.): the
    samples/s this consumer receives over `window_s`, and the wrong frames among them by their painted ids."""
    import torch.multiprocessing as tmp

    from dali_stream.tools.paint import UnreadableIds, ids_of

    ctx = tmp.get_context("spawn")
    frames_q, barrier, stop = ctx.Queue(maxsize=4 * procs), ctx.Barrier(procs + 1), ctx.Event()
    children = [ctx.Process(target=_producer, args=(str(root), route, device_index, i, procs, frames_q, barrier, stop),
                            daemon=True) for i in range(procs)]
    for child in children:
        child.start()
    out: dict[str, Any] = {"processes": procs}
    try:
        barrier.wait(timeout=START_TIMEOUT_S)
    except threading.BrokenBarrierError:
        stop.set()
        return {**out, "error": _said(frames_q) or f"not every process warmed up within {START_TIMEOUT_S} s",
                "exit_codes": [c.exitcode for c in children]}
    from gpu_rig import block_cells

    samples = frames_n = wrong = 0
    cameras = None
    t0 = time.perf_counter()
    try:
        while time.perf_counter() - t0 < window_s:
            item = frames_q.get(timeout=30)
            if "error" in item:
                out["error"] = item["error"]
                break
            frames, expected = item["frames"], item["expected"]
            cells = block_cells(frames if frames.is_cuda else frames.numpy())
            for got_cells, want in zip(cells, expected):
                try:
                    wrong += ids_of(got_cells) != tuple(want)
                except UnreadableIds:
                    wrong += 1
            frames_n += len(expected)
            cameras = item["cameras"]
            samples += item["samples"] if item["last_camera"] else 0
            del frames, item
        seconds = time.perf_counter() - t0
    finally:
        stop.set()
        while any(c.is_alive() for c in children):  # the producers end once their frames are consumed
            try:
                frames_q.get(timeout=0.2)
            except Exception:  # noqa: BLE001 - empty: look again
                pass
            for child in children:
                child.join(timeout=0.1)
    if "error" in out:
        return out
    return {**out, "samples_per_s": samples / seconds, "frames": frames_n, "wrong_frames": wrong, "cameras": cameras,
            "exit_codes": [c.exitcode for c in children]}


def _producer(root: str, route: str, device_index: int | None, index: int, procs: int, frames_q, barrier,
              stop) -> None:
    """One decoding process of `handoff`: the batches of its share of each epoch (every `procs`-th), decoded on one
    thread, each camera's frames put on `frames_q` complete (the engine's stream synchronised first: the consumer
    waits on nothing of ours)."""
    import torch

    rig = _rig_or_say(root, route, device_index, barrier, frames_q)
    if rig is None:
        return
    try:
        def batch(plan):
            rows = [rig.store.rows(int(p)) for p in plan.episodes]
            for n, key in enumerate(rig.cameras):
                segs, idx = rig.builder.locate(plan, rows, key)
                frames, _ = rig.engine.decode(key, segs, idx)
                if rig.engine.stream is not None:
                    rig.engine.stream.synchronize()
                yield {"frames": frames if isinstance(frames, torch.Tensor) else torch.from_numpy(frames),
                       "expected": rig.expected(plan, key), "samples": plan.size, "cameras": len(rig.cameras),
                       "last_camera": n == len(rig.cameras) - 1}

        plan = rig.plan(0)
        for item in batch(plan.batch(index % plan.num_batches)):  # warm: decoders opened, kernels loaded
            del item
        barrier.wait(timeout=START_TIMEOUT_S)
        epoch = 0
        while not stop.is_set():
            plan = rig.plan(epoch)
            for i in range(index, plan.num_batches, procs):
                for item in batch(plan.batch(i)):
                    while not stop.is_set():
                        try:
                            frames_q.put(item, timeout=0.2)
                            break
                        except Exception:  # noqa: BLE001 - full: the consumer is behind
                            continue
                if stop.is_set():
                    break
            epoch += 1
    except Exception as exc:  # noqa: BLE001
        frames_q.put({"error": f"{type(exc).__name__}: {exc}"})
    finally:
        frames_q.cancel_join_thread()  # frames still queued are not waited for: the consumer has stopped
        rig.close()


def gil_probe(root: Path, route: str, device_index: int | None, seconds: float = 2.0) -> dict[str, Any]:
    """How much of the interpreter's time a counting thread gets while one decoder of the engine's kind is inside
    its calls, against while nothing else runs (module doc, 3)."""
    from gpu_rig import Rig

    from dali_stream.decode.feed import build_feed

    rig = Rig(root, route, 1, 1, device_index)
    try:
        plan = rig.plan(0).batch(0)
        rows = [rig.store.rows(int(p)) for p in plan.episodes]
        key = rig.cameras[0]
        segs, idx = rig.builder.locate(plan, rows, key)
        feed = build_feed(list(zip(segs, idx)))
        dec = rig.engine.make(feed.codec, key)
        try:
            calls = _raw_calls(dec, feed)
            for call in calls:  # warm: the decoder configured, its first pictures out
                call()
            return {"camera": key, **lock_share(calls, seconds)}
        finally:
            dec.close()
    finally:
        rig.close()


def lock_share(calls: list, seconds: float) -> dict[str, Any]:
    """`calls` made one after another for `seconds` alone (their mean time), then as long again while a Python thread
    spins: `gil_held_fraction` is the part of the time the spinning thread was not queued for a core that it slept
    rather than ran (Linux's per-thread schedstat: run and run-queue time), that is, waited for the interpreter's lock
    (near 1: the calls hold it; near 0: they release it). Queued time is left out of both: a busy machine keeps a
    waking thread on a run queue, which says nothing about the lock. None where the kernel keeps no schedstat."""
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for call in calls:
            call()
            n += 1
    alone_ms = 1e3 * (time.perf_counter() - t0) / max(1, n)
    stop = threading.Event()
    tid: list[int] = []

    def spin() -> None:
        tid.append(threading.get_native_id())
        while not stop.is_set():
            pass

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-3)  # a lock held by a call is asked back this often
    spinner = threading.Thread(target=spin, daemon=True)
    try:
        spinner.start()
        time.sleep(0.1)
        before, t0 = _schedstat(tid[0]), time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for call in calls:
                call()
        after, wall = _schedstat(tid[0]), time.perf_counter() - t0
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(switch)
    held = None
    if before is not None and after is not None:
        ran, queued = (after[0] - before[0]) / 1e9, (after[1] - before[1]) / 1e9
        held = min(1.0, max(0.0, (wall - ran - queued) / max(1e-9, wall - queued)))
    return {"calls": n, "ms_per_call": alone_ms, "gil_held_fraction": held}


def _schedstat(tid: int) -> tuple[int, int] | None:
    """(ns on a core, ns runnable on a run queue) of thread `tid` of this process, None without schedstat."""
    try:
        run, queued, _ = open(f"/proc/self/task/{tid}/schedstat").read().split()
    except (OSError, ValueError):
        return None
    return int(run), int(queued)


def _raw_calls(dec, feed) -> list:
    """One callable per decoder call of `feed` (each packet, then each clip's end of stream), straight into the
    decoder (PyNvVideoCodec's `Decode`, or PyAV's `CodecContext.decode`), pictures dropped: no conversion, no copy."""
    calls = []
    pts_all = feed.pts.tolist()
    if dec.device == "gpu":
        import numpy as np

        nvc = dec.nvc

        def call(unit: bytes | None, pts: int = 0):
            p = nvc.PacketData()
            buf = np.frombuffer(unit or b"", np.uint8)  # held by the call below: alive whenever it runs
            p.bsl_data, p.bsl = (int(buf.ctypes.data), int(buf.size)) if unit else (0, 0)
            p.pts = int(pts)
            return lambda: (list(dec.dec.Decode(p)), buf)

        for first, end in feed.clip_ranges():
            calls += [call(u, t) for u, t in zip(feed.units[first:end], pts_all[first:end])]
            calls.append(call(None))  # end of stream: the clip's last pictures out
        return calls
    import av

    for first, end in feed.clip_ranges():
        for unit, t in zip(feed.units[first:end], pts_all[first:end]):
            def send(unit=unit, t=t):
                p = av.Packet(unit)
                p.pts = t
                return list(dec.ctx.decode(p))
            calls.append(send)
        calls.append(lambda: (list(dec.ctx.decode(None)), dec.ctx.flush_buffers()))
    return calls


def scaling(root: Path, route: str, procs: list[int], window_s: float, device_index: int | None,
            handoff_procs: tuple[int, ...] = HANDOFF_PROCS, out: dict[str, Any] | None = None,
            saved: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """The module doc's measurements on dataset `root`, into `out` (a new dict if None), `saved()` called after each
    one (a call cut short keeps what it measured); a part that fails is written down with its error, and the next
    runs."""
    out = {} if out is None else out
    out.update(dataset=root.name, gil=None, processes=[], handoff=[])

    def attempt(measure: Callable[..., dict[str, Any]], *args) -> dict[str, Any]:
        try:
            return measure(*args)
        except Exception as exc:  # noqa: BLE001 - a finding, written down
            return {"error": f"{type(exc).__name__}: {exc}"}

    out["gil"] = attempt(gil_probe, root, route, device_index)
    saved()
    for kind, counts, measure in (("processes", procs, processes), ("handoff", handoff_procs, handoff)):
        for p in counts:
            got = {"processes": p, **attempt(measure, root, route, p, window_s, device_index)}
            out[kind].append(got)
            saved()
            print(f"scaling: {p} processes{' handing frames over' if kind == 'handoff' else ''}: "
                  + (f"{got['samples_per_s']:.0f} samples/s" if "samples_per_s" in got else got["error"]), flush=True)
    return out


def table(scaled: dict[str, Any], runs: list[dict[str, Any]]) -> list[str]:
    """summary.md's lines: processes against one process at as many decode threads (`runs`: gpu_first's)."""
    if "dataset" not in scaled:
        return []
    threads = {r["threads"]: r["samples_per_s"] for r in runs
               if r.get("dataset") == scaled["dataset"] and r.get("frames_per_camera") == 1}
    gil = scaled["gil"]
    lines = ["", f"processes against threads ({scaled['dataset']}, one frame per camera): P processes of one decode "
             "thread each, against one process of P decode threads", "",
             "| P | processes: samples/s | threads: samples/s | processes ÷ threads | CPU ms/sample | wrong frames |",
             "|---|---|---|---|---|---|"]
    for p in scaled["processes"]:
        n = p["processes"]
        if "samples_per_s" not in p:
            lines.append(f"| {n} | failed: {p.get('error')} | - | - | - | - |")
            continue
        t = threads.get(n)
        rate = p["samples_per_s"]
        shown, ratio = (f"{t:.0f}", f"{rate / t:.2f}") if t else ("-", "-")
        lines.append(f"| {n} | {rate:.0f} | {shown} | {ratio} | {p['cpu_ms_per_sample']:.2f} | {p['wrong_frames']} |")
    alone = {p["processes"]: p.get("samples_per_s") for p in scaled["processes"]}
    if scaled.get("handoff"):
        lines += ["", "the same processes handing each camera's frames to one consumer (CUDA IPC on the GPU), which "
                  "reads their painted ids", "", "| P | samples/s received | ÷ the processes alone | wrong frames |",
                  "|---|---|---|---|"]
        for h in scaled["handoff"]:
            if "samples_per_s" not in h:
                lines.append(f"| {h['processes']} | failed: {h.get('error')} | - | - |")
                continue
            base, rate = alone.get(h["processes"]), h["samples_per_s"]
            ratio = f"{rate / base:.2f}" if base else "-"
            lines.append(f"| {h['processes']} | {rate:.0f} | {ratio} | {h['wrong_frames']} of {h['frames']} |")
    if gil is None or "error" in gil:
        return lines + ["", f"the interpreter's lock during the decoder's calls: not measured ({(gil or {}).get('error')})"]
    fraction = gil.get("gil_held_fraction")
    lines += ["", f"the interpreter's lock during the decoder's calls: a spinning Python thread waited for it "
              f"{'-' if fraction is None else f'{fraction:.2f}'} of the time over {gil['calls']} calls of "
              f"{gil['ms_per_call']:.3f} ms (near 1: the decoder holds the lock; near 0: it releases it)"]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", required=True, help="a dataset of gpu_first.py prepare (e.g. .demo/gpu-first/h264)")
    ap.add_argument("--route", default="nvdec-open", choices=("nvdec-open", "cpu-open"))
    ap.add_argument("--procs", default=",".join(map(str, PROCS)))
    ap.add_argument("--window-s", type=float, default=3.0)
    args = ap.parse_args(argv)
    device_index = 0 if args.route == "nvdec-open" else None
    result = scaling(Path(args.data), args.route, [int(p) for p in args.procs.split(",")], args.window_s,
                     device_index)
    print(json.dumps(result, indent=1))
    print("\n".join(table(result, [])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
