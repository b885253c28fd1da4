"""README.md as a new user follows it: its own install line in a fresh virtual environment (not the development
one), then its quickstart, train and mixture blocks as written, in a folder of their own.

The environment is made from nothing but the README's line: `pip` resolves every package itself (the machine's
pip configuration and cache apply, as they would for a user). CI reaches no PyTorch index: pip is told not to
retry one it cannot reach (`PIP_RETRIES=0`), so the line's `--extra-index-url` costs a failed lookup, not minutes,
and not to compile every module of torch to bytecode (`PIP_NO_COMPILE=1`: Python compiles what it imports).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import venv
from pathlib import Path

import pytest

from tests.repo.test_docs import FRESH_SECTIONS, blocks

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"


def section(name: str) -> str:
    text = README.read_text()
    return text.split(f"## {name}", 1)[1].split("\n## ", 1)[0]


def install_line() -> str:
    """The README's install line: the first command of the Install section's first bash block."""
    (_, lang, code, _), *_ = blocks(section("Install"))
    assert lang == "bash"
    return next(line for line in code.splitlines() if line.strip() and not line.startswith("#"))


def test_the_install_line_is_the_tested_cpu_set():
    from dali_stream.pairing import install_line as tested

    assert install_line() == tested("cpu")


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """A virtual environment holding only what the README's install line installed."""
    env_dir = tmp_path_factory.mktemp("fresh") / "venv"
    venv.create(env_dir, with_pip=True)
    bin_dir = env_dir / "bin"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME")}
    env.update(PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}", VIRTUAL_ENV=str(env_dir), PIP_RETRIES="0",
               PIP_NO_COMPILE="1", PIP_DISABLE_PIP_VERSION_CHECK="1", OMP_NUM_THREADS="1")
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", install_line()], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"{install_line()}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return bin_dir, env


def run_blocks(text: str, cwd: Path, bin_dir: Path, env: dict) -> None:
    for n, lang, code, why in blocks(text):
        if lang not in ("python", "bash") or why is not None:
            continue
        cmd = [str(bin_dir / "python"), "-c", code] if lang == "python" else ["bash", "-euo", "pipefail", "-c", code]
        proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, f"README block ({lang}) failed in the fresh environment:\n{code}\n" \
                                     f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


@pytest.mark.timeout(2400)  # the fixture installs torch and the rest into a new environment
def test_the_readmes_blocks_run_after_its_install_line(fresh, tmp_path):
    """Quickstart (make-sample, the first batch), Training (train, then resume) and Mixtures (the demo members,
    then the snippet), in that order, with nothing from the development environment."""
    bin_dir, env = fresh
    for name in FRESH_SECTIONS:  # tests/repo/test_docs.py runs the README's other blocks
        run_blocks(section(name), tmp_path, bin_dir, env)
    assert (tmp_path / ".demo" / "ckpt").is_dir() and (tmp_path / ".demo" / "mixture").is_dir()
    where = subprocess.run([str(bin_dir / "python"), "-c", "import dali_stream, torch, torchcodec; "
                            "print(dali_stream.__file__, torch.__version__, torchcodec.__version__)"],
                           cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert where.returncode == 0, where.stderr
    path, torch_version, codec_version = where.stdout.split()
    assert str(REPO) not in path, "the fresh environment must hold its own install, not the checkout"
    assert (torch_version.split("+")[0], codec_version.split("+")[0]) == ("2.13.0", "0.13.0")
    diagnose = subprocess.run([str(bin_dir / "dali-stream"), "diagnose", "--json"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
    assert diagnose.returncode == 0, diagnose.stdout[-2000:] + diagnose.stderr[-2000:]
    assert json.loads(diagnose.stdout)["software"]["nvidia.dali"]["installed"] is False


def test_the_cpu_line_brings_no_nvidia_library_and_runs_without_dali(fresh, tmp_path):
    """The CPU install: no NVIDIA package, at most 1.4 GB; the loader decodes every camera (VP9 too) with torchcodec
    and lays batches out without a DALI graph; what only DALI does is an InstallError naming the extra."""
    bin_dir, env = fresh
    venv_dir = bin_dir.parent
    site = next(venv_dir.glob("lib/python3*/site-packages"))
    nvidia = sorted(p.name for p in site.iterdir() if p.name.lower().startswith(("nvidia", "cuda")))
    assert not nvidia, f"NVIDIA packages in the CPU install: {nvidia}"
    size = sum(f.stat().st_size for f in venv_dir.rglob("*") if f.is_file() and not f.is_symlink())
    assert size <= 1.4e9, f"the CPU install takes {size / 1e9:.2f} GB"
    subprocess.run([str(bin_dir / "dali-stream"), "make-sample", ".demo/small", "--episodes", "3", "--min-length", "8",
                    "--max-length", "12"], cwd=tmp_path, env=env, check=True, capture_output=True, timeout=600)
    code = ("from dali_stream import StreamLoader, InstallError\n"
            "loader = StreamLoader('.demo/small', batch_size=4, device='cpu')\n"
            "print(sorted(set(loader.routes.values())), loader.host_batches, len(next(iter(loader))['task']))\n"
            "try:\n    StreamLoader('.demo/small', batch_size=4, device='cpu', resize=(48, 64))\n"
            "except InstallError as exc:\n    print('InstallError:', exc)\n")
    proc = subprocess.run([str(bin_dir / "python"), "-c", code], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "['torchcodec'] True 4" in proc.stdout, proc.stdout
    assert "InstallError: resize= runs on NVIDIA DALI" in proc.stdout and "'.[cpu,dali]'" in proc.stdout


def test_the_blocks_named_here_are_the_readmes():
    """The sections the fresh-environment test runs hold the commands a new user meets first."""
    quick, train, mix = (section(n) for n in ("Quickstart", "Training lerobot's policies", "Mixtures"))
    assert "dali-stream make-sample" in quick and "StreamLoader(" in quick
    assert re.search(r"^dali-stream train \.demo/sample .*--checkpoint-dir \.demo/ckpt$", train, flags=re.M)
    assert "dali-stream demo .demo/mixture --mixture" in mix and "Mixture([" in mix
    assert shlex.split(install_line())[:2] == ["pip", "install"]
