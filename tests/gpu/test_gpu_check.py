"""`make gpu-check`'s own steps, on this CPU machine: the script refuses a node without a GPU, the
preflight stops at the first thing that cannot work with its reason, and the summary reads a real JUnit file and
real bench results."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
H100 = ROOT / "benchmarks/results/NVIDIA-H100-80GB-HBM3"


def _run(args, **kw):
    env = {**os.environ, **kw.pop("env", {})}
    return subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, **kw)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="this node has nvidia-smi")
def test_gpu_check_refuses_a_node_without_a_gpu():
    out = _run(["bash", "benchmarks/gpu_check.sh"], env={"PY": sys.executable})
    assert out.returncode == 2 and "no NVIDIA GPU with a driver here" in out.stderr


def test_preflight_stops_at_a_failed_import_with_its_text(tmp_path):
    broken = tmp_path / "shadow" / "torchcodec"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('libavutil.so.59: cannot open shared object file')\n")
    out = _run([sys.executable, "benchmarks/gpu_preflight.py", str(tmp_path)],
               env={"PYTHONPATH": f"{broken.parent}{os.pathsep}{ROOT}"})
    assert out.returncode == 4, out.stderr
    assert "import torchcodec.decoders: ImportError: libavutil.so.59" in out.stderr
    assert "stage the wheels" in out.stderr


def test_preflight_refuses_a_cpu_only_torch(tmp_path):
    import torch

    if torch.version.cuda is not None:
        pytest.skip(f"torch {torch.__version__} is a CUDA build here")
    out = _run([sys.executable, "benchmarks/gpu_preflight.py", str(tmp_path)], env={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 4 and "is a CPU-only build: every camera would decode on CPU" in out.stderr


def test_summary_counts_outcomes_frame_checks_and_runs(tmp_path):
    """A real pytest run's JUnit file (a pass, a failure, an xfail, a skip, frame checks among them) and the H100's
    real bench result: the summary table says each."""
    tests = tmp_path / "test_fake_gpu.py"
    tests.write_text(
        "import pytest\n"
        "def test_nvdec_every_frame_a():\n    pass\n"
        "def test_nvdec_every_frame_b():\n    assert False\n"
        "@pytest.mark.xfail(reason='known')\ndef test_two_loaders():\n    assert False\n"
        "@pytest.mark.skip(reason='needs 2 GPUs')\ndef test_second_gpu():\n    pass\n")
    out = tmp_path / "out"
    (out / "nvdec-pays").mkdir(parents=True)
    _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests), f"--junitxml={out / 'gpu-tests.xml'}"])
    for path in H100.glob("bench-*-single-gpu-*.json"):
        shutil.copy(path, out / "nvdec-pays" / path.name)
    result = _run([sys.executable, "benchmarks/gpu_summary.py", str(out)])
    assert result.returncode == 0, result.stderr
    text = (out / "summary.md").read_text()
    for row in ("| passed | 1 |", "| failed | 1 |", "| xfailed | 1 |", "| skipped | 1 |",
                "| `test_nvdec_every_frame_a` | passed |", "| `test_nvdec_every_frame_b` | failed |",
                "| single b16 join_streams=- | 60.18 |"):
        assert row in text, (row, text)


def test_measure_table_names_each_engine(tmp_path):
    """The first minutes' table: the H100's real result under DALI's engine, and bench results of the
    open-decoder engine and the CPU route written by a real bench run here (decode='cpu-open' stands for its rows)."""
    out = tmp_path / "out"
    (out / "measure").mkdir(parents=True)
    for path in H100.glob("bench-*-single-gpu-*.json"):
        shutil.copy(path, out / "measure" / path.name)
    sample = tmp_path / "sample"
    made = _run([sys.executable, "-m", "dali_stream", "make-sample", str(sample), "--episodes", "3", "--min-length",
                 "20", "--max-length", "30", "--cameras", "front:h264"])
    assert made.returncode == 0, made.stderr
    for extra in (["--decode", "cpu", "--num-workers", "2"], ["--decode", "cpu-open", "--decode-threads", "3"]):
        ran = _run([sys.executable, "-m", "dali_stream", "bench", str(sample), "--batch-size", "4", "--duration-s",
                    "0.3", "--warmup-batches", "1", "--no-baseline", "--no-limit", "--out-dir", str(out / "measure"),
                    *extra])
        assert ran.returncode == 0, ran.stdout + ran.stderr
    result = _run([sys.executable, "benchmarks/gpu_summary.py", str(out), "--measure-only"])
    assert result.returncode == 0, result.stderr
    text = (out / "measure-summary.md").read_text()
    assert "| CPU route (torchcodec), 2 workers | sample |" in text, text
    assert "| open decoders (cpu-open), 3 threads | sample |" in text, text
    assert "| DALI (groups not recorded) |" in text, text


def test_dali_sample_profile_runs_on_the_cpu_decoder(tmp_path):
    """gpu-check's profile of DALI's per-sample cost (benchmarks/dali_sample_profile.py), on DALI's CPU decoder and
    the cpu-open engine (DEV=cpu): every part measured. The fit's per-picture cost is a number, not asserted
    positive: it is a slope of timings, and a CI run under load once fitted -0.14 ms (a speed is never asserted)."""
    import json
    import math

    sample = tmp_path / "vp9"
    made = _run([sys.executable, "-m", "dali_stream", "make-sample", str(sample), "--episodes", "4", "--min-length",
                 "30", "--max-length", "40", "--cameras", "top:vp9", "--gop", "30"])
    assert made.returncode == 0, made.stderr
    out = tmp_path / "profile.json"
    ran = _run([sys.executable, "benchmarks/dali_sample_profile.py", str(sample), "--json", str(out)],
               env={"DEV": "cpu", "PYTHONPATH": str(ROOT)})
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(out.read_text())
    assert result["camera"] == "observation.images.top" and result["device"] == "cpu"
    assert math.isfinite(result["ms_per_picture"]) and result["graph_ms_per_batch"]["wall_ms"] > 0
    assert set(result["threads"]) == {"1", "2", "4", "7"} and isinstance(result["open_engine_ms_per_picture"], float)
    assert "fixed" in ran.stdout and "ms/picture" in ran.stdout
