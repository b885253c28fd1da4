"""Bad input to every `dali-stream` command, as a user types it: one line, `dali-stream COMMAND: error: ...`, naming
the value and the fix, exit status 2, and no work done before it (no sample written, no model built). A package an
extra brings that is missing (matplotlib for `--png`, aiohttp for https://) is named with the install command, and
that command, run as printed in the checkout, installs the package with the extra."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from tests.support.console import dali_stream

REPO = Path(__file__).resolve().parents[2]
# A checkout's install hint: `pip install '.[extra]'`, or any other pip install line naming an extra
HINT = re.compile(r"pip install [^;`()]*?'[^']*\[[\w,]+\]'")


def refused(proc: subprocess.CompletedProcess, command: str, *words: str) -> str:
    """The one error line `proc` printed for `command`, after checking it is only that and exit status 2."""
    said = proc.stderr.strip()
    assert proc.returncode == 2 and len(said.splitlines()) == 1, (proc.returncode, proc.stdout, proc.stderr)
    assert said.startswith(f"dali-stream {command}: error: "), said
    for word in words:
        assert word in said, (word, said)
    return said


def without(module: str, *args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """`dali-stream ARGS...` in a child process where `module` does not import (as on an install without the extra
    that brings it): `sys.modules[module] = None` makes its import raise ImportError; nothing else changes."""
    code = (f"import sys\nsys.modules[{module!r}] = None\nfrom dali_stream.tools.cli import main\n"
            "sys.exit(main())")
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, timeout=300,
                          cwd=cwd, env={**os.environ, "COLUMNS": "200"})


def test_demo_refuses_a_bad_count_before_it_writes_the_sample(tmp_path):
    refused(dali_stream("demo", "new", "--batches", 0, cwd=tmp_path), "demo", "--batches must be at least 1",
            "Found: 0")
    refused(dali_stream("demo", "new", "--batch-size", -1, cwd=tmp_path), "demo", "--batch-size", "Found: -1")
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("args, words", [
    (("--batch-size", "-1"), ("--batch-size must be a positive integer", "Found: -1")),
    (("--log-every", "0"), ("--log-every must be at least 1", "Found: 0")),
    (("--steps", "-1"), ("--steps must be at least 1",)),
    (("--resume-from", "gone"), ("FileNotFoundError", "--resume-from gone", "--checkpoint-dir of an earlier run")),
])
def test_train_refuses_bad_arguments_before_any_work(tmp_path, args, words):
    """Checked before the dataset is opened (there is none here) or a model is built."""
    refused(dali_stream("train", tmp_path / "no-dataset", *args, cwd=tmp_path), "train", *words)


@pytest.mark.parametrize("command", ["train", "bench", "inspect", "transcode", "verify"])
def test_a_missing_dataset_is_one_line_before_any_work(command, tmp_path):
    """Said before bench prints its plan, or anything else is printed (rich ends even a progress bar never shown
    with a blank line where stderr is no terminal: verify starts its bar at its first report)."""
    extra = [tmp_path / "out"] if command == "transcode" else []
    refused(dali_stream(command, tmp_path / "nowhere", *extra, cwd=tmp_path), command, "DatasetNotFoundError",
            "nowhere", "dali-stream make-sample")


def test_bench_refuses_bad_flags_before_it_writes_its_sample(tmp_path):
    refused(dali_stream("bench", "--batch-size", 0, cwd=tmp_path), "bench", "--batch-size", "Found: 0")
    refused(dali_stream("bench", "--baseline-workers", "x", cwd=tmp_path), "bench", "--baseline-workers", "'x'")
    assert not (tmp_path / ".demo").exists()


def test_verify_against_the_dataset_itself(small_dataset, tmp_path):
    """Every file would match: refused, however the same folder is spelled."""
    refused(dali_stream("verify", small_dataset, "--against", f"{small_dataset}/"), "verify", "itself",
            "pass another copy")


def test_inspect_and_verify_refuse_negative_numbers(tmp_path):
    refused(dali_stream("inspect", tmp_path, "--nodes", -1), "inspect", "--nodes must be at least 1")
    refused(dali_stream("verify", tmp_path, "--tolerance-s", -1), "verify", "--tolerance-s must be a number >= 0")


def test_bench_summarize_of_a_missing_path(tmp_path):
    refused(dali_stream("bench-summarize", tmp_path / "nowhere"), "bench-summarize", "nowhere", "bench-*.json",
            "--out-dir")


def png_refusal(tmp_path: Path) -> str:
    """`bench-summarize --png` on an install without matplotlib: the error line."""
    results = REPO / "benchmarks" / "results" / "cpu-2core-480p" / "av1"
    proc = without("matplotlib", "bench-summarize", results, "--png", tmp_path / "chart.png")
    said = refused(proc, "bench-summarize", "InstallError", "matplotlib", "[bench] extra", "leave out --png")
    assert proc.stdout == "" and not (tmp_path / "chart.png").exists()  # refused before the table
    return said


def https_refusal() -> str:
    """An https:// dataset on an install without aiohttp: the error line (refused when the URL is opened, before any
    request: no server needed)."""
    return refused(without("aiohttp", "inspect", "https://127.0.0.1:9/dataset"), "inspect", "InstallError",
                   "https:// URLs need the [remote] extra")


def test_bench_summarize_png_without_matplotlib_names_the_bench_extra(tmp_path):
    assert "pip install '.[bench]' in the dali_stream checkout" in png_refusal(tmp_path)


def test_an_https_dataset_without_aiohttp_names_the_remote_extra():
    assert "pip install '.[remote]' in the dali_stream checkout" in https_refusal()


@pytest.mark.timeout(900)
def test_the_printed_install_hints_run_in_a_checkout(tmp_path):
    """Each hint, run as printed in the checkout with a fresh environment's pip (a dry run without dependencies: no
    download), installs this package with the extra it names, as pip's own report says."""
    from dali_stream.tools.diagnose import probe_software

    hints = {"bench": png_refusal(tmp_path), "remote": https_refusal()}
    nvdec = probe_software()["PyNvVideoCodec"].get("note") or ""
    if "not installed" in nvdec:  # diagnose's line where PyNvVideoCodec is absent (optional)
        hints["nvdec"] = nvdec
    venv.create(tmp_path / "venv", with_pip=True)
    bin_dir = tmp_path / "venv" / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(tmp_path / "venv"),
               PIP_RETRIES="0", PIP_DISABLE_PIP_VERSION_CHECK="1")
    for extra, said in hints.items():
        found = HINT.search(said)
        assert found, f"no install command in: {said}"
        report = tmp_path / f"{extra}.json"
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", f"{found.group()} --dry-run --no-deps --quiet "
                               f"--report {report}"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, f"{found.group()}:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        (install,) = json.loads(report.read_text())["install"]
        assert install["metadata"]["name"] == "dali-stream" and install["requested_extras"] == [extra], install
        assert extra in install["metadata"]["provides_extra"], install["metadata"]


@pytest.mark.parametrize("command", ["inspect", "verify", "diagnose", "bench", "demo"])
def test_an_unknown_flag_is_said_by_its_command(command, tmp_path):
    """`dali-stream COMMAND DATASET --bogus`: the command's own usage and error, not the top level's (which lists the
    commands and names none)."""
    proc = dali_stream(command, str(tmp_path), "--bogus")
    assert proc.returncode == 2, proc.stderr
    assert f"usage: dali-stream {command}" in proc.stderr, proc.stderr
    assert f"dali-stream {command}: error: unrecognized arguments: --bogus" in proc.stderr, proc.stderr
