"""`dali-stream bench` results: each run written (one JSON file, a row of bench.csv), then tables and the PNG chart."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterable


def load(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Result dicts from files and folders (every bench-*.json inside a folder), oldest first."""
    files: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise FileNotFoundError(f"{p} does not exist: pass bench result files (bench-*.json) or folders holding "
                                    "them (`dali-stream bench` writes them into its --out-dir, ./dali-stream-bench)")
        files.extend(sorted(p.glob("bench-*.json")) if p.is_dir() else [p])
    results = []
    for f in files:
        r = json.loads(f.read_text())
        r["_file"] = f.name
        results.append(r)
    return results


def label(r: dict[str, Any]) -> str:
    c = r["config"]
    routes = "+".join(sorted(set(r.get("routes", {}).values()))) or c["decode"]
    mixed = r.get("mixture")
    if mixed:  # a mixture's run (`bench_mixture`): its rate against its members' own
        return f"{c['mode']} / {c['decode']} ({routes}) mixture: {mixed['ratio_median']:.2f} of its members' rates"
    return f"{c['mode']} / {c['decode']} ({routes})"


def _fmt(value, digits=1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def dataset_text(r: dict[str, Any]) -> str:
    """The dataset as the run was given it (a path, URL or Hub id); `sample <variant>` for bench's own samples."""
    from .bench_samples import BENCH_MIXTURES, BENCH_SAMPLES, default_dataset

    given = str(r["config"]["dataset"])
    for variant in (*BENCH_SAMPLES, *BENCH_MIXTURES):
        own = default_dataset(variant)
        if given in (own, f"{own}/mixture.json"):
            return f"sample {variant}"
    return given


def rows(results: list[dict[str, Any]]) -> list[list[str]]:
    out: list[list[str]] = []
    for r in results:
        c = r["config"]
        workers = str(c.get("num_workers", "derived"))  # a run that never built its loader has only the setting
        if r.get("skipped") or r.get("error"):
            out.append([label(r), dataset_text(r), str(c["batch_size"]), workers,
                        *["-"] * (len(HEADER) - 5), str(r.get("skipped") or r.get("error"))])
            continue
        best_base = max((b["samples_per_s"] for b in r.get("baseline", {}).get("runs", [])), default=None)
        out.append([label(r), dataset_text(r), str(c["batch_size"]), workers,
                    _fmt(r["frames_per_s_node"]), _fmt(r["samples_per_s"]), _fmt(r["first_batch_latency_s"], 2),
                    _fmt(r["p95_batch_latency_ms"]), limit_text(r.get("limit_ratio")), _fmt(r.get("nvdec_limit_ratio"), 2),
                    _fmt(r.get("gpu_over_cpu_all_cores"), 2),
                    f"{_fmt(r.get('baseline_ratio'), 2)} (its {_fmt(best_base)} samples/s)", mixing_text(r.get("batch_mixing")),
                    _fmt(r["peak_rss_gb"], 2),
                    str(r.get("device", ""))])
    return out


HEADER = ["run", "dataset", "batch", "workers", "frames/s", "samples/s", "first batch s", "p95 ms",
          "loader ÷ decode alone", "loader ÷ NVDEC alone", "loader ÷ CPU all cores",
          "loader ÷ lerobot-style DataLoader", "batch mixing (vs DataLoader)", "peak RSS GB",
          "device / note"]
# What each figure is, printed beside it (one phrase; benchmarks/README.md has every metric in full)
MEANING = {
    "dataset": "the path or Hub id given; `sample NAME`: bench's own sample",
    "batch": "samples a batch",
    "workers": "the loader's worker threads",
    "frames/s": "camera frames delivered a second (samples x cameras x steps)",
    "samples/s": "samples delivered a second over the measured window",
    "first batch s": "seconds from iter() to the first batch",
    "p95 ms": "95th percentile of the training loop's wait for a batch",
    "loader ÷ decode alone": "frames/s over the decode limit (the same frames decoded with nothing else, warm): "
                             "1 = as fast as decoding alone; a short --duration-s or few cores lowers it",
    "loader ÷ NVDEC alone": "samples/s over NVDEC decoding the same samples alone (GPU runs only)",
    "loader ÷ CPU all cores": "samples/s over the CPU route with a worker per core (--cpu-all-cores only)",
    "loader ÷ lerobot-style DataLoader": "samples/s over a torch DataLoader reading as LeRobotDataset does, its best "
                                         "worker count (its rate in brackets); above 1 = faster",
    "batch mixing (vs DataLoader)": "how random batches are; in brackets a shuffled DataLoader's on the same "
                                    "episodes",
    "peak RSS GB": "peak resident memory of this process and its children",
    "device / note": "where it ran",
}


def mixing_text(m: dict[str, Any] | None) -> str:
    """A run's batch mixing beside a shuffled DataLoader's, in brackets (`tools.mixing_stats`; the words: README's
    "Words used here"): distinct episodes in a batch ÷ batch size, episodes touched per 100 batches, and the recent
    share: a batch's episodes also in the previous pool ÷ batch batches."""
    if not m:
        return "-"
    ours, theirs = m["loader"], m["shuffled_dataloader"]
    return (f"distinct episodes ÷ batch {ours['distinct_frac']:.2f} ({theirs['distinct_frac']:.2f}; 1: each sample "
            f"from another episode), episodes per 100 batches {ours['touched_per_100']:.0f} "
            f"({theirs['touched_per_100']:.0f}), recent share {ours['recent_frac']:.2f} ({theirs['recent_frac']:.2f}; "
            "a batch's episodes also drawn in the previous pool ÷ batch batches: near 1, the pool rotates the same "
            "episodes)")


def limit_text(ratio: float | None) -> str:
    """loader ÷ the same samples decoded alone: at most ~1 (the decode limit); above 1.05 the decode-alone run was
    slower than the loader, which a short window or a colder decoder makes: said so, not read as beating it."""
    if ratio is None:
        return "-"
    return f"{ratio:.2f}" + (" (decode-alone run slower: lengthen --duration-s)" if ratio > 1.05 else "")


def print_table(results: list[dict[str, Any]], title: str = "dali-stream bench", console=None) -> None:
    """One row per run; where that table is wider than the terminal (80 columns, or a log file), one
    metric-per-line table per run instead, so no value is cut to an ellipsis."""
    from rich.console import Console
    from rich.measure import Measurement
    from rich.table import Table

    console = console or Console()
    table = Table(*HEADER, title=title)
    for row in rows(results):
        table.add_row(*row)
    if Measurement.get(console, console.options.update_width(10**6), table).maximum <= console.width:
        console.print(table)
        for name in HEADER[1:]:  # each column's meaning under the table
            console.print(f"{name}: {MEANING[name]}", highlight=False)
        return
    for row in rows(results):
        run = Table(title=f"{title}: {row[0]}")
        run.add_column("metric", no_wrap=True)
        for column in ("value", "what it is"):  # a long path folds, never cut to an ellipsis
            run.add_column(column, overflow="fold")
        for name, value in zip(HEADER[1:], row[1:]):
            run.add_row(name, value, MEANING[name])
        console.print(run)


def require_matplotlib() -> None:
    """An `InstallError` naming the extra that brings matplotlib (the chart's), where it does not import."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        from ..errors import InstallError
        from ..pairing import extra_line

        raise InstallError(f"--png draws with matplotlib, which does not import here ({exc}): add the [bench] extra "
                           f"({extra_line('bench')}), or leave out --png for the table alone") from None


def has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _date(r: dict[str, Any]) -> str:
    """The run's date, from its file's name (bench-YYYYMMDD-HHMMSS-...)."""
    import re

    m = re.search(r"bench-(\d{4})(\d{2})(\d{2})-", Path(str(r.get("_file") or r.get("file") or "")).name)
    return "-".join(m.groups()) if m else time.strftime("%Y-%m-%d")


def plot(results: list[dict[str, Any]], png: str | Path) -> Path:
    """Bars per run (route and mode): the loader's samples/s beside the decode limit's and the lerobot-style
    DataLoader's (its best worker count) on the same samples; titled with the datasets, modes and dates."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in results if not r.get("skipped") and not r.get("error")]
    kinds = [("loader", "#4c72b0"), ("decode limit (same frames decoded alone)", "#8c8c8c"),
             ("lerobot-style DataLoader (best worker count)", "#dd8452")]
    fig, ax = plt.subplots(figsize=(max(6.0, 2.2 * len(done) + 2), 4.2))
    width = 0.27
    for k, (name, colour) in enumerate(kinds):
        values = []
        for r in done:
            base = max((b["samples_per_s"] for b in r.get("baseline", {}).get("runs", [])), default=None)
            limit = r["samples_per_s"] / r["limit_ratio"] if r.get("limit_ratio") else None
            values.append((r["samples_per_s"], limit, base)[k])
        xs = [i + (k - 1) * width for i in range(len(done))]
        bars = ax.bar(xs, [v or 0 for v in values], width, color=colour, label=name)
        ax.bar_label(bars, labels=["not run" if v is None else f"{v:.0f}" for v in values], fontsize=7)
    ticks = [f"{label(r)}\n{r['config'].get('image_dtype', '')} {r['config'].get('memory_format', '')}".replace(" (", "\n(")
             for r in done]
    ax.set_xticks(range(len(done)), ticks, fontsize=8)
    ax.set_ylabel("samples / s (higher is faster)")
    ax.set_xlabel("run: mode / decode (routes), batch dtype and layout")
    datasets = sorted({dataset_text(r) for r in done})
    modes = sorted({r["config"]["mode"] for r in done})
    dates = sorted({_date(r) for r in done})
    devices = sorted({str(r.get("device", "?")) for r in done})
    ax.set_title(f"dali-stream bench: {', '.join(datasets)}; mode {', '.join(modes)}; {', '.join(dates)}\n"
                 f"{'; '.join(devices)}", fontsize=9)
    ax.legend(fontsize=8, loc="upper right")
    ax.margins(y=0.45)
    fig.tight_layout()
    png = Path(png)
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=90)
    plt.close(fig)
    return png


def write(result: dict[str, Any], out_dir: str | Path) -> Path:
    """result -> out_dir/bench-<time>-<mode>-<decode>.json, plus one row appended to out_dir/bench.csv."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cfg = result["config"]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    rank, world = result.get("rank", 0), result.get("world_size", 1)
    path = out / (f"bench-{stamp}-{cfg['mode']}-{cfg['decode']}-b{cfg['batch_size']}-w{cfg.get('num_workers', 'd')}"
                  f"-r{rank}of{world}.json")
    path.write_text(json.dumps(result, indent=2, default=str))
    append_csv(out / "bench.csv", csv_row(result, path.name))
    return path


def csv_row(result: dict[str, Any], name: str) -> dict[str, Any]:
    """A result as one flat bench.csv row: its file name, its settings as config.*, then the metrics."""
    row = {"file": name, **{f"config.{k}": v for k, v in result["config"].items()}}
    from .bench import METRIC_KEYS

    for key in METRIC_KEYS:
        value = result.get(key)
        row[key] = json.dumps(value, default=str) if isinstance(value, (dict, list)) else value
    return row


def append_csv(csv_path: Path, row: dict[str, Any]) -> None:
    """Append `row` to a bench.csv; a file with other columns (runs from before a setting was added) is
    rewritten under the union of the columns, earlier rows' new columns left empty, so no value ever sits
    under another column's name."""
    import csv

    rows: list[dict] = []
    if csv_path.exists():
        with csv_path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            header = list(reader.fieldnames or [])
            if header == list(row):  # the usual case
                with csv_path.open("a", newline="") as out_fh:
                    csv.DictWriter(out_fh, fieldnames=header).writerow(row)
                return
            rows = [{k: v for k, v in r.items() if k is not None} for r in reader]
    columns = list(dict.fromkeys([*row, *(k for r in rows for k in r)]))
    with csv_path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows([*rows, row])
