"""`dali-stream` command line: make-sample, inspect, verify, diagnose, bench, demo.

Only the standard library is imported at module level, so `dali-stream --help` works on a node whose
torch or DALI install is broken; each command imports what it needs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from .flags import add_loader_flags, loader_settings

# The loader settings each command takes as flags (type, default and help from LoaderConfig).
DEMO_SETTINGS = ("batch_size", "episode_pool_size", "num_workers", "decode", "device", "tolerance_s", "frame_cache_bytes",
                 "frame_cache_dir")
BENCH_SETTINGS = ("decode", "batch_size", "num_workers", "episode_pool_size", "device", "image_dtype", "memory_format",
                  "tolerance_s", "data_files_root", "revision", "join_streams", "nvdec_engine", "decode_threads",
                  "frame_cache_bytes", "frame_cache_dir")

def _make_sample_args(p: argparse.ArgumentParser) -> None:
    from .sample_defaults import CONTENTS, PIX_FMTS, RECORDERS
    from .sample_defaults import SAMPLE_DEFAULTS as from_spec
    p.add_argument("--num-episodes", "--episodes", dest="episodes", type=int, default=from_spec["episodes"],
                   metavar="N", help="how many episodes the sample holds (default %(default)s); a count, where "
                                     "StreamLoader's `episodes=` is a list of episode indices to use")
    p.add_argument("--min-length", type=int, default=from_spec["min_length"], help="shortest episode, frames")
    p.add_argument("--max-length", type=int, default=from_spec["max_length"], help="longest episode, frames")
    p.add_argument("--cameras", default=from_spec["cameras"],
                   help="NAME:CODEC list, codecs h264|hevc|av1|vp9 (default %(default)s)")
    p.add_argument("--height", type=int, default=from_spec["height"])
    p.add_argument("--width", type=int, default=from_spec["width"])
    p.add_argument("--fps", type=int, default=from_spec["fps"])
    p.add_argument("--gop", type=int, default=from_spec["gop"], help="keyframe interval, frames")
    p.add_argument("--episodes-per-file", type=int, default=from_spec["episodes_per_file"],
                   help="episodes packed into one MP4 per camera")
    p.add_argument("--chunks-size", type=int, default=from_spec["chunks_size"], help="files per chunk folder")
    p.add_argument("--tasks", type=int, default=from_spec["tasks"], help="distinct task strings")
    p.add_argument("--seed", type=int, default=from_spec["seed"], help="seed of the episode lengths and scenes")
    p.add_argument("--content", choices=CONTENTS, default=from_spec["content"],
                   help="pattern: a smooth moving pattern (fast); scene: camera-like frames that compress and decode "
                        "like real robot footage (default %(default)s)")
    p.add_argument("--crf", type=int, default=from_spec["crf"],
                   help="every camera's encoder at this crf (lerobot records at 30; default: per-codec settings that "
                        "keep the painted ids readable at small sizes)")
    p.add_argument("--recorder", choices=RECORDERS, default=from_spec["recorder"],
                   help="dali_stream: one continuous stream a file; lerobot: each episode encoded alone with lerobot "
                        "0.6.1's PyAV options (use --gop 2 --crf 30 for its defaults) and appended as its recorder "
                        "does; encoder-defaults: one continuous stream a file with each encoder's own defaults (x265 "
                        "open GOPs, VP9 alt-ref and AV1 hidden frames; a camera may name another encoder: "
                        "aux:av1/libaom-av1) (default %(default)s)")
    p.add_argument("--pix-fmt", choices=PIX_FMTS, default=from_spec["pix_fmt"],
                   help="pixel format of H.264/VP9 cameras (AV1 and HEVC stay yuv420p, as lerobot keeps them)")
    p.add_argument("--state-dim", type=int, default=from_spec["state_dim"],
                   help="length of observation.state and action: members of a mixture of different embodiments "
                        "(6- and 7-dof) (default %(default)s)")
    p.add_argument("--id-offset", type=int, default=from_spec["id_offset"],
                   help="added to the painted episode id and to the state's episode entry, so the members of a mixture "
                        "tell apart which dataset a frame came from (default %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="replace OUT if it exists")
    p.add_argument("--workers", type=int, default=None,
                   help="processes encoding the video files (default: one per core for samples of 200M+ pixels "
                        "of video, else 1)")


def _spec(args: argparse.Namespace):
    from .sample_data import SampleSpec, parse_cameras

    return SampleSpec(episodes=args.episodes, min_length=args.min_length, max_length=args.max_length,
                      cameras=parse_cameras(args.cameras), height=args.height, width=args.width, fps=args.fps,
                      gop=args.gop, episodes_per_file=args.episodes_per_file, chunks_size=args.chunks_size,
                      tasks=args.tasks, seed=args.seed, content=args.content, crf=args.crf,
                      recorder=args.recorder, pix_fmt=args.pix_fmt, state_dim=args.state_dim,
                      id_offset=args.id_offset)


def _write_with_progress(out: Path, spec, overwrite: bool, console, workers: int | None = None) -> Path:
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from .sample_data import write_sample

    with Progress(TextColumn("[bold]writing sample dataset"), BarColumn(), MofNCompleteColumn(),
                  TextColumn("files"), TimeElapsedColumn(), console=console, transient=False) as bar:
        task = bar.add_task("write", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return write_sample(out, spec, overwrite=overwrite, progress=progress, workers=workers)


def cmd_make_sample(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..meta.dataset import INFO_PATH
    from .sample_data import SAMPLE_KEY

    console = Console(stderr=True)
    spec = _spec(args)
    info = Path(args.out) / INFO_PATH
    if not args.overwrite and info.exists():  # written before: the same settings are nothing to do
        written = json.loads(info.read_text()).get(SAMPLE_KEY)
        wanted = json.loads(json.dumps(spec.record()))
        differ = sorted(k for k, v in wanted.items() if (written or {}).get(k) != v)
        if written is not None and not differ:
            console.print(f"{args.out} already holds this sample (same settings): nothing to write")
            return 0
        raise FileExistsError(f"{args.out} already holds a dataset written with other settings "
                              f"({', '.join(differ) or 'not by make-sample'}); pass --overwrite to replace it, or "
                              "write to another folder")
    path = _write_with_progress(Path(args.out), spec, args.overwrite, console, args.workers)
    console.print(f"wrote LeRobot v3.0 dataset: {path} ({spec.episodes} episodes, "
                  f"{int(spec.lengths().sum())} frames, cameras {', '.join(c.text() for c in spec.cameras)})")
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from ..decode import proven
    from ..decode.routes import Node, choose_routes, formats_of
    from ..meta.dataset import DatasetMeta
    from ..mixture import is_mixture_file

    if is_mixture_file(args.dataset):
        return _inspect_mixture(args)
    meta = DatasetMeta.open(args.dataset, revision=args.revision)
    formats = formats_of(meta)  # auto as the loader's defaults take it: joined streams on NVDEC
    node = Node.probe()
    routes = choose_routes(formats, "auto", node, unproven=proven.rule(formats))
    report = {
        "source": meta.source,
        "revision": args.revision,
        "codebase_version": meta.info.get("codebase_version"),
        "fps": meta.fps,
        "episodes": meta.num_episodes,
        "frames": meta.total_frames,
        "tasks": len(meta.tasks),
        "cameras": {k: {"codec": c.codec, "height": c.height, "width": c.width, "pix_fmt": c.pix_fmt,
                        "route_auto": routes[k].route, "reason": routes[k].reason} for k, c in meta.cameras.items()},
        "table_features": {k: {"dtype": meta.features[k].get("dtype"), "shape": meta.features[k].get("shape")}
                           for k in meta.table_keys},
        # what the decoded-frame cache would hold to keep every frame (frame_cache_bytes, docs/memory.md)
        "decoded_bytes": sum(c.height * c.width * 3 for c in meta.cameras.values()) * meta.total_frames,
        "derived": _derived(meta, {k: c.route for k, c in routes.items()}, node),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from rich.console import Console

    from .diagnose_report import keyed_table

    console = Console()
    at = f" @ {args.revision}" if args.revision else ""
    console.print(f"[bold]{meta.source}{at}[/] LeRobot {report['codebase_version']}: {meta.num_episodes} episodes, "
                  f"{meta.total_frames} frames at {meta.fps:g} fps, {len(meta.tasks)} tasks")
    table = keyed_table(("camera", "codec", "size", "decode route (auto, this node)", "why"), list(report["cameras"]))
    for k, c in report["cameras"].items():
        table.add_row(k, c["codec"], f"{c['width']}x{c['height']}", c["route_auto"], c["reason"])
    console.print(table)
    if meta.cameras:
        console.print(f"decoded, every frame of every camera takes {report['decoded_bytes'] / 2**30:.2f} GiB: "
                      "frame_cache_bytes (and frame_cache_dir) that large decode each frame once, in epoch 1")
    table = keyed_table(("feature", "dtype", "shape", "names"), list(report["table_features"]))
    for k, f in report["table_features"].items():  # state, action and the index columns, as lerobot's features
        names = meta.features[k].get("names")
        shown = ", ".join(map(str, names)) if isinstance(names, list) else "" if names is None else str(names)
        table.add_row(k, str(f["dtype"]), str(tuple(f["shape"] or ())), shown)
    console.print(table)
    table = keyed_table(("derived setting (defaults, one rank, this node)", "value", "why"), list(report["derived"]))
    for name, d in report["derived"].items():
        table.add_row(name, str(d["value"]), str(d["why"]))
    console.print(table)
    return 0


def _derived(meta, routes: dict[str, str], node) -> dict[str, dict[str, Any]]:
    """The settings a loader with the default settings derives on this dataset and node, one rank
    (`loader.resolve`): what each is and why."""
    import os

    from ..config import LoaderConfig
    from ..loader.resolve import Facts, resolve
    from ..source.storage import is_local

    facts = Facts(routes=routes, gpu=node.gpu is not None, gpu_engines=node.gpu.nvdec_engines if node.gpu else None,
                  cuda_batches=node.gpus > 0, local=is_local(meta.data_fs), episodes=meta.num_episodes,
                  cpu_count=os.cpu_count() or 1)
    return resolve(LoaderConfig(), facts).describe()


def _inspect_mixture(args: argparse.Namespace) -> int:
    """`inspect MIXTURE.json`: each member (episodes, frames, fps, weight, its cameras' routes alone), and the
    mixture's keys (which members lack them, padded vectors, sizes, the route each camera key takes here)."""
    from ..decode import proven
    from ..decode.routes import Node, choose_routes, nvdec_engine
    from ..loader.mixing import camera_routes, epoch_shares
    from ..meta.catalog import Catalog
    from ..mixture import load_mixture
    from ..plan.selection import select

    if args.revision:
        print("dali-stream inspect: error: --revision applies to one dataset; a mixture file gives each member its "
              "own \"revision\"", file=sys.stderr)
        return 2
    catalog = Catalog.open(load_mixture(args.dataset), select)
    node = Node.probe()
    names = [m.name for m in catalog.members]
    # as a loader with decode="auto" routes them (each member alone, then one route per key)
    routes, alone = camera_routes(catalog, "auto", lambda formats, decode: choose_routes(
        formats, decode, node, unproven=proven.rule(formats)),
        *nvdec_engine("auto", proven.open_unproven(node.gpu.name if node.gpu else None)))
    members: dict[str, dict[str, Any]] = {}
    for m, part in zip(catalog.members, epoch_shares(catalog).tolist()):
        members[m.name] = {"source": m.meta.source, "weight": m.weight, "share": m.share, "epoch_share": part,
                           "episodes": len(m.episodes),
                           "frames": m.frames, "fps": m.meta.fps,
                           "cameras": {key: {"own_key": m.own[key], "codec": m.camera(key).codec,
                                             "height": m.camera(key).height, "width": m.camera(key).width,
                                             "route_auto": alone[m.name][key]}
                                       for key in catalog.video_keys if key in m.own}}
    keys: dict[str, dict[str, Any]] = {}
    for key, f in catalog.fields.items():
        keys[key] = {"camera": f.visual, "dtype": f.dtype, "shape": list(f.shape),
                     "lacking": [names[i] for i, o in enumerate(f.own) if o is None],
                     "renamed": {names[i]: o for i, o in enumerate(f.own) if o is not None and o != key},
                     **({"sizes": {names[i]: list(hw) for i, hw in f.sizes.items()}} if f.visual else
                        {"padded": f.padded, "lengths": {names[i]: list(s) for i, s in enumerate(f.own_shapes)
                                                         if s is not None}}),
                     **({"route_auto": routes[key].route, "reason": routes[key].reason} if f.visual else {})}
    report = {"source": args.dataset, "members": members, "samples_per_epoch": catalog.mixture.samples_per_epoch
              if catalog.mixture else None, "episodes": int(sum(len(m.episodes) for m in catalog.members)),
              "frames": int(sum(m.frames for m in catalog.members)), "keys": keys}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from rich.console import Console

    from .diagnose_report import keyed_table

    console = Console()
    console.print(f"[bold]{args.dataset}[/]: a mixture of {len(members)} datasets, {report['episodes']} episodes, "
                  f"{report['frames']} frames")
    table = keyed_table(("member", "source", "weight", "epoch share", "episodes", "frames", "fps",
                         "cameras (route alone)"),
                        list(members))
    for name, row in members.items():
        cams = ", ".join(f"{k.rsplit('.', 1)[-1]}: {c['codec']} {c['width']}x{c['height']} -> {c['route_auto']}"
                         for k, c in row["cameras"].items())
        table.add_row(name, row["source"], f"{row['weight']:g}" if row["share"] is None else "-",
                      f"{row['epoch_share']:.3f}", str(row["episodes"]), str(row["frames"]),
                      f"{row['fps']:g}", cams)
    console.print(table)
    table = keyed_table(("key", "dtype, shape", "members lacking it", "route (auto, this node)"), list(keys))
    for key, k in keys.items():
        shape = f"{k['dtype']} {k['shape']}" + (" (padded)" if k.get("padded") else "")
        table.add_row(key, shape, ", ".join(map(str, k["lacking"])) or "-", str(k.get("route_auto", "")))
    console.print(table)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )
    from rich.table import Table

    from ..loader import StreamLoader
    from ..meta.dataset import INFO_PATH
    from .sample_data import SAMPLE_KEY

    console = Console()
    if args.mixture or args.dataset.endswith(".json"):  # a mixture of datasets (`demo_mixture`)
        from . import demo_mixture

        def write(out: Path, spec) -> None:
            _write_with_progress(out, spec, True, console, args.workers)

        path = args.dataset if args.dataset.endswith(".json") else \
            str(demo_mixture.write_demo_mixture(Path(args.dataset), write))
        return demo_mixture.run(path, args.batches, loader_settings(args, DEMO_SETTINGS), args.seed,
                                args.action_horizon, console)
    root = Path(args.dataset)
    spec = _spec(args)
    if args.overwrite or not (root / INFO_PATH).exists():
        if root.exists() and not args.overwrite and (root.is_file() or any(root.iterdir())):
            console.print(f"[red]{root} exists but is not a dataset (no {INFO_PATH}): pass --overwrite to replace it "
                          "with the sample, or another folder[/]")
            return 2
        _write_with_progress(root, spec, True, console, args.workers)
    else:
        console.print(f"using the sample dataset already at {root}")
        written = json.loads((root / INFO_PATH).read_text()).get(SAMPLE_KEY)
        if written is not None:
            differ = sorted(k for k, v in json.loads(json.dumps(spec.record())).items() if written.get(k, v) != v)
            if differ:
                console.print(f"[yellow]it was written with other sample settings ({', '.join(differ)}) than these "
                              "flags ask for; pass --overwrite to write it again with them[/]")
    fps = json.loads((root / INFO_PATH).read_text())["fps"]
    t0 = time.perf_counter()
    loader = StreamLoader(str(root), **loader_settings(args, DEMO_SETTINGS), seed=args.seed,
                          delta_timestamps={"action": [i / fps for i in range(args.action_horizon)]})
    setup_s = time.perf_counter() - t0
    first_key = loader.meta.video_keys[0]
    samples = 0
    seen: set[tuple[int, int]] = set()
    with Progress(TextColumn("[bold]streaming batches"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[rate]}"), console=console) as bar:
        task = bar.add_task("stream", total=args.batches, rate="")
        t_stream = time.perf_counter()
        first_s = None
        done = 0
        while done < args.batches:
            for batch in loader:
                if first_s is None:
                    first_s = time.perf_counter() - t_stream
                samples += len(batch["task"])
                seen.update(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist()))
                done += 1
                bar.update(task, advance=1,
                           rate=f"{samples / (time.perf_counter() - t_stream):.0f} samples/s")
                if done >= args.batches:
                    break
        stream_s = time.perf_counter() - t_stream
    from .paint import UnreadableIds, read_ids

    try:
        ids: object = read_ids(batch[first_key][0])
    except UnreadableIds as exc:  # e.g. a sample written by an older dali_stream (no check row)
        ids = f"unreadable ({exc}; delete {root} to write a fresh sample)"
    summary = Table(title="dali_stream demo", show_header=False)
    summary.add_row("dataset", f"{root} ({loader.meta.num_episodes} episodes, {loader.meta.total_frames} frames)")
    summary.add_row("batches x batch size", f"{done} x {args.batch_size} on {loader.device}")
    summary.add_row("throughput", f"{samples / stream_s:.0f} samples/s")
    summary.add_row("first-batch latency", f"{first_s:.2f} s (loader set-up {setup_s:.2f} s)")
    for key, route in loader.routes.items():
        summary.add_row(f"decode {key}", f"{loader.meta.cameras[key].codec} -> {route}")
    summary.add_row("GPU", demo_gpu_note(loader.node, loader.routes, loader.route_reasons))
    summary.add_row("distinct frames seen", f"{len(seen)} of {loader.meta.total_frames}")
    summary.add_row("last sample check", f"{first_key} shows painted (episode, frame) = {ids}, table says "
                    f"({int(batch['episode_index'][0])}, {int(batch['frame_index'][0])})")
    summary.add_row("resume state", json.dumps({k: v for k, v in loader.state_dict().items()
                                                if k in ("epoch", "batches_consumed")}))
    console.print(summary)
    return 0


def demo_gpu_note(node, routes: dict[str, str], reasons: dict[str, str]) -> str:
    """What the demo says of the GPU: none usable (and why), NVDEC in use, or why every camera runs on the CPU
    here and the command that shows NVDEC (the sample's 128x96 cameras are below NVDEC's minimum for VP9/AV1/HEVC,
    and `auto` keeps unproven kinds of stream on the CPU)."""
    if node.gpus == 0:
        return f"none usable here ({node.gpu_problem or 'no CUDA GPU that DALI and torch both see'}): CPU routes"
    from ..decode.route import keys_where

    name = node.gpu.name if node.gpu is not None else "a CUDA GPU"
    nvdec = sorted(keys_where(routes, "on_gpu"))
    if nvdec:
        return f"{name}: NVDEC decodes {', '.join(nvdec)}"
    why = "; ".join(f"{k.rsplit('.', 1)[-1]}: {reasons[k]}" for k in routes)
    return (f"{name} is usable, but every camera of this sample decodes on the CPU ({why}). To see NVDEC: "
            "dali-stream demo .demo/nvdec --height 480 --width 640 --cameras front:h264,side:hevc --decode gpu")


def cmd_diagnose(args: argparse.Namespace) -> int:
    from .diagnose import diagnose

    if args.merge:
        from .diagnose_report import merge, render_merged

        files = sorted(Path(args.merge).glob("*.json"))
        if not files:
            print(f"dali-stream diagnose: error: no *.json reports in {args.merge}", file=sys.stderr)
            return 2
        merged = merge(files)
        if args.json:
            print(json.dumps(merged, indent=2))
        else:
            render_merged(merged)
        return merged["exit_code"]
    report = diagnose(args.dataset, decode_test=args.decode_test)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        from .diagnose_report import render

        render(report)
    return report["exit_code"]


def cmd_verify(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ..mixture import is_mixture_file
    from .verify import verify

    if is_mixture_file(args.dataset):
        from ..mixture import load_mixture

        sources = " ".join(m.source for m in load_mixture(args.dataset).members)
        print(f"dali-stream verify: error: {args.dataset} is a mixture; verify checks one dataset's files: run it per "
              f"member (for m in {sources}; do dali-stream verify $m; done)", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                  console=console, transient=True) as bar:
        tasks: dict[str, int] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                label = {"hash": "hashing files", "decode": "decoding files"}.get(stage, "reading episodes")
                tasks[stage] = bar.add_task(label, total=total)
            bar.update(tasks[stage], completed=done, total=total)

        report = verify(args.dataset, against=args.against, revision=args.revision, decode=args.decode,
                        progress=progress, tolerance_s=args.tolerance_s)
    if args.json:
        print(json.dumps(report, indent=2))
        return report["exit_code"]
    out = Console()
    checks = ", ".join(filter(None, [f"against {report['reference']}" if report["reference"] else "",
                                     "every frame decoded" if report["decoded"] else ""]))
    if report["meta_error"]:
        out.print(f"[red]the dataset's metadata does not load: {report['meta_error']}[/]")
    if not report["damaged"]:
        out.print(f"[green]OK[/]: {report['files_here']} files of {report['source']} checked ({checks})")
        return report["exit_code"]
    from rich.table import Table

    table = Table(title=f"damaged files of {report['source']} ({checks})")
    for column in ("file", "problem", "episodes"):
        table.add_column(column, overflow="fold")
    for f in report["damaged"]:
        eps = f["episodes"]
        table.add_row(f["file"], "; ".join(f["problems"]),
                      (", ".join(map(str, eps[:12])) + (f" … ({len(eps)})" if len(eps) > 12 else "")) or "-")
    out.print(table)
    out.print(f"[red]{len(report['damaged'])} damaged file(s); episodes affected: {report['damaged_episodes']}. "
              "Re-download those files (or re-encode the cameras with lerobot).[/]")
    return report["exit_code"]


def _bench_configs(args: argparse.Namespace):
    from ..config import LoaderConfig
    from .bench import BenchConfig

    workers = tuple(int(w) for w in args.baseline_workers.split(",") if w.strip())
    grid = [(d, m) for d in ("gpu", "cpu") for m in ("single", "sarm")] if args.matrix else [(args.decode, args.mode)]
    settings = loader_settings(args, BENCH_SETTINGS)
    return [BenchConfig(dataset=args.dataset, mode=m, loader=LoaderConfig(**(settings | {"decode": d})),
                        duration_s=args.duration_s, warmup_batches=args.warmup_batches, baseline=not args.no_baseline,
                        baseline_workers=workers, limit=not args.no_limit, num_batches=args.num_batches,
                        peers=not args.no_peers, gpu_load=args.gpu_load, cpu_all_cores=args.cpu_all_cores)
            for d, m in grid]


def _time_plan(configs: list) -> str:
    """What `bench` will measure and for about how long, said before it starts."""
    from .bench_baseline import window_s

    cfg = configs[0]
    parts = [f"the loader for {cfg.duration_s:g} s (after {cfg.warmup_batches} warm-up batches)"]
    total = cfg.duration_s
    if cfg.limit:
        parts.append("the same samples decoded alone (the decode limit)")
        total += cfg.duration_s
    if cfg.baseline:
        each = window_s(cfg)
        parts.append(f"a lerobot-style DataLoader at {len(cfg.baseline_workers)} worker counts, {each:.3g} s each")
        total += each * len(cfg.baseline_workers)
    skips = " (--no-limit / --no-baseline skip those)" if cfg.limit or cfg.baseline else ""
    return (f"bench: {len(configs)} run(s), each measuring {'; then '.join(parts)}: about {total:.0f} s a run plus "
            f"start-up{skips}")


def cmd_bench(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from ..decode.routes import Node
    from ..mixture import is_mixture_file
    from . import bench, bench_mixture, bench_report

    console = Console(stderr=True)
    own_dataset_hint = args.dataset is None
    if args.dataset is None and args.sample in bench.BENCH_MIXTURES:
        def write(path: Path, spec, why: str) -> None:
            console.print(f"writing the benchmark mixture's member {path} ({args.sample}), {why}: {spec.episodes} "
                          f"episodes of {spec.min_length}-{spec.max_length} frames at {spec.fps} fps, cameras "
                          f"{', '.join(c.text() for c in spec.cameras)} at {spec.width}x{spec.height}")
            _write_with_progress(path, spec, True, console)

        args.dataset = bench.mixture_sample(args.sample, write)
    if args.dataset is None:
        args.dataset = bench.default_dataset(args.sample)
        spec = bench.bench_sample_spec(args.sample)
        why = bench.stale_sample(args.dataset, spec)
        if why is not None:
            console.print(f"writing the benchmark sample ({args.sample}) to {args.dataset}, {why}: {spec.episodes} "
                          f"episodes of {spec.min_length}-{spec.max_length} frames, cameras "
                          f"{', '.join(c.text() for c in spec.cameras)} at {spec.width}x{spec.height}, "
                          f"GOP {spec.gop}, {spec.content} frames (minutes, once)")
            _write_with_progress(Path(args.dataset), spec, True, console)
    configs = _bench_configs(args)
    node = Node.probe()
    console.print(_time_plan(configs))
    results, failed = [], []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} runs"),
                  TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task("bench", total=len(configs))
        for cfg in configs:
            bar.update(task, description=f"bench {cfg.mode}/{cfg.loader.decode}")
            if cfg.loader.decode == "gpu" and node.gpus == 0:
                why = f" ({node.gpu_problem})" if node.gpu_problem else ""
                result = {"config": cfg.record(),
                          "skipped": f"no CUDA GPU that DALI and torch can both use on this node{why}: "
                                     "decode='gpu' needs one"}
                failed.append(f"bench {cfg.mode}/gpu skipped: {result['skipped']}")
            else:
                rest = [s for s, on in (("the raw decode limit", cfg.limit), ("the baseline", cfg.baseline)) if on]
                if is_mixture_file(cfg.dataset):
                    rest = ["the members alone"]
                # a mixture file: the mixture's rate against its members' own (`bench_mixture`)
                runner = bench_mixture.run_mixture if is_mixture_file(cfg.dataset) else bench.run
                result = runner(cfg, progress=lambda stage: bar.update(
                    task, description=f"bench {cfg.mode}/{cfg.loader.decode}: {stage}"),
                    measured=lambda got: console.print(
                        f"bench {cfg.mode}/{cfg.loader.decode}: loader {got['samples_per_s']:.1f} samples/s "
                        f"({got['frames_per_s_node']:.0f} frames/s)"
                        + (f"; now {' and '.join(rest)} for the ratios" if rest else "")))
                if result.get("error"):
                    failed.append(f"bench delivered 0 samples: {result['error']}")
            result["file"] = str(bench.write(result, args.out_dir))
            results.append(result)
            bar.advance(task)
    bench_report.print_table(results)
    if own_dataset_hint:
        console.print("bench your own dataset: dali-stream bench PATH_OR_HUB_ID (a LeRobot v3 root, hf://, s3://, or "
                      "a Hub id such as lerobot/pusht), with the loader's flags (--decode, --batch-size, "
                      "--num-workers, ...; dali-stream bench --help)")
    for r in results:
        for note in r.get("notes", []):
            console.print(f"[yellow]bench {r['config']['mode']}/{r['config']['decode']}: {note}[/]")
        console.print(f"wrote {Path(r['file']).resolve()}")
    if failed:  # a skipped or empty run must not look like success (a SLURM job would report COMPLETED)
        for reason in failed:
            console.print(f"[red]{reason}[/]")
        return 1
    return 0


def cmd_bench_summarize(args: argparse.Namespace) -> int:
    from . import bench_report

    results = bench_report.load(args.results)
    if not results:
        print(f"dali-stream bench summarize: error: no bench-*.json in {args.results}", file=sys.stderr)
        return 2
    bench_report.print_table(results, title=f"dali-stream bench: {len(results)} runs")
    if args.png:
        print(f"wrote {bench_report.plot(results, args.png)}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="dali-stream", description="An exactly resumable loader for LeRobot v3 datasets, built on NVIDIA DALI. "
        "Where it decodes: on the CPU (torchcodec/FFmpeg) for every camera today, GPU nodes included; NVDEC through "
        "the open-decoder engine has not been measured on a GPU yet, and DALI's NVDEC decoder measured slower than "
        "the CPU route (H100, 2026-11-23): `dali-stream diagnose` says what this node would do.")
    parser.add_argument("--version", action="version", version=f"dali-stream {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("make-sample", help="write a LeRobot v3.0 sample dataset with painted frame ids")
    p.add_argument("out", help="output folder")
    _make_sample_args(p)
    p.set_defaults(func=cmd_make_sample)

    p = sub.add_parser("inspect", help="summarise a dataset or a mixture: episodes, cameras, codecs, decode routes")
    p.add_argument("dataset", help="dataset root (path or fsspec URL), or a mixture file (.json: "
                                   "dali_stream.mixture.load_mixture)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--revision", help="branch, tag or commit of an hf://datasets/... repository")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("verify", help="find damaged files (sizes, hashes against a reference, decode) and the "
                                      "episodes they hold",
                       description="Exit status: 0 every file matches, 1 damaged files found (listed with their "
                                   "episodes), 2 nothing to compare with or a bad argument.")
    p.add_argument("dataset", help="dataset root (path or fsspec URL; hf://datasets/... is checked against its "
                                   "published hashes)")
    p.add_argument("--against", help="reference: hf://datasets/<org>/<name> (published hashes) or a mirror folder")
    p.add_argument("--revision", help="branch, tag or commit of an hf://datasets/... DATASET")
    p.add_argument("--decode", action="store_true", help="also decode every video frame and read every parquet "
                                                         "file (painted ids checked on sample data), then read every "
                                                         "episode as the loader does, each frame's time checked")
    p.add_argument("--tolerance-s", type=float, default=1e-4,
                   help="the loader's tolerance_s for the episodes read as it reads them (default %(default)s)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=cmd_verify)

    p = sub.add_parser("diagnose", help="what this node can decode, and how each camera of DATASET would be",
                       description="Exit status: 0 all cameras decodable here, 1 some camera cannot be decoded "
                                   "here (named), 2 the install is broken (named), 3 torch, torchcodec or DALI "
                                   "are not the versions tested together (named, with the install line).")
    p.add_argument("dataset", nargs="?", help="dataset root (path or fsspec URL), or a mixture file (.json: each "
                                              "member's cameras, and the route of each mixture key); omit for the "
                                              "node only")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--decode-test", action="store_true",
                   help="decode one frame per camera through every route this node has")
    p.add_argument("--merge", metavar="DIR", help="merge the --json reports in DIR into a nodes x cameras table")
    p.set_defaults(func=cmd_diagnose)

    p = sub.add_parser("bench", help="GPU-vs-CPU decode and dataloading benchmark with limit and baseline ratios",
                       description="Runs StreamLoader for a steady window, then the raw decode limit and a "
                                   "LeRobotDataset-style DataLoader baseline on the same samples. "
                                   "`dali-stream bench summarize RESULTS...` merges result files.")
    p.add_argument("dataset", nargs="?", help="dataset root, or a mixture file (.json: the mixture's samples/s against "
                                              "its members' own, tools/bench_mixture.py) (default: the benchmark "
                                              "sample, written on first use)")
    p.add_argument("--sample", default="av1-quick", choices=("av1-quick", "av1", "h264", "toy", "mixture-quick",
                                                             "mixture"),
                   help="which benchmark sample when DATASET is omitted (written on first use): two 640x480 "
                        "cameras, AV1 g=2 (lerobot's default): av1-quick, 5 episodes of 4-7 s (written in under a "
                        "minute on 2 cores); av1 or h264 (g=2), 20 episodes of 10-20 s (the results' sample, "
                        "minutes to write); toy: the old 200 short episodes; mixture-quick: av1-quick and a "
                        "one-camera H.264 arm at 10 fps, 7-dof, as a mixture; mixture: the same with 20 episodes "
                        "each (the results' mixture)")
    p.add_argument("--mode", default="single", choices=("single", "sarm", "camera-window"),
                   help="single: one frame per camera; sarm: one frame per camera and an 8-step action window "
                        "0..7 s, as lerobot's SARM (stage-aware reward model) samples; camera-window: 8 steps spaced "
                        "1 s on every camera (default %(default)s)")
    add_loader_flags(p, BENCH_SETTINGS)
    p.add_argument("--duration-s", type=float, default=20.0,
                   help="seconds of the loader's measured window; the decode-only run and the baseline (its worker "
                        "counts sharing it) take about as long again each (default %(default)s)")
    p.add_argument("--num-batches", type=int, default=None,
                   help="measure this many batches instead of --duration-s seconds")
    p.add_argument("--warmup-batches", type=int, default=5, help="batches before the window opens (default "
                                                                  "%(default)s)")
    p.add_argument("--out-dir", default="dali-stream-bench",
                   help="folder for the JSON files and bench.csv (default ./%(default)s; its path is printed)")
    p.add_argument("--matrix", action="store_true", help="run decode gpu/cpu x mode single/sarm")
    p.add_argument("--no-baseline", action="store_true", help="skip the DataLoader baseline")
    p.add_argument("--no-limit", action="store_true", help="skip the raw decode limit")
    p.add_argument("--baseline-workers", default="0,1,2",
                   help="DataLoader worker counts to try, the best is used (default %(default)s)")
    p.add_argument("--no-peers", action="store_true", help="skip torchcodec on CUDA and PyNvVideoCodec on the NVDEC "
                   "cameras' frames (GPU nodes; reported as not available elsewhere)")
    p.add_argument("--gpu-load", action="store_true", help="run bfloat16 8192x8192 matmuls on the loader's GPU beside "
                   "it (own CUDA stream) and report their rate alone and beside the loader")
    p.add_argument("--cpu-all-cores", action="store_true", help="also stream the CPU route (torchcodec) with a worker "
                   "per core for the same window: gpu_over_cpu_all_cores")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("bench-summarize", help="merge bench result files into one table and a PNG chart")
    p.add_argument("results", nargs="+", help="bench-*.json files or folders holding them")
    p.add_argument("--png", help="write a bar chart of frames/s per run here")
    p.set_defaults(func=cmd_bench_summarize)

    p = sub.add_parser("demo", help="write the sample dataset (if absent) and stream batches from it")
    p.add_argument("dataset", nargs="?", default=".demo/sample",
                   help="folder of the sample dataset (default %(default)s); with --mixture the folder of the demo "
                        "mixture's members; or a mixture file (.json) to stream")
    p.add_argument("--mixture", action="store_true",
                   help="write two datasets of different embodiments into DATASET (30 fps two cameras 6-dof, 10 fps "
                        "one camera 7-dof, weighted 2) and stream them as one mixture (tools/demo_mixture.py)")
    p.add_argument("--batches", type=int, default=300, help="batches to stream (default %(default)s)")
    add_loader_flags(p, DEMO_SETTINGS)
    p.add_argument("--action-horizon", type=int, default=8, help="action chunk length in frames")
    _make_sample_args(p)
    p.set_defaults(func=cmd_demo)

    # listed for --help only: main() hands `train ...` to the recipe's own parser (dali-stream train --help)
    sub.add_parser("train", help="train a policy (a small built-in one, or lerobot's: --policy act) on StreamLoader "
                                 "batches, with checkpoints and exact resume, on one process or under torchrun/"
                                 "accelerate/SLURM (dali-stream train --help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner on every encoder otherwise
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["bench", "summarize"]:  # `dali-stream bench summarize ...` reads better than bench-summarize
        argv = ["bench-summarize", *argv[2:]]
    if argv[:1] == ["train"]:
        from .train import main as train

        return train(argv[1:])
    args = build_parser().parse_args(argv)
    from ..errors import DaliStreamError

    try:
        return int(args.func(args) or 0)
    except (DaliStreamError, ValueError, OSError) as exc:
        print(f"dali-stream {args.command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
