"""`dali-stream bench` and `bench-summarize`: the commands over `tools.bench` (one run per configuration, the
plan printed before, the results summarised)."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
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
    """What `bench` will measure, phase by phase, said before it starts: the time of its windows; the whole run's is
    estimated once the loader's warm-up has measured this node's decode cost (`bench_plan.estimate`)."""
    from .bench_baseline import window_s

    cfg = configs[0]
    window = f"{cfg.num_batches} batches" if cfg.num_batches else f"{cfg.duration_s:g} s"
    parts = [f"setup; the loader's warm-up ({cfg.warmup_batches} batches) and its window ({window})"]
    floor = 0.0 if cfg.num_batches else cfg.duration_s
    if cfg.limit:
        parts.append("the decode limit (the window's frames decoded again, alone)")
    if cfg.baseline:
        each = window_s(cfg)
        parts.append(f"a lerobot-style DataLoader at {len(cfg.baseline_workers)} worker counts ({each:.3g} s windows)")
        floor += each * len(cfg.baseline_workers)
    skips = " (--no-limit / --no-baseline skip those)" if cfg.limit or cfg.baseline else ""
    return (f"bench: {len(configs)} run(s), each: {'; '.join(parts)}{skips}. The windows alone take {floor:.0f} s a "
            "run; the whole run's time is estimated once the warm-up has measured this node's decode speed")


def _estimate_text(name: str, est: dict) -> str:
    """A run's estimate (`bench_plan.estimate`) in one line: the total, then each phase (done or to come)."""
    parts = ", ".join(f"{phase} {seconds:.0f} s" for phase, seconds in est["phases"].items() if seconds >= 0.5)
    if est["when"] == "warm-up":
        return f"{name}: about {est['total_s']:.0f} s in all ({parts}; from the warm-up's decode cost)"
    return f"{name}: about {est['total_s']:.0f} s in all, now that the window is measured ({parts})"


class _RunBar:
    """One run's row of the progress bar: the phase under way named, the bar moving with the seconds spent against
    the run's estimate (its windows' time until the warm-up's estimate comes, `bench_plan.estimate`)."""

    def __init__(self, bar, name: str, floor: float) -> None:
        self.bar, self.name, self.total = bar, name, max(1.0, floor)
        self.task = bar.add_task(f"{name}: setup", total=self.total)
        self.t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, daemon=True)
        self._thread.start()

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            self.bar.update(self.task, completed=min(time.perf_counter() - self.t0, 0.99 * self.total))

    def phase(self, name: str) -> None:
        self.bar.update(self.task, description=f"{self.name}: {name}")

    def estimate(self, est: dict) -> None:
        self.total = max(1.0, est["total_s"])
        self.bar.update(self.task, total=self.total)

    def done(self) -> float:
        """The run's seconds; the bar full."""
        self._stop.set()
        self._thread.join()
        spent = time.perf_counter() - self.t0
        self.bar.update(self.task, total=spent, completed=spent, description=f"{self.name}: done")
        return spent


def _refuse_missing(dataset: str) -> None:
    """A local dataset folder that does not exist is the loader's own error, raised before the run's plan is printed
    (a remote one is read once, by the run)."""
    from ..meta.dataset import DatasetMeta
    from ..mixture import is_mixture_file
    from ..source.storage import resolve_source

    if not is_mixture_file(dataset) and "://" not in resolve_source(dataset) and not os.path.isdir(dataset):
        DatasetMeta.open(dataset)


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
    _refuse_missing(args.dataset)
    node = Node.probe()
    console.print(_time_plan(configs))
    from .bench_baseline import window_s

    results, failed = [], []
    with Progress(TextColumn("[bold]{task.description}"), BarColumn(),
                  TextColumn("{task.completed:.0f}/{task.total:.0f} s estimated"), TimeElapsedColumn(),
                  console=console) as bar:
        for i, cfg in enumerate(configs):
            name = f"bench {cfg.mode}/{cfg.loader.decode}" + (f" ({i + 1}/{len(configs)})" if len(configs) > 1 else "")
            floor = (0 if cfg.num_batches else cfg.duration_s) + window_s(cfg) * len(cfg.baseline_workers) * cfg.baseline
            run_bar = _RunBar(bar, name, floor)
            estimates: list[dict] = []

            def estimated(est: dict, name=name, run_bar=run_bar, estimates=estimates) -> None:
                estimates.append(est)
                run_bar.estimate(est)
                console.print(_estimate_text(name, est))
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
                result = runner(cfg, progress=run_bar.phase, estimated=estimated, measured=lambda got: console.print(
                        f"bench {cfg.mode}/{cfg.loader.decode}: loader {got['samples_per_s']:.1f} samples/s "
                        f"({got['frames_per_s_node']:.0f} frames/s)"
                        + (f"; now {' and '.join(rest)} for the ratios" if rest else "")))
                if result.get("error"):
                    failed.append(f"bench delivered 0 samples: {result['error']}")
            spent = run_bar.done()
            if estimates:
                result["estimates"] = [{k: e[k] for k in ("when", "total_s", "phases")} for e in estimates]
                console.print(f"{name} took {spent:.0f} s (estimated {estimates[0]['total_s']:.0f} s as its window "
                              f"opened, {estimates[-1]['total_s']:.0f} s once it closed)")
            else:
                console.print(f"{name} took {spent:.0f} s")
            result["file"] = str(bench_report.write(result, args.out_dir))
            results.append(result)
            if bench_report.has_matplotlib() and not result.get("skipped") and not result.get("error"):
                png = bench_report.plot([result], Path(result["file"]).with_suffix(".png"))
                console.print(f"wrote its chart {png.resolve()} (the loader, the decode limit and the baseline)")
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
