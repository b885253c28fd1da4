"""Render a `dali-stream diagnose` report (rich tables, or plain text without rich) and merge node reports."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _software_rows(software: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows = []
    for name, info in software.items():
        if not info["ok"]:
            rows.append((name, "FAILED" if info.get("installed", True) else "not installed", info["error"]))
            continue
        details = {k: v for k, v in info.items() if k not in ("ok", "version")}
        rows.append((name, str(info.get("version", "")), ", ".join(f"{k}={v}" for k, v in details.items())))
    return rows


def _camera_rows(cameras: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for key, c in cameras.items():
        size = f"{c['width']}x{c['height']}" if "width" in c else "?"
        tests = c.get("decode_test", {})
        tested = ", ".join(f"{r}:{'ok' if t['ok'] else ('-' if t['ok'] is None else 'FAIL')}"
                           + (f" {t['seconds'] * 1e3:.0f}ms" if t.get("seconds") is not None else "")
                           for r, t in tests.items() if r != "segment")
        state = "yes" if c["decodable"] else f"NO ({c['layer']})"
        rows.append((key, c["codec"], str(c.get("profile", "")), str(c.get("pix_fmt", "")), size,
                     str(c.get("fps", "")), str(c.get("gop", "")), str(c.get("b_frames", "")), c["route"], state,
                     tested))
    return rows


def keyed_table(headers, keys, title: str | None = None):
    """A rich Table whose first column holds `keys` (camera keys such as observation.images.front) whole at any
    terminal width, never cut to an ellipsis; the other columns fold their text onto more lines instead."""
    from rich.table import Column, Table

    first = Column(headers[0], no_wrap=True, min_width=max([len(headers[0]), *map(len, keys)]))
    return Table(first, *(Column(h, overflow="fold") for h in headers[1:]), title=title)


CAMERA_HEADER = ("camera", "codec", "profile", "pix_fmt", "size", "fps", "gop", "B-frames", "route (auto)",
                 "decodable", "decode test")
EXIT_COLOURS = {0: "green", 1: "yellow", 2: "red", 3: "red"}


def _wide_enough(width: int, keys: list[str], rows: list[tuple[str, ...]]) -> bool:
    """Whether the cameras fit one table of `width` columns with every header and cell on one line (a narrower
    table would fold the headers letter by letter: each camera is then printed as a block of its own)."""
    need = [max([len(CAMERA_HEADER[i]), *(len(r[i]) for r in rows)]) for i in range(len(CAMERA_HEADER))]
    need[0] = max([need[0], *map(len, keys)])
    return sum(need) + 3 * len(need) + 1 <= width


def _print_cameras(console, dataset: dict[str, Any]) -> None:
    """The dataset's cameras: one table where the terminal is wide enough, else one block per camera."""
    from rich.markup import escape

    rows = _camera_rows(dataset["cameras"])
    title = f"{dataset['source']} ({dataset['codebase_version']}, {dataset['episodes']} episodes)"
    if _wide_enough(console.width, list(dataset["cameras"]), rows):
        table = keyed_table(CAMERA_HEADER, list(dataset["cameras"]), title=escape(title))
        for cam_row, cam in zip(rows, dataset["cameras"].values()):
            table.add_row(*map(escape, cam_row), style=None if cam["decodable"] else "red")
        console.print(table)
        return
    console.print(f"[bold]{escape(title)}[/]")
    for cam_row, cam in zip(rows, dataset["cameras"].values()):
        console.print(f"[bold{'' if cam['decodable'] else ' red'}]{escape(cam_row[0])}[/]")
        console.print("  " + escape("; ".join(f"{header} {value}" for header, value in zip(CAMERA_HEADER[1:],
                                                                                     cam_row[1:]) if value)))


def render(report: dict[str, Any]) -> None:
    try:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table  # noqa: F401 - a broken rich must fail here, before the report starts
    except Exception:  # a broken rich must not hide the report
        print(render_plain(report))
        return
    console = Console()
    node = report["node"]
    if node["ok"]:
        gpus = "; ".join(f"{g['index']}: {g['name']} (cc {'.'.join(map(str, g['compute_capability']))}, "
                         f"{g['memory_gib']} GiB, {g['generation']}, {g['nvdec_engines'] or '?'} NVDEC, "
                         f"{'/'.join(g['nvdec_codecs'])}, driver {g['driver']}, CUDA {g['cuda_driver_version']}, "
                         f"MIG {g['mig']})" for g in node["gpus"]) or f"none ({node['gpu_query']})"
        console.print(f"[bold]{escape(node['hostname'])}[/]: {node['cpu_cores']} CPU cores; GPUs: {escape(gpus)}")
    else:
        console.print(f"[red]node probe failed: {escape(str(node['error']))}[/]")
    gpu = report.get("gpu") or {}
    if gpu.get("layer"):
        console.print(f"[yellow]GPU not used for decode ({gpu['layer']}): {escape(str(gpu['problem']))}\n  fix: "
                      f"{escape(str(gpu['fix']))}[/]")
    table = keyed_table(("package", "version", "details"), [row[0] for row in _software_rows(report["software"])],
                        title="software")
    for row in _software_rows(report["software"]):  # texts such as `pip install '.[nvdec]'` are no markup
        table.add_row(*map(escape, row), style="red" if row[1] == "FAILED" else None)
    console.print(table)
    dataset = report.get("dataset")
    if dataset is not None:
        if dataset.get("ok"):
            _print_cameras(console, dataset)
            for key, cam in dataset["cameras"].items():
                console.print(f"  {escape(key)}: {escape(cam['reason'])}" + (
                    "" if cam["decodable"] else f"\n    [red]{escape(str(cam['error']))}[/]\n    fix: "
                                                f"{escape(str(cam['fix']))}"))
            for key, route in dataset.get("mixture_routes", {}).items():  # a mixture: one route per key
                console.print(f"  mixture key {escape(key)}: {route['route']} ({escape(route['reason'])})")
            if dataset.get("nvdec_hint"):
                console.print(escape(dataset["nvdec_hint"]))
        else:
            console.print(f"[red]dataset: {dataset.get('layer', '')} {escape(str(dataset.get('error')))}[/]")
    colour = EXIT_COLOURS[report["exit_code"]]
    console.print(f"[bold {colour}]{escape(report['verdict'])}[/] ({report['seconds']} s)")


def render_plain(report: dict[str, Any]) -> str:
    lines = [f"{name}: {version} {details}" for name, version, details in _software_rows(report["software"])]
    gpu = report.get("gpu") or {}
    if gpu.get("layer"):
        lines.append(f"GPU not used for decode ({gpu['layer']}): {gpu['problem']}; fix: {gpu['fix']}")
    if report.get("dataset", {}).get("ok"):
        lines += [" | ".join(row) for row in _camera_rows(report["dataset"]["cameras"])]
    return "\n".join(lines + [report["verdict"]])


def merge(paths: list[Path]) -> dict[str, Any]:
    """Node reports (`diagnose --json` files, one per node, named after it) -> nodes x cameras, worst exit code."""
    nodes, cameras = {}, []
    for path in sorted(paths):
        report = json.loads(Path(path).read_text())
        host = Path(path).stem  # the launcher names each report after its node (hostname.json)
        nodes[host] = {"exit_code": report["exit_code"], "verdict": report["verdict"],
                       "gpus": [g["name"] for g in report.get("node", {}).get("gpus", [])]}
        for key, cam in report.get("dataset", {}).get("cameras", {}).items():
            if key not in cameras:
                cameras.append(key)
            nodes[host].setdefault("cameras", {})[key] = cam["route"] if cam["decodable"] else f"NO ({cam['layer']})"
    return {"nodes": nodes, "cameras": cameras, "exit_code": max((n["exit_code"] for n in nodes.values()), default=2)}


def render_merged(merged: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table("node", "GPUs", *merged["cameras"], "exit", title="dali-stream diagnose: nodes x cameras")
    for host, n in merged["nodes"].items():
        table.add_row(host, ", ".join(sorted(set(n["gpus"]))) or "-",
                      *(n.get("cameras", {}).get(k, "?") for k in merged["cameras"]), str(n["exit_code"]),
                      style=None if n["exit_code"] == 0 else "red")
    Console().print(table)
