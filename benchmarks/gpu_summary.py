"""`make gpu-check`'s last step: one table of what the run found, printed and written to OUT/summary.md.

- the GPU tests by outcome (known failures are xfail: a red run means something new broke);
- the frame checks (every test that compares painted ids on NVDEC: the boundary matrix, the wild encodings,
  the clip checks) by codec-free test id, passed or not;
- the NVDEC-pays runs (OUT/nvdec-pays/*.json): samples/s on the GPU route, the CPU route on every core, their
  ratio, the NVDEC limit ratio and NVDEC utilisation;
- the first minutes' measurements (OUT/measure/*.json): per engine (DALI per sample and joined, the
  open-decoder engine per thread count, the CPU route per worker count) and dataset, samples/s, the NVDEC limit
  ratio and utilisation: which engine pays on this node.

    python benchmarks/gpu_summary.py OUT [--measure-only]
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


def engine_of(r: dict) -> str:
    """What decoded a bench result's cameras: DALI's engine and its groups, the open engine and its threads, or the
    CPU route and its workers."""
    cfg, routes = r.get("config", {}), set((r.get("routes") or {}).values())
    for route in ("nvdec-open", "cpu-open"):
        if route in routes:
            threads = ((r.get("open_engine") or {}).get(route) or {}).get("threads", cfg.get("decode_threads"))
            return f"open decoders ({route}), {threads} threads"
    if "nvdec" in routes:
        joined = sorted({str(v.get("join_streams")) for v in (r.get("dali_decoder") or {}).values()})
        if not joined:
            return "DALI (groups not recorded)"
        return "DALI, one clip per sample" if joined == ["0"] else f"DALI, joined in <= {'/'.join(joined)} groups"
    return f"CPU route ({'/'.join(sorted(routes)) or '-'}), {cfg.get('num_workers')} workers"


def measured(folder: Path) -> list[dict]:
    rows = []
    for path in sorted(folder.glob("bench-*.json")):
        r = json.loads(path.read_text())
        util = r.get("nvdec_utilisation") or {}
        rows.append({"engine": engine_of(r), "dataset": Path(r.get("config", {}).get("dataset") or "?").name,
                     "samples/s": r.get("samples_per_s"), "limit": r.get("nvdec_limit"),
                     "limit ratio": r.get("nvdec_limit_ratio"), "nvdec util %": util.get("mean_pct"),
                     "error": r.get("error")})
    return rows


def measure_table(out: Path) -> list[str]:
    rows = measured(out / "measure")
    lines = ["| engine | dataset | samples/s (batch 64) | NVDEC limit, samples/s | limit ratio | NVDEC util % |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['engine']}{' (error: ' + str(r['error'])[:80] + ')' if r['error'] else ''} | {r['dataset']} | "
              f"{fmt(r['samples/s'])} | {fmt(r['limit'])} | {fmt(r['limit ratio'])} | {fmt(r['nvdec util %'])} |"
              for r in rows] or ["| (none ran) | | | | | |"]
    return lines


def fmt(value) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}" if isinstance(value, float) else str(value)


def main(out: Path, measure_only: bool = False) -> str:
    if measure_only:
        text = "\n".join(["# gpu-check: which engine pays here", "", *measure_table(out)]) + "\n"
        (out / "measure-summary.md").write_text(text)
        return text
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
    lines += ["", "Measured first (OUT/measure):", "", *measure_table(out)]
    text = "\n".join(lines) + "\n"
    (out / "summary.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main(Path(sys.argv[1]), "--measure-only" in sys.argv[2:]))
