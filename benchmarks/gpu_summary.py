"""`make gpu-check`'s last step: one table of what the run found (issue 26), printed and written to OUT/summary.md.

- the GPU tests by outcome (known failures are xfail: a red run means something new broke);
- the frame checks (every test that compares painted ids on NVDEC: the boundary matrix, the wild encodings,
  the clip checks) by codec-free test id, passed or not;
- the NVDEC-pays runs (OUT/nvdec-pays/*.json): samples/s on the GPU route, the CPU route on every core, their
  ratio, the NVDEC limit ratio and NVDEC utilisation.

    python benchmarks/gpu_summary.py OUT
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path


def tests(xml: Path) -> tuple[Counter, list[tuple[str, str]]]:
    outcomes: Counter = Counter()
    frames = []
    if not xml.exists():
        return outcomes, frames
    for case in ET.parse(xml).getroot().iter("testcase"):
        name = case.get("name", "")
        if case.find("failure") is not None or case.find("error") is not None:
            outcome = "failed"
        elif (skipped := case.find("skipped")) is not None:
            outcome = "xfailed" if "xfail" in (skipped.get("type", "") + skipped.get("message", "")) else "skipped"
        else:
            outcome = "passed"
        outcomes[outcome] += 1
        if "every_frame" in name or "ids" in name:
            frames.append((name, outcome))
    return outcomes, frames


def runs(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("bench-*.json")):
        r = json.loads(path.read_text())
        cfg = r.get("config", {})
        util = r.get("nvdec_utilisation") or {}
        cpu = r.get("cpu_all_cores") or {}
        joined = sorted({str(v.get("join_streams")) for v in (r.get("dali_decoder") or {}).values()})
        rows.append({"run": f"{cfg.get('mode')} b{cfg.get('batch_size')} join_streams={'/'.join(joined) or '-'}",
                     "gpu samples/s": r.get("samples_per_s"), "cpu all cores": cpu.get("samples_per_s"),
                     "gpu/cpu": r.get("gpu_over_cpu_all_cores"), "limit ratio": r.get("nvdec_limit_ratio"),
                     "nvdec util %": util.get("mean_pct"), "error": r.get("error")})
    return rows


def fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main(out: Path) -> str:
    outcomes, frames = tests(out / "gpu-tests.xml")
    lines = ["# gpu-check summary", "", "| GPU tests | count |", "|---|---|"]
    lines += [f"| {k} | {outcomes.get(k, 0)} |" for k in ("passed", "failed", "xfailed", "skipped")]
    lines += ["", "| frame check (painted ids on NVDEC) | outcome |", "|---|---|"]
    lines += [f"| `{name}` | {outcome} |" for name, outcome in frames] or ["| (none ran) | - |"]
    rows = runs(out / "nvdec-pays")
    lines += ["", "| NVDEC pays? run | GPU samples/s | CPU route, all cores | GPU/CPU | NVDEC limit ratio | NVDEC util % |",
              "|---|---|---|---|---|---|"]
    lines += [f"| {r['run']}{' (error: ' + str(r['error'])[:80] + ')' if r['error'] else ''} | "
              f"{fmt(r['gpu samples/s'])} | {fmt(r['cpu all cores'])} | {fmt(r['gpu/cpu'])} | "
              f"{fmt(r['limit ratio'])} | {fmt(r['nvdec util %'])} |" for r in rows] or ["| (none ran) | | | | | |"]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main(Path(sys.argv[1])))
