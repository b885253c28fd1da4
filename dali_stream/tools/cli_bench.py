"""`dali-stream bench` and `bench-summarize`: the commands over `tools.bench` (one run per configuration, the
plan printed before, the results summarised)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .cli_common import BENCH_SETTINGS, write_with_progress
from .flags import checked_settings


def _bench_configs(args: argparse.Namespace):
    from ..config import LoaderConfig
    from ..errors import ConfigError
    from .bench import BenchConfig

    words = [w.strip() for w in args.baseline_workers.split(",") if w.strip()]
    if not all(w.isdigit() for w in words) or not (words or args.no_baseline):
        raise ConfigError(f"--baseline-workers takes DataLoader worker counts >= 0, comma-separated (0,1,2). Found: "
                          f"{args.baseline_workers!r}")
    workers = tuple(int(w) for w in words)
    grid = [(d, m) for d in ("gpu", "cpu") for m in ("single", "sarm")] if args.matrix else [(args.decode, args.mode)]
    settings = checked_settings(args, BENCH_SETTINGS)
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

    from ..decode.node import Node
    from ..mixture import is_mixture_file
    from . import bench, bench_mixture, bench_report, bench_samples

    console = Console(stderr=True)
    _bench_configs(args)  # every flag checked before a sample is written
    own_dataset_hint = args.dataset is None
    if args.dataset is None and args.sample in bench_samples.BENCH_MIXTURES:
        def write(path: Path, spec, why: str) -> None:
            console.print(f"writing the benchmark mixture's member {path} ({args.sample}), {why}: {spec.episodes} "
                          f"episodes of {spec.min_length}-{spec.max_length} frames at {spec.fps} fps, cameras "
                          f"{', '.join(c.text() for c in spec.cameras)} at {spec.width}x{spec.height}")
            write_with_progress(path, spec, True, console)

        args.dataset = bench_samples.mixture_sample(args.sample, write)
    if args.dataset is None:
        args.dataset = bench_samples.default_dataset(args.sample)
        spec = bench_samples.bench_sample_spec(args.sample)
        why = bench_samples.stale_sample(args.dataset, spec)
        if why is not None:
            console.print(f"writing the benchmark sample ({args.sample}) to {args.dataset}, {why}: {spec.episodes} "
                          f"episodes of {spec.min_length}-{spec.max_length} frames, cameras "
                          f"{', '.join(c.text() for c in spec.cameras)} at {spec.width}x{spec.height}, "
                          f"GOP {spec.gop}, {spec.content} frames (minutes, once)")
            write_with_progress(Path(args.dataset), spec, True, console)
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
            result["file"] = str(bench_report.write(result, args.out_dir))
            results.append(result)
            bar.advance(task)
    bench_report.print_table(results)
    if own_dataset_hint:
        console.print("bench your own dataset: dali-stream bench PATH_OR_HUB_ID (a LeRobot v3 root, hf://, s3://, or "
                      "a Hub id such as lerobot/pusht), with the loader's flags (--decode, --batch-size, "
                      "--num-workers, ...; dali-stream bench --help)")
    for r in results:
        if r.get("frame_cache"):
            from .bench_cache import cache_text

            console.print(f"bench {r['config']['mode']}/{r['config']['decode']}: {cache_text(r['frame_cache'])}")
        if r.get("disk_cache"):
            from .bench_disk import disk_text

            console.print(f"bench {r['config']['mode']}/{r['config']['decode']}: {disk_text(r['disk_cache'])}")
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

    if args.png:
        bench_report.require_matplotlib()  # before anything is printed
    results = bench_report.load(args.results)
    if not results:
        print(f"dali-stream bench-summarize: error: no bench-*.json in {args.results}", file=sys.stderr)
        return 2
    bench_report.print_table(results, title=f"dali-stream bench: {len(results)} runs")
    if args.png:
        print(f"wrote {bench_report.plot(results, args.png)}")
    return 0
