"""Pieces the benchmark scripts share (each runs as `python benchmarks/NAME.py`, which puts this folder on
`sys.path`)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path


def write_result(out: str | Path, result: dict) -> str:
    """`result` as indented JSON into the file `out` (its folder made if missing); returns the JSON text."""
    text = json.dumps(result, indent=2)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    return text


@contextlib.contextmanager
def earlier_tree(rev: str | None, root: Path):
    """A checkout of commit `rev` of the repository at `root` (`git worktree`, in a temporary folder), removed on
    leaving; None without `rev`. A child runs a tree's `dali_stream` with the tree as its working folder (`-c` and
    `-m` put that folder first on `sys.path`, ahead of PYTHONPATH) or with `python -P` and PYTHONPATH at it."""
    if rev is None:
        yield None
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "before"
        subprocess.run(["git", "worktree", "add", "-q", "--detach", str(tree), rev], cwd=root, check=True)
        try:
            yield tree
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=root, check=False)


def bench_sample(variant: str = "av1-quick") -> str:
    """The folder of `dali-stream bench --sample VARIANT` under this checkout (`.demo/bench-VARIANT`), written first
    where it is missing or was written with other settings."""
    from dali_stream.tools.bench_samples import bench_sample_spec, default_dataset, stale_sample
    from dali_stream.tools.sample_data import write_sample

    path = Path(__file__).resolve().parents[1] / default_dataset(variant)
    spec = bench_sample_spec(variant)
    if stale_sample(path, spec) is not None:
        write_sample(path, spec, overwrite=True)
    return str(path)


def gpu_test_dataset() -> Path:
    """The dataset of tests/gpu/test_gpu.py's `gpu_dataset` fixture (192x160, GOP 16, h264/hevc/av1/vp9 cameras,
    8 episodes of 20-60 frames), written on first use at $GPU_TEST_DATA (default .demo/four-codecs-192x160)."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    path = Path(os.environ.get("GPU_TEST_DATA", ".demo/four-codecs-192x160"))
    if not (path / "meta/info.json").exists():
        write_sample(path, SampleSpec(episodes=8, min_length=20, max_length=60, height=160, width=192, gop=16,
                                      episodes_per_file=3, seed=3,
                                      cameras=parse_cameras("front:h264,side:hevc,wrist:av1,top:vp9")))
    return path


# ---- the harness: configurations side by side ------------------------------------------------------------------
# A 2-core VM's rates move ±30 % from one minute to the next: every comparison here runs each configuration once a
# round, the rounds back to back, each run a process of its own (its peak RSS its own), and reports the median and
# range over the rounds, ratios taken within a round.

def spread(values) -> dict:
    """The median and range of `values` (one per round)."""
    import statistics

    values = list(values)
    return {"median": statistics.median(values), "range": [min(values), max(values)]}


def within_rounds(over: list[dict], under: list[dict], key: str) -> dict:
    """`spread` of over[r][key] / under[r][key], round by round (the runs of one round ran side by side)."""
    return spread(a[key] / b[key] for a, b in zip(over, under))


def alternate(configs, rounds: int, run, say=print) -> dict:
    """`run(config)` for each of `configs` in turn, `rounds` times: configuration -> its results, one per round."""
    got: dict = {c: [] for c in configs}
    for r in range(rounds):
        for c in configs:
            got[c].append(run(c))
            say(f"round {r + 1}/{rounds} {c}: {json.dumps(got[c][-1], default=str)[:200]}")
    return got


def ms_per(work, items: int = 1, repeat: int = 1, warm: bool = False) -> dict:
    """`work()` timed `repeat` times in a row (after one untimed call where `warm`): `{"ms": milliseconds per item}`,
    what an in-process configuration's `run` hands `alternate`."""
    if warm:
        work()
    t0 = time.perf_counter()
    for _ in range(repeat):
        work()
    return {"ms": (time.perf_counter() - t0) / (repeat * items) * 1e3}


def child(code: str, *args: str, cwd: str | Path | None = None, env: dict | None = None,
          python: str | None = None) -> dict:
    """Python `code` run in a process of its own with `args` as its sys.argv[1:]: the JSON its last line of
    output prints, with the process's peak RSS in MB (`peak_rss_mb`). `python`: another interpreter (default
    this one)."""
    import subprocess
    import sys

    wrapped = (f"{code}\nimport resource as _r, json as _j\n"
               "print(_j.dumps({**RESULT, 'peak_rss_mb': _r.getrusage(_r.RUSAGE_SELF).ru_maxrss / 1024}))")
    done = subprocess.run([python or sys.executable, "-c", wrapped, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"benchmark child failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])
