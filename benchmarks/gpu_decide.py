"""What a GPU visit's results earn in `dali_stream/decode/proven.py`'s `OPEN_PROVEN`, decided by one rule.

    python benchmarks/gpu_decide.py benchmarks/results/<gpu>/<date>

Reads the visit's `gpu-first/gpu_first.json` (tier 1: the engine alone, every frame's painted ids, the colour
check) and `gpu-second/gpu_second.json` (tier 2: the whole loader on the open engine against the CPU route on all
the node's cores, per codec and frame size; the boundary matrix and the wild encodings through `nvdec-open`).
A codec is proven on the GPU when every check ran and passed: tier 1 read no wrong frame of it and its colours are
within the check's levels, and tier 2's boundary step ended with every test passed (status 0). It then gets an
entry whose `min_pixels` is the smallest frame size from which on the loader was measured faster than the CPU
route at every size measured (ratio > 1); a codec measured slower at every size, or not measured, gets none. Each
ratio names the CPU route it was measured against (torchcodec; cpu-open where tier 2 says why).
Prints the entries as Python to paste into `OPEN_PROVEN` in the commit that adds the results, and every reason
an entry was withheld. Exit status: 0 some entry earned, 1 none.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

# tier 1's datasets by codec (`gpu_first.DATASETS`)
TIER1_CODEC = {"h264": "h264", "h264-256": "h264", "hevc": "hevc"}


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
        for name, step in second.get("steps", {}).items():
            for result in step.get("results", []):
                ratio = result.get("gpu_over_cpu_all_cores")
                codec, pixels = _measured(result)
                # the CPU route measured against (`gpu_second.OPEN_VS_CPU`: torchcodec, or cpu-open for HEVC)
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
            reasons.append(f"the loader on the open engine was not faster than the CPU route at its largest size ({shown})")
            continue
        if reasons:
            continue
        said = ", ".join(f"{r:.2f}x {a} at {p:,} pixels" for p, r, a in measured)
        entries.append((codec, faster[0], f"{folder.as_posix()}: the loader {said}, the CPU route on all cores"))
    return {"gpu": gpu, "entries": entries, "withheld": {c: r for c, r in why.items() if r}}


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
