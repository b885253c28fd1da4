"""`dali-stream` command line: make-sample, inspect, verify, diagnose, bench, bench-summarize, demo, train,
transcode.

Only the standard library is imported at module level, so `dali-stream --help` works on a node whose
torch or DALI install is broken; each command imports what it needs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Callable

from .cli_bench import cmd_bench, cmd_bench_summarize
from .cli_common import BENCH_SETTINGS, DEMO_SETTINGS, make_sample_args, sample_spec, write_with_progress
from .cli_demo import cmd_demo
from .cli_inspect import cmd_inspect
from .flags import add_loader_flags


def cmd_make_sample(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..meta.dataset import INFO_PATH
    from .sample_data import SAMPLE_KEY

    console = Console(stderr=True)
    spec = sample_spec(args)
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
    path = write_with_progress(Path(args.out), spec, args.overwrite, console, args.workers)
    console.print(f"wrote LeRobot v3.0 dataset: {path} ({spec.episodes} episodes, "
                  f"{int(spec.lengths().sum())} frames, cameras {', '.join(c.text() for c in spec.cameras)})")
    return 0


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
    from .flags import checked_settings
    from .verify import verify

    checked_settings(args, ("tolerance_s",))
    if is_mixture_file(args.dataset):
        from ..mixture import load_mixture

        sources = " ".join(m.source for m in load_mixture(args.dataset).members)
        print(f"dali-stream verify: error: {args.dataset} is a mixture; verify checks one dataset's files: run it per "
              f"member (for m in {sources}; do dali-stream verify $m; done)", file=sys.stderr)
        return 2
    console = Console(stderr=True)
    # started at the first progress report, not before: an error raised earlier leaves no blank line above it
    bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TimeElapsedColumn(),
                   console=console, transient=True)
    tasks: dict[str, int] = {}

    def progress(stage: str, done: int, total: int) -> None:
        if not tasks:
            bar.start()
        if stage not in tasks:
            label = {"hash": "hashing files", "decode": "decoding files"}.get(stage, "reading episodes")
            tasks[stage] = bar.add_task(label, total=total)
        bar.update(tasks[stage], completed=done, total=total)

    try:
        report = verify(args.dataset, against=args.against, revision=args.revision, decode=args.decode,
                        progress=progress, tolerance_s=args.tolerance_s)
    finally:
        if tasks:  # rich ends even a bar never started with a blank line where stderr is no terminal
            bar.stop()
    if args.json:
        print(json.dumps(report, indent=2))
        return report["exit_code"]
    out = Console()
    checks = ", ".join(filter(None, [f"against {report['reference']}" if report["reference"] else "",
                                     "every frame decoded" if report["decoded"] else "",
                                     report["decoded_why"] if report["decoded_why"] not in (None, "asked (--decode)")
                                     else ""]))
    if report["meta_error"]:
        out.print(f"[red]the dataset's metadata does not load: {report['meta_error']}[/]")
    for problem in report["dataset_problems"]:
        out.print(f"[red]the dataset, not a file: {problem}[/]")
    if not report["damaged"]:
        if report["exit_code"] == 0:
            out.print(f"[green]OK[/]: {report['files_here']} files of {report['source']} checked ({checks})")
        else:
            out.print(f"no damaged file among the {report['files_here']} of {report['source']} ({checks})")
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


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="dali-stream", description="An exactly resumable loader for LeRobot v3 datasets, built on NVIDIA DALI. "
        "Where it decodes: decode='auto' takes the CPU (torchcodec/FFmpeg) for every camera today, GPU nodes "
        "included. NVDEC on request (decode='gpu'): DALI's decoder measured slower than the CPU route (H100, "
        "2026-11-23); the open-decoder engine (nvdec_engine='open') gave the right frames on an H200 and 1.34x the "
        "CPU route's rate on all 16 cores at 640x480 (2026-11-29), not yet taken by 'auto'. `dali-stream diagnose` "
        "says what this node would do.")
    parser.add_argument("--version", action="version", version=f"dali-stream {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("make-sample", help="write a LeRobot v3.0 sample dataset with painted frame ids")
    p.add_argument("out", help="output folder")
    make_sample_args(p)
    p.set_defaults(func=cmd_make_sample)

    p = sub.add_parser("inspect", help="summarise a dataset or a mixture: episodes, cameras, codecs, decode routes")
    p.add_argument("dataset", help="dataset root (path or fsspec URL), or a mixture file (.json: "
                                   "dali_stream.mixture.load_mixture)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--revision", help="branch, tag or commit of an hf://datasets/... repository")
    p.add_argument("--resize", nargs=2, type=int, metavar=("H", "W"),
                   help="the loader's resize: what the decoded-frame cache would hold is counted at this size (it "
                        "keeps frames resized and cropped where batches are on the CPU)")
    p.add_argument("--crop", nargs=2, type=int, metavar=("H", "W"), help="the loader's crop, as --resize")
    p.add_argument("--nodes", type=int, default=1, help="nodes of the job: the disk each node's disk_cache_dir "
                                                        "needs with partition='node' is counted for them")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("verify", help="find damaged files (sizes, hashes against a reference, decode) and the "
                                      "episodes they hold",
                       description="Without --against a dataset with no published hashes is decoded (--decode). "
                                   "Exit status: 0 every file matches, 1 damaged files found (listed with their "
                                   "episodes), 2 a bad argument.")
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
                                   "`dali-stream bench-summarize RESULTS...` merges result files.")
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
    p.add_argument("--cpu-all-cores", nargs="?", const="cpu", default=None,
                   metavar="ROUTE", help="also stream a CPU route with a worker per core for the same window: "
                   "gpu_over_cpu_all_cores; ROUTE cpu (torchcodec, the default) or cpu-open (FFmpeg's decoders through "
                   "PyAV: where this node's torchcodec cannot read the stream)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("bench-summarize", help="merge bench result files into one table and a PNG chart")
    p.add_argument("results", nargs="+", help="bench-*.json files or folders holding them")
    p.add_argument("--png", help="write a bar chart of frames/s per run here")
    p.set_defaults(func=cmd_bench_summarize)

    p = sub.add_parser("demo", help="write the sample dataset (if absent) and stream batches from it")
    p.add_argument("dataset", nargs="?", default=".demo/sample",
                   help="folder of the sample dataset (default %(default)s), written if absent; a dataset there, a "
                        "Hub id (lerobot/pusht) or a URL is streamed as it is; with --mixture the folder of the demo "
                        "mixture's members; or a mixture file (.json) to stream")
    p.add_argument("--mixture", action="store_true",
                   help="write two datasets of different embodiments into DATASET (30 fps two cameras 6-dof, 10 fps "
                        "one camera 7-dof, weighted 2) and stream them as one mixture (tools/demo_mixture.py)")
    p.add_argument("--batches", type=int, default=300, help="batches to stream (default %(default)s)")
    add_loader_flags(p, DEMO_SETTINGS)
    p.add_argument("--action-horizon", type=int, default=8, help="action chunk length in frames")
    make_sample_args(p)
    p.set_defaults(func=cmd_demo)

    # listed for --help only: main() hands `train ...` to the recipe's own parser (dali-stream train --help)
    sub.add_parser("train", help="train a policy (a small built-in one, or lerobot's: --policy act) on StreamLoader "
                                 "batches, with checkpoints and exact resume, on one process or under torchrun/"
                                 "accelerate/SLURM (dali-stream train --help)", add_help=False)
    sub.add_parser("transcode", help="write a dataset's AV1 (or other) cameras again in H.264/HEVC, which NVDEC on "
                                     "A100/H100/H200 decodes (dali-stream transcode --help)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints its banner on every encoder otherwise
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["bench", "summarize"]:  # `dali-stream bench summarize ...` reads better than bench-summarize
        argv = ["bench-summarize", *argv[2:]]
    if argv[:1] == ["train"]:
        from .train import main as train

        return reported("train", lambda: train(argv[1:]))
    if argv[:1] == ["transcode"]:
        from .transcode import main as transcode

        return reported("transcode", lambda: transcode(argv[1:]))
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # said by the command's own parser, with its usage, not the top level's
        commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
        commands[args.command].error(f"unrecognized arguments: {' '.join(extra)}")
    return reported(args.command, lambda: args.func(args))


def reported(command: str, run: Callable[[], int | None]) -> int:
    """`run()`'s exit status; an error it raises for the user (a bad argument or dataset, a missing package) is one
    line, `dali-stream COMMAND: error: ...`, and exit status 2."""
    from ..errors import DaliStreamError

    try:
        return int(run() or 0)
    except (DaliStreamError, ValueError, OSError) as exc:
        print(f"dali-stream {command}: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
