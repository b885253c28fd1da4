"""The first call on a GPU node: NVDEC through the open-decoder engine, measured and checked without DALI or FFmpeg.

    python benchmarks/gpu_first.py prepare [--data .demo/gpu-first] [--small]     # on the CPU machine, once
    python benchmarks/gpu_first.py measure --out DIR [--route nvdec-open|cpu-open] [--data ...] [--window-s 2]
        [--threads 1,4] [--scaling]

`prepare` (the CPU machine, with FFmpeg and PyAV): three datasets written as lerobot's recorder writes them, two
cameras each at GOP 2 and crf 30: 640x480 H.264, 640x480 HEVC, and 256x256 H.264 (LIBERO's frame size); FFmpeg's pictures of a few samples of every
camera (`reference.npz`, the colour check's reference) and the colour FFmpeg reads each video file with
(`colours.json`: the device has no PyAV to read it); the PyNvVideoCodec wheel (`.devwheels-first/`, for Python 3.12; apart from tier 2's `.devwheels/`, which its staging tool empties);
and the size of what one device call carries (the tree, the wheel, the datasets), printed against the 60 MiB
budget. `--small` writes a small version (96x128, a few episodes) for the CI dry run.

`measure` (the GPU node; or CI with `--route cpu-open`, FFmpeg's decoders in NVDEC's place), in this order, each
part written to DIR as soon as it is measured (`gpu_first.json`, `summary.md`), so a call cut short keeps what
it got:
1. preflight: the driver (nvidia-smi), PyNvVideoCodec's import and the driver libraries it needs
   (libnvcuvid, libnvidia-encode), CUDA's start and the first conversion kernel's launch (PTX compiled on first
   use) timed apart from the second; the fused NV12 kernel against its portable form, every layout and dtype, both
   timed (`nv12`);
2. per dataset (H.264, HEVC, H.264 at 256x256) and mode (one frame per camera; an 8-step window of consecutive frames
   per camera), at 1 and 4 decode threads (`--threads`; 2 and 7 were measured twice on H200s): batches of 64 planned
   as the loader plans them (pool of 16), fetched from the dataset (fetch stage), fed as packets (`decode.feed`) to
   the engine's decoders kept open, frames out as tensors on the device; two builder threads keep it fed, as the
   loader's workers do. Reported: samples/s over a `--window-s` window after two warm-up batches, the process's CPU
   milliseconds per sample, NVDEC utilisation (nvidia-smi dmon) while it runs, where a sample's time goes (thread-ms
   per sample: the builder threads' fetch, engine call and id check; inside the engine, its decode threads' feed,
   decoder calls, RGB conversion, stack and stream sync: `OpenDecoders.seconds`), and every decoded frame's painted
   ids against the plan (the id blocks are averaged on the device; only those numbers cross to the host);
3. the colour check: the reference samples decoded by the engine against FFmpeg's pictures of the same packets:
   the largest and mean difference in levels (FFmpeg's own conversion on the CPU: at most 2);
4. with `--scaling` only: what the decode threads wait for (`benchmarks/gpu_scaling.py`, H.264 640x480 one frame):
   P processes of one decode thread each against one process of P threads, 2 and 4 such processes handing their
   frames to one consumer (CUDA IPC), and whether the decoder's calls hold the interpreter's lock. It answered its
   question on an H200 (processes scale where threads stop: `results/NVIDIA-H200/2026-11-29-2/`) and the engine in
   decode processes came of it; the whole loader in them is measured by tier 2 (`gpu_processes.py`), so a visit
   spends its ~75 s there.
Exit status: 0 every check passed, 1 a wrong frame or a colour difference over 2 levels, 2 the preflight failed
(the engine cannot start here; the reason is in the JSON).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))  # gpu_rig and gpu_scaling, beside this file, wherever it is imported

from gpu_rig import BATCH, BUILDERS, POOL, Rig, warm, window  # noqa: E402

DATA = ROOT / ".demo/gpu-first"
WHEELS = ROOT / ".devwheels-first"
WHEEL = "pynvvideocodec==2.2.4"
BUDGET_MIB = 60
# What the node does not have, refused where a dry run stands in for it (DALI_STREAM_DENY_IMPORTS): the first call
# brings nothing but PyNvVideoCodec's wheel
NOT_ON_THE_NODE = "torchcodec,nvidia,huggingface_hub,rich,accelerate"
# dataset name -> (codec, sizes over FULL/SMALL): 640x480 H.264 and HEVC, and LIBERO's 256x256 (small frames: does
# NVDEC's per-frame cost stay below the CPU route's where decode is cheap, or does the host path bind first?)
DATASETS = {"h264": ("h264", {}), "hevc": ("hevc", {}), "h264-256": ("h264", {"height": 256, "width": 256})}
SMALL_SQUARE = {"height": 64, "width": 64}  # the 256x256 dataset's stand-in in the CI dry run
THREADS = (1, 4)  # the engine's one thread and its default 4: what the visit's time goes to is tier 2's sweep
MODES = {"single": 1, "window8": 8}  # frames per camera per sample
COLOUR_LEVELS = 2  # FFmpeg's own conversion against ours, on the CPU: at most this many levels apart
SCALING = "h264"  # the dataset benchmarks/gpu_scaling.py measures
FULL = dict(episodes=8, min_length=50, max_length=70, height=480, width=640, episodes_per_file=4)
SMALL = dict(episodes=4, min_length=16, max_length=24, height=96, width=128, episodes_per_file=2)


# ---- prepare (the CPU machine) -------------------------------------------------------------------------------
def prepare(data: Path, small: bool) -> dict[str, Any]:
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    sizes = SMALL if small else FULL
    written = {}
    for name, (codec, shape) in DATASETS.items():
        root = data / name
        own = {**sizes, **(SMALL_SQUARE if small and shape else shape)}
        spec = SampleSpec(cameras=parse_cameras(f"front:{codec},wrist:{codec}"), gop=2, crf=30, recorder="lerobot",
                          content="pattern" if small else "scene", seed=3, **own)
        if not (root / "meta/info.json").exists():
            t0 = time.perf_counter()
            write_sample(root, spec)
            print(f"wrote {root} in {time.perf_counter() - t0:.0f} s", flush=True)
        _reference(root)
        written[name] = _bytes(root)
    wheel = None if small else _wheel()
    tree = sum(os.path.getsize(ROOT / f) for f in subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split() if (ROOT / f).is_file())
    carried = tree + sum(written.values()) + (os.path.getsize(wheel) if wheel else 0)
    report = {"datasets_bytes": written, "tree_bytes": tree, "wheel": str(wheel) if wheel else None,
              "carried_mib": carried / 2**20, "budget_mib": BUDGET_MIB, "fits": carried <= BUDGET_MIB * 2**20}
    print(f"carried by one device call: tree {tree / 2**20:.1f} MiB + datasets "
          f"{sum(written.values()) / 2**20:.1f} MiB + wheel {(os.path.getsize(wheel) if wheel else 0) / 2**20:.1f} "
          f"MiB = {carried / 2**20:.1f} MiB of {BUDGET_MIB} MiB{'' if report['fits'] else ': TOO MUCH'}", flush=True)
    return report


def _bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _wheel() -> Path:
    """PyNvVideoCodec's wheel for the device's Python 3.12, downloaded once into .devwheels-first/."""
    found = sorted(WHEELS.glob("pynvvideocodec-*-cp312-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(WHEELS), "--python-version",
                        "3.12", "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", WHEEL], check=True)
        found = sorted(WHEELS.glob("pynvvideocodec-*-cp312-*.whl"))
    return found[-1]


def _reference(root: Path) -> None:
    """FFmpeg's pictures of the REFERENCE samples of every camera (`reference.npz`) and each video file's colour as
    FFmpeg reads it (`colours.json`), both keyed by paths relative to the dataset."""
    import av

    from dali_stream.decode.colour import Colour

    colours = {}
    for path in sorted(root.glob("videos/**/*.mp4")):
        with av.open(str(path)) as container:
            frame = next(container.decode(video=0))
            c = Colour.of_frame(frame)
        colours[str(path.relative_to(root))] = {"matrix": c.matrix, "full_range": c.full_range}
    (root / "colours.json").write_text(json.dumps(colours, indent=1) + "\n")
    rig = Rig(root, "cpu-open", 1, 1)
    try:
        pictures = rig.reference_pictures()
    finally:
        rig.close()
    np.savez_compressed(root / "reference.npz", **pictures)


# ---- the engine alone ----------------------------------------------------------------------------------------
def measure_one(root: Path, route: str, threads: int, steps: int, window_s: float, device_index: int | None
                ) -> dict[str, Any]:
    """Samples/s, CPU ms per sample, NVDEC utilisation and wrong frames of one (dataset, mode, threads)."""
    from dali_stream.tools.bench_gpu import NvdecUtilisation

    rig = Rig(root, route, threads, steps, device_index)
    try:
        source = warm(rig)
        with NvdecUtilisation(device_index) as util:
            run = window(rig, source, window_s)
        return {"route": route, "threads": threads, "frames_per_camera": steps, **run,
                "nvdec_utilisation": util.result()}
    finally:
        rig.close()


def colour_check(root: Path, route: str, device_index: int | None) -> dict[str, Any]:
    """The engine's pictures of the reference samples against FFmpeg's (`reference.npz`)."""
    reference = np.load(root / "reference.npz")
    rig = Rig(root, route, 1, 1, device_index)
    try:
        got = rig.reference_pictures()
    finally:
        rig.close()
    worst, means = 0, []
    for name in reference.files:
        diff = np.abs(got[name].astype(np.int16) - reference[name].astype(np.int16))
        worst, means = max(worst, int(diff.max())), means + [float(diff.mean())]
    return {"pictures": len(reference.files), "max_levels": worst, "mean_levels": float(np.mean(means)),
            "passed": worst <= COLOUR_LEVELS}


# ---- preflight -----------------------------------------------------------------------------------------------
def preflight(route: str) -> dict[str, Any]:
    out: dict[str, Any] = {"route": route, "python": platform.python_version(), "machine": platform.machine()}
    smi = shutil.which("nvidia-smi")
    if smi:
        q = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
        out["gpus"] = [line.strip() for line in q.stdout.splitlines() if line.strip()]
    import torch

    out["torch"] = torch.__version__
    if route == "cpu-open":
        out["ok"] = True
        return out
    import ctypes

    libraries = {}
    for lib in ("libcuda.so.1", "libnvcuvid.so.1", "libnvidia-encode.so.1"):
        try:
            ctypes.CDLL(lib)
            libraries[lib] = "loads"
        except OSError as exc:
            libraries[lib] = f"does not load: {exc}"
    out["driver_libraries"] = libraries
    t0 = time.perf_counter()
    try:
        import PyNvVideoCodec as nvc  # type: ignore[import-not-found]

        out["pynvvideocodec"] = {"version": getattr(nvc, "__version__", "?"),
                                 "import_s": time.perf_counter() - t0}
    except Exception as exc:  # noqa: BLE001 - reported: nothing later can run
        out["pynvvideocodec"] = {"error": f"{type(exc).__name__}: {exc}"}
        out["ok"] = False
        return out
    t0 = time.perf_counter()
    torch.cuda.init()
    x = torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    out["cuda_start_s"] = time.perf_counter() - t0
    from dali_stream.decode.colour import Colour
    from dali_stream.decode.nv12 import nv12_to_rgb

    nv12 = torch.full((480 * 3 // 2, 640), 128, dtype=torch.uint8, device="cuda")
    for name in ("first_conversion_s", "second_conversion_s"):  # the first compiles and loads the kernels
        t0 = time.perf_counter()
        nv12_to_rgb(nv12, 480, 640, Colour())
        torch.cuda.synchronize()
        out[name] = time.perf_counter() - t0
    out["nv12"] = nv12_check()
    out["device"] = torch.cuda.get_device_name(0)
    out["ok"] = bool(x.numel())
    return out


def nv12_check() -> dict[str, Any]:
    """The fused NV12 conversion (`decode.nv12`) on this GPU: its pictures against the portable form's (every layout,
    dtype and a limited, BT.709 and full-range colour: equal or not), and both timed on a stack of 16 480p pictures
    (ms a picture, MB held beside the output)."""
    import torch

    from dali_stream.decode.colour import Colour
    from dali_stream.decode.nv12 import fused_state, nv12_to_rgb

    nv12 = torch.randint(0, 256, (16, 720, 640), dtype=torch.uint8, device="cuda")
    out: dict[str, Any] = {"unequal": []}
    try:
        for colour in (Colour(), Colour(1, False), Colour(2, True)):
            for layout in ("hwc", "chw"):
                for dtype in (torch.uint8, torch.float32):
                    fused = nv12_to_rgb(nv12, 480, 640, colour, layout, dtype, fused=True)
                    if not torch.equal(fused, nv12_to_rgb(nv12, 480, 640, colour, layout, dtype, fused=False)):
                        out["unequal"].append(f"{colour} {layout} {dtype}")
        for way, fused in (("fused", True), ("portable", False)):
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
            t0 = time.perf_counter()
            for _ in range(20):
                rgb = nv12_to_rgb(nv12, 480, 640, Colour(), fused=fused)
                del rgb
            torch.cuda.synchronize()
            out[way] = {"ms_per_picture": (time.perf_counter() - t0) / 320 * 1e3,
                        "beside_output_mb": (torch.cuda.max_memory_allocated() - base - 16 * 480 * 640 * 3) / 2**20}
    except Exception as exc:  # noqa: BLE001 - reported beside the rest
        out["error"] = f"{type(exc).__name__}: {exc}"
    out["fused_state"] = fused_state()
    return out


# ---- the report ----------------------------------------------------------------------------------------------
def summary(report: dict[str, Any]) -> str:
    lines = [f"# gpu-first: {report['preflight'].get('device', report['route'])}, {report['date']}", "",
             f"route {report['route']}; batch {BATCH}, pool {POOL}, {BUILDERS} builder threads; samples/s over "
             f"{report['window_s']:g} s windows", "",
             "| dataset | frames per camera | decode threads | samples/s | CPU ms/sample | NVDEC util % | wrong frames |",
             "|---|---|---|---|---|---|---|"]
    for r in report["runs"]:
        util = r["nvdec_utilisation"]
        shown = f"{util['mean_pct']:.0f} (max {util['max_pct']})" if util.get("available") else "-"
        lines.append(f"| {r['dataset']} | {r['frames_per_camera']} | {r['threads']} | {r['samples_per_s']:.0f} | "
                     f"{r['cpu_ms_per_sample']:.2f} | {shown} | {r['wrong_frames']} of {r['frames_checked']} |")
    phases = ("builder_fetch", "builder_engine", "builder_check", "engine_feed", "engine_decoder", "engine_convert",
              "engine_stack", "engine_sync")
    lines += ["", "where a sample's time goes, thread-ms per sample (builder threads: fetch, engine call, id check; "
              "decode threads inside the engine call: feed, decoder calls, RGB conversion, stack, stream sync)", "",
              "| dataset | frames per camera | decode threads | " + " | ".join(p.split("_", 1)[1] for p in phases) + " |",
              "|---|---|---|" + "---|" * len(phases)]
    for r in report["runs"]:
        ms = r.get("ms_per_sample", {})
        lines.append(f"| {r['dataset']} | {r['frames_per_camera']} | {r['threads']} | "
                     + " | ".join(f"{ms[p]:.2f}" if p in ms else "-" for p in phases) + " |")
    for codec, c in report.get("colour", {}).items():
        lines.append(f"\ncolour check {codec}: {c['pictures']} pictures, max {c['max_levels']} levels, mean "
                     f"{c['mean_levels']:.2f} ({'passed' if c['passed'] else 'FAILED'}: at most {COLOUR_LEVELS})")
    scaled = report.get("scaling")
    if scaled is not None:
        from gpu_scaling import table

        lines += table(scaled, report["runs"])
    return "\n".join(lines) + "\n"


def measure(args) -> int:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"route": args.route, "date": time.strftime("%Y-%m-%d %H:%M"),
                              "window_s": args.window_s, "runs": [], "colour": {}}

    def save() -> None:
        (out / "gpu_first.json").write_text(json.dumps(report, indent=1) + "\n")
        (out / "summary.md").write_text(summary(report))

    report["preflight"] = preflight(args.route)
    save()
    print(json.dumps(report["preflight"]), flush=True)
    if not report["preflight"].get("ok"):
        return 2
    device_index = 0 if args.route == "nvdec-open" else None
    threads = [int(t) for t in args.threads.split(",")]
    for name in DATASETS:
        root = Path(args.data) / name
        for mode, steps in MODES.items():
            for n in threads:
                run = measure_one(root, args.route, n, steps, args.window_s, device_index)
                run.update(dataset=name, mode=mode)
                report["runs"].append(run)
                save()
                print(f"{name} {mode} threads {n}: {run['samples_per_s']:.0f} samples/s, "
                      f"{run['cpu_ms_per_sample']:.2f} CPU ms/sample, wrong {run['wrong_frames']}", flush=True)
        report["colour"][name] = colour_check(root, args.route, device_index)
        save()
    # what the decode threads wait for (benchmarks/gpu_scaling.py): processes against threads, the interpreter's lock
    if args.scaling:
        from gpu_scaling import scaling

        report["scaling"] = {}
        scaling(Path(args.data) / SCALING, args.route, threads, args.window_s, device_index,
                tuple(p for p in threads if 1 < p <= 4) or (2,), out=report["scaling"], saved=save)
    print(summary(report), flush=True)
    bad = any(r["wrong_frames"] for r in report["runs"]) or not all(c["passed"] for c in report["colour"].values()) \
        or any(p.get("wrong_frames") for p in report.get("scaling", {}).get("processes", []))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare", help="write the datasets, FFmpeg's reference pictures and fetch the wheel (CPU)")
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--small", action="store_true", help="a small version for the CI dry run (no wheel)")
    p = sub.add_parser("measure", help="preflight, the engine alone at 1-7 threads, the colour check")
    p.add_argument("--out", required=True)
    p.add_argument("--data", default=str(DATA))
    p.add_argument("--route", default="nvdec-open", choices=("nvdec-open", "cpu-open"))
    p.add_argument("--threads", default=",".join(map(str, THREADS)))
    p.add_argument("--window-s", type=float, default=2.0)
    p.add_argument("--scaling", action="store_true", help="then processes against threads (gpu_scaling.py)")
    args = ap.parse_args(argv)
    if args.command == "prepare":
        report = prepare(Path(args.data), args.small)
        return 0 if report["fits"] else 1
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
