"""What a GPU visit's results earn in `dali_stream/decode/proven.py`'s `OPEN_PROVEN`, decided by one rule.

    python benchmarks/gpu_decide.py benchmarks/results/<gpu>/<date>

Reads the visit's `gpu-first/gpu_first.json` (tier 1: the engine alone, every frame's painted ids, the colour
check) and `gpu-second/gpu_second.json` (tier 2: the whole loader on the open engine against the CPU route on all
the node's cores, per codec and frame size, at each `decode_processes` (`gpu_processes.py`; a visit before it:
`dali-stream bench` steps); the boundary matrix and the wild encodings through `nvdec-open`).
A codec is proven on the GPU when every check ran and passed: tier 1 read no wrong frame of it and its colours are
within the check's levels, tier 2's loader read none either with no decode process restarted, and tier 2's
boundary step ended with every test passed (status 0). It then gets an entry whose `min_pixels` is the smallest
frame size from which on the loader was measured faster than the CPU route at every size measured (ratio > 1,
one frame per camera, the loader at its default `decode_processes`: what `decode="auto"` would give); a codec
measured slower at every size, or not measured, gets none. Each ratio names the CPU route it was measured against
(torchcodec; cpu-open where tier 2 says why).
Prints first the loader in decode processes (per case, the CPU route and the loader at each `decode_processes`:
samples/s, its ratio to the CPU route and to the threaded engine, NVDEC busy, restarts, wrong frames) and whether
the targets are met (`TARGETS`), then the entries as Python to paste into `OPEN_PROVEN` in the commit that adds
the results, and every reason an entry was withheld. Exit status: 0 some entry earned, 1 none.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # gpu_processes, beside this file, wherever it is run from

from gpu_processes import runs_of, table  # noqa: E402

# tier 1's datasets by codec (`gpu_first.DATASETS`)
TIER1_CODEC = {"h264": "h264", "h264-256": "h264", "hevc": "hevc"}
# what the loader on NVDEC must reach through the open engine in decode processes (H.264, two cameras, one frame
# each, batches of 64, at the loader's default decode_processes)
TARGETS = {"samples_per_s": 2400.0, "over_cpu": 2.0, "nvdec_busy_pct": 50.0}


def decide(folder: Path) -> dict[str, Any]:
    """{"gpu": torch's name for it, "entries": [(codec, min_pixels, source)], "withheld": {codec: reasons}}."""
    first = _load(folder / "gpu-first" / "gpu_first.json")
    second = _load(folder / "gpu-second" / "gpu_second.json")
    gpu = (first or {}).get("preflight", {}).get("device")
    why: dict[str, list[str]] = {codec: [] for codec in sorted(set(TIER1_CODEC.values()))}
    if first is None:
        for reasons in why.values():
            reasons.append("tier 1 did not run (no gpu-first/gpu_first.json)")
    else:
        for codec, reasons in why.items():
            runs = [r for r in first.get("runs", []) if TIER1_CODEC.get(r.get("dataset", "")) == codec]
            wrong = sum(r.get("wrong_frames", 0) for r in runs)
            if not runs:
                reasons.append("tier 1 measured none of its datasets")
            elif wrong:
                reasons.append(f"tier 1 read {wrong} wrong frames")
            colours = [c for name, c in first.get("colour", {}).items() if TIER1_CODEC.get(name) == codec]
            if not colours or not all(c.get("passed") for c in colours):
                reasons.append("tier 1's colour check did not pass" if colours else "tier 1's colour check did not run")
    ratios: dict[str, list[tuple[int, float, str]]] = {codec: [] for codec in why}
    if second is None:
        for reasons in why.values():
            reasons.append("tier 2 did not run (no gpu-second/gpu_second.json)")
    else:
        boundary = second.get("steps", {}).get("boundaries", {})
        if boundary.get("status") != 0:
            failed = _failed_tests(folder / "gpu-second" / "boundaries.xml")
            named = f": failed {', '.join(failed)}" if failed else ""
            for reasons in why.values():
                reasons.append(f"tier 2's boundary matrix did not pass (status {boundary.get('status', 'not run')}"
                               f"{named})")
        for codec, problem in _sweep_problems(_sweep(second), TIER1_CODEC).items():
            why[codec].append(problem)
        for name, step in second.get("steps", {}).items():
            for result in (_as_benches(step) if name == "processes" else step.get("results", [])):
                ratio = result.get("gpu_over_cpu_all_cores")
                codec, pixels = _measured(result)
                # the CPU route measured against (`gpu_processes.CASES`: torchcodec, or cpu-open for HEVC)
                against = "/".join(sorted(set(((result.get("cpu_all_cores") or {}).get("routes") or {}).values())))
                if ratio is not None and codec in ratios and pixels:
                    ratios[codec].append((pixels, float(ratio), against or "unnamed"))
    entries = []
    for codec, reasons in why.items():
        measured = sorted(ratios[codec])
        if not measured:
            reasons.append("tier 2 did not measure the loader against the CPU route on this codec")
            continue
        faster = [pixels for i, (pixels, _, _) in enumerate(measured) if all(r > 1 for _, r, _ in measured[i:])]
        if not faster:
            shown = ", ".join(f"{r:.2f}x {a} at {p:,} pixels" for p, r, a in measured)
            reasons.append(f"the loader on the open engine was not faster than the CPU route at its largest size "
                           f"({shown})")
            continue
        if reasons:
            continue
        said = ", ".join(f"{r:.2f}x {a} at {p:,} pixels" for p, r, a in measured)
        entries.append((codec, faster[0], f"{folder.as_posix()}: the loader {said}, the CPU route on all cores"))
    return {"gpu": gpu, "entries": entries, "withheld": {c: r for c, r in why.items() if r}}


def _sweep(second: dict[str, Any] | None) -> dict[str, Any] | None:
    """Tier 2's sweep of the loader in decode processes (`gpu_processes.py`), None where it did not run."""
    results = ((second or {}).get("steps", {}).get("processes") or {}).get("results") or []
    return results[0] if results else None


def _sweep_problems(sweep: dict[str, Any] | None, codecs: dict[str, str]) -> dict[str, str]:
    """codec -> why the sweep's runs of it withhold its entry (wrong frames, processes restarted)."""
    out: dict[str, str] = {}
    for r in (sweep or {}).get("runs", []):
        codec = codecs.get(r.get("dataset", ""))
        wrong, restarts = r.get("wrong_frames") or 0, r.get("restarts") or 0
        if codec and (wrong or restarts):
            said = out.get(codec, "tier 2's loader in decode processes:")
            out[codec] = f"{said} {r['id']} read {wrong} wrong frames, {restarts} decode processes restarted;"
    return out


def _as_benches(step: dict[str, Any]) -> list[dict[str, Any]]:
    """The sweep's one-frame cases as the bench results the rule reads: the loader at its default decode_processes
    over the CPU route measured in the same call."""
    sweep = (step.get("results") or [None])[0]
    out = []
    for case, c in runs_of(sweep or {}).items():
        run, cpu = c.get(c.get("default")), c.get("cpu")
        if not case.endswith("/single") or not run or not cpu or not cpu.get("samples_per_s"):
            continue
        out.append({"gpu_over_cpu_all_cores": run["samples_per_s"] / cpu["samples_per_s"],
                    "image_shape": {k: [3, *hw] for k, hw in (run.get("frame_size") or {}).items()},
                    "codecs": run.get("codecs"), "routes": run.get("routes"),
                    "cpu_all_cores": {"routes": cpu.get("routes")}})
    return out


def targets(folder: Path) -> list[tuple[str, bool | None, str]]:
    """(target, met: True / False / None where not measured, what was measured) of tier 2's sweep: the loader on
    NVDEC at its default decode_processes, H.264 two cameras one frame each (`TARGETS`), and its checks."""
    sweep = _sweep(_load(folder / "gpu-second" / "gpu_second.json"))
    names = (f"the loader >= {TARGETS['samples_per_s']:,.0f} samples/s, H.264 640x480",
             f"the loader >= {TARGETS['over_cpu']:g}x the CPU route on every core, H.264 640x480",
             f"the loader >= {TARGETS['over_cpu']:g}x the CPU route on every core, H.264 256x256",
             f"NVDEC >= {TARGETS['nvdec_busy_pct']:g} % busy, H.264 640x480",
             "0 wrong frames and 0 decode processes restarted, every run")
    if sweep is None:
        return [(name, None, "tier 2's sweep of the loader in decode processes did not run") for name in names]
    cases = runs_of(sweep)

    def default(case: str) -> tuple[dict[str, Any] | None, str]:
        c = cases.get(case, {})
        run = c.get(c.get("default"))
        if run is None:
            return None, f"{case} at the loader's default decode_processes was not measured"
        return run, f"decode_processes={c['default']} (the default)"

    out: list[tuple[str, bool | None, str]] = []
    one, said = default("h264/single")
    if one is None:
        out.append((names[0], None, said))
    else:
        engines = {n: r for n, r in cases["h264/single"].items() if isinstance(n, int)}
        best = max(engines, key=lambda n: engines[n]["samples_per_s"])
        out.append((names[0], one["samples_per_s"] >= TARGETS["samples_per_s"],
                    f"{one['samples_per_s']:,.0f} at {said} ({one['samples_per_s_within_epochs']:,.0f} without the "
                    f"epochs' starts); the most: {engines[best]['samples_per_s']:,.0f} at decode_processes={best}"))
    for name, case in ((names[1], "h264/single"), (names[2], "h264-256/single")):
        run, said = default(case)
        cpu = cases.get(case, {}).get("cpu")
        if run is None or not cpu or not cpu.get("samples_per_s"):
            out.append((name, None, said if run is None else f"{case}: the CPU route was not measured"))
            continue
        ratio = run["samples_per_s"] / cpu["samples_per_s"]
        out.append((name, ratio >= TARGETS["over_cpu"],
                    f"{ratio:.2f}x: {run['samples_per_s']:,.0f} at {said} against {cpu['samples_per_s']:,.0f} on "
                    f"{cpu.get('num_workers')} workers ({cpu.get('cpu_route')})"))
    util = (one or {}).get("nvdec_utilisation") or {}
    if not util.get("available"):
        out.append((names[3], None, f"not measured: {util.get('why', said)}"))
    else:
        out.append((names[3], util["mean_pct"] >= TARGETS["nvdec_busy_pct"],
                    f"{util['mean_pct']:.0f} % (max {util['max_pct']}) at {said}, {util.get('source')}"))
    runs = [r for r in sweep.get("runs", []) if r.get("event") != "same"]
    bad = [f"{r['id']}: {r['wrong_frames']} wrong, {r['restarts']} restarted" for r in runs
           if r.get("wrong_frames") or r.get("restarts")]
    failed = [r["id"] for r in runs if r.get("error") or r.get("event")]
    frames = sum(r.get("frames_checked") or 0 for r in runs)
    out.append((names[4], False if bad else None if failed else True,
                "; ".join(bad) if bad else f"{frames:,} frames checked in {len(runs) - len(failed)} runs"
                + (f"; not run or failed: {', '.join(failed)}" if failed else "")))
    return out


def _load(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.exists() else None


def _failed_tests(junit: Path) -> list[str]:
    """The names of the failed or erring tests in a JUnit file (none where it is absent or unreadable)."""
    import xml.etree.ElementTree as ET

    try:
        cases = ET.parse(junit).getroot().iter("testcase")
    except (OSError, ET.ParseError):
        return []
    return [str(c.get("name")) for c in cases if c.find("failure") is not None or c.find("error") is not None]


def _measured(result: dict[str, Any]) -> tuple[str | None, int]:
    """(codec, pixels a frame) of a bench result whose cameras all share one codec and size and all decoded on the
    open engine's NVDEC (else (None, 0): the ratio says nothing of the engine on one kind of stream)."""
    shapes = {tuple(s) for s in (result.get("image_shape") or {}).values()}
    codecs = set((result.get("codecs") or {}).values())
    routes = set((result.get("routes") or {}).values())
    if len(shapes) != 1 or len(codecs) != 1 or routes != {"nvdec-open"}:
        return None, 0
    shape = shapes.pop()
    height, width = shape[-2:] if shape[-1] != 3 else shape[:2]  # (C, H, W), or (H, W, C) with channels last
    return codecs.pop(), int(height) * int(width)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", help="a visit's results folder (benchmarks/results/<gpu>/<date>)")
    args = ap.parse_args(argv)
    sweep = _sweep(_load(Path(args.folder) / "gpu-second" / "gpu_second.json"))
    if sweep is not None:
        print("\n".join(table(sweep)) + "\n")
    for name, met, said in targets(Path(args.folder)):
        print(f"target {'MET' if met else 'not measured' if met is None else 'NOT MET'}: {name}: {said}")
    print()
    got = decide(Path(args.folder))
    if got["entries"]:
        print(f"OPEN_PROVEN entries earned on {got['gpu']}:")
        for codec, pixels, source in got["entries"]:
            print(f'    OpenProven("{got["gpu"]}", "{codec}", {pixels}, "{source}"),')
    else:
        print(f"no OPEN_PROVEN entry earned on {got['gpu'] or 'this GPU'}")
    for codec, reasons in got["withheld"].items():
        print(f"{codec}: withheld: {'; '.join(reasons)}")
    return 0 if got["entries"] else 1


if __name__ == "__main__":
    sys.exit(main())
