"""Which versions load together (dali_stream.pairing), the constraint sets, and diagnose's install verdict on
software reports of nodes this machine is not."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from dali_stream.pairing import (
    constraint_set,
    cuda_driver_problem,
    dali_flavour_problem,
    torchcodec_problem,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("driver,expected", [(None, "cpu"), ("470.82.01", "cpu"), ("535.183.01", "cu12"),
                                             ("575.57.08", "cu12"), ("580.159.04", "cu13"), ("595.1", "cu13")])
def test_constraint_set_follows_the_driver(driver, expected):
    assert constraint_set(driver) == expected


def test_constraint_set_as_make_install_runs_it():
    """`make install` calls the module as a script, before anything is installed (standard library only)."""
    out = subprocess.run([sys.executable, "-S", str(REPO / "dali_stream/pairing.py"), "constraint-set"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() in ("cpu", "cu12", "cu13"), out.stderr


@pytest.mark.parametrize("torchcodec,torch,cuda,problem", [
    ("0.13.0", "2.13.0+cpu", None, None),
    ("0.13.0", "2.13.0", "13.0", None),
    ("0.17.0", "2.13.0+cpu", None, "links CUDA 13"),
    ("0.17.0", "2.14.1", "13.0", None),
    ("0.12.0", "2.10.0", None, "needs torch >= 2.11"),
    ("0.11.0", "2.11.0", None, None),
    ("0.11.0", "2.13.0", None, "pairs with torch 2.11; torch is 2.13.0"),
    ("0.8.1", "2.9.0", None, None),
    ("0.7.0", "2.8.0", None, "older than 0.8"),
])
def test_torch_and_torchcodec_pairs(torchcodec, torch, cuda, problem):
    found = torchcodec_problem(torchcodec, torch, cuda)
    assert (found is None) if problem is None else (problem in found), found


def test_cuda_builds_against_the_driver():
    assert "needs NVIDIA driver >= 580; this node's driver is 550.54.15" in \
        cuda_driver_problem("torch 2.13.0", "13.0", "550.54.15")
    assert cuda_driver_problem("torch 2.13.0", "12.8", "550.54.15") is None
    assert cuda_driver_problem("torch 2.13.0+cpu", None, "550.54.15") is None


def test_dali_flavours():
    assert dali_flavour_problem([], None) is None  # the CPU install: DALI is optional without a GPU
    assert "no NVIDIA DALI is installed, so this node's GPUs are not used" in dali_flavour_problem([], "580.1")
    both = dali_flavour_problem(["nvidia-dali-cuda120", "nvidia-dali-cuda130"], None)
    assert "installed together" in both and "pip uninstall -y nvidia-dali-cuda120 nvidia-dali-cuda130" in both
    assert "driver >= 580" in dali_flavour_problem(["nvidia-dali-cuda130"], "550.54.15")
    assert dali_flavour_problem(["nvidia-dali-cuda120"], "580.1") is None
    assert dali_flavour_problem(["nvidia-dali-cuda120"], None) is None


def _software(torch="2.13.0", cuda="13.0", torchcodec="0.13.0", dali=("nvidia-dali-cuda120",)):
    return {"torch": {"ok": True, "version": torch, "cuda_build": cuda},
            "torchcodec": {"ok": torchcodec is not None, "version": torchcodec},
            "nvidia.dali": {"ok": True, "packages": list(dali)},
            "distributions": {"ok": True, "nvidia_dali": list(dali), "torchcodec": torchcodec}}


@pytest.mark.parametrize("driver,software,broken,idle,untested,fix", [
    ("550.54.15", _software(), ["torch 2.13.0 is built for CUDA 13.0, which needs NVIDIA driver >= 580"], [], [],
     "constraints/cu12.txt"),
    ("550.54.15", _software(cuda="12.8", dali=("nvidia-dali-cuda130",)), [], ["needs NVIDIA driver >= 580"], [],
     "constraints/cu12.txt"),
    ("580.159.04", _software(dali=("nvidia-dali-cuda120", "nvidia-dali-cuda130")), ["installed together"], [], [],
     "constraints/cu13.txt"),
    (None, _software(torch="2.13.0+cpu", cuda=None, torchcodec="0.17.0"), ["links CUDA 13"], [],
     ["torchcodec 0.17.0 (tested: 0.13.0)"], "constraints/cpu.txt"),
    # what plain `pip install '.[cu12]'` brought on a CPU-only machine: a CUDA 13 torch, 4 GB it cannot use
    (None, _software(torch="2.14.1+cu130", cuda="13.0", torchcodec="0.13.0"), [],
     ["a CUDA 13.0 build, and this node has no NVIDIA driver"], ["torch 2.14.1+cu130 (tested: 2.13.0)"],
     "--extra-index-url https://download.pytorch.org/whl/cpu -c constraints/cpu.txt '.[cpu]'"),
    # ... unless its torchcodec (0.17, CUDA 13) needs it: the newest set's torch is the one next to 0.17
    (None, _software(torch="2.14.1+cu130", cuda="13.0", torchcodec="0.17.0+cu130"), [], [],
     ["torch 2.14.1+cu130 (tested: 2.15.0)"], "constraints/cpu.txt"),
    ("580.159.04", _software(torch="2.14.1"), [], [], ["torch 2.14.1 (tested: 2.13.0)"], "constraints/cu13.txt"),
    # the newest tested set (lerobot's next release), on a GPU node and on a CPU node: tested, nothing to fix
    ("580.159.04", _software(torch="2.15.0", torchcodec="0.17.0", dali=("nvidia-dali-cuda130",)), [], [], [], None),
    (None, _software(torch="2.15.0", torchcodec="0.17.0", dali=("nvidia-dali-cuda130",)), [], [], [], None),
    # the CPU install: no DALI at all on a node without a GPU is no problem
    (None, _software(torch="2.13.0+cpu", cuda=None, dali=()), [], [], [], None),
    ("580.159.04", _software(), [], [], [], None),
    (None, _software(torch="2.13.0+cpu", cuda=None), [], [], [], None),
])
def test_diagnose_names_the_set_that_fixes_a_mismatch(driver, software, broken, idle, untested, fix):
    from dali_stream.tools.diagnose import install_verdict

    node = {"gpus": [{"driver": driver}] if driver else []}
    verdict = install_verdict(node, software)
    assert len(verdict["broken"]) == len(broken) and all(b in got for b, got in zip(broken, verdict["broken"])), \
        verdict
    assert len(verdict["idle"]) == len(idle) and all(i in got for i, got in zip(idle, verdict["idle"])), verdict
    assert verdict["untested"] == untested
    assert verdict.get("fix") is None if fix is None else fix in verdict["fix"]


def test_the_tested_versions_are_the_constraint_sets():
    """pairing.TESTED_SETS (what diagnose calls tested) are what the constraint sets pin: cpu, cu12 and cu13 the
    suite's, newest.txt the newest releases'."""
    from dali_stream.pairing import TESTED_SETS

    for name in ("cpu", "cu12", "cu13", "newest"):
        pins = dict(ln.split("==") for ln in (REPO / f"constraints/{name}.txt").read_text().splitlines()
                    if "==" in ln and not ln.startswith("#"))
        dali = next(v for k, v in pins.items() if k.startswith("nvidia-dali"))
        tested = TESTED_SETS["newest" if name == "newest" else "cpu, cu12, cu13"]
        assert {"torch": pins["torch"], "torchcodec": pins["torchcodec"], "nvidia-dali": dali} == tested, name


def test_the_readme_gives_the_install_line_of_every_set():
    """One line per case (no GPU, driver 525-579, driver >= 580), the same lines diagnose names as the fix, each
    with the extra and constraint set `make install` uses for that driver."""
    from dali_stream.pairing import install_line

    readme = (REPO / "README.md").read_text()
    for name in ("cpu", "cu12", "cu13"):
        line = install_line(name)
        assert line in readme, line
        assert f"-c constraints/{name}.txt" in line
    makefile = (REPO / "Makefile").read_text()
    assert "https://download.pytorch.org/whl/cu128" in makefile and "https://download.pytorch.org/whl/cu128" in \
        install_line("cu12")


def test_constraint_sets_pin_the_same_shared_versions():
    """cpu, cu12 and cu13 differ only in torch's build and DALI's flavour; setup.cfg's floors are floors.txt."""
    sets = {}
    for name in ("cpu", "cu12", "cu13"):
        lines = [ln.strip() for ln in (REPO / f"constraints/{name}.txt").read_text().splitlines()
                 if ln.strip() and not ln.startswith("#")]
        assert lines[0] == "-c common.txt"
        sets[name] = dict(ln.split("==") for ln in lines[1:])
    assert sets["cpu"] == sets["cu12"] and sets["cu13"]["nvidia-dali-cuda130"] == sets["cpu"]["nvidia-dali-cuda120"]
    floors = dict(ln.split("#")[0].strip().split("==") for ln in
                  (REPO / "constraints/floors.txt").read_text().splitlines() if "==" in ln and not ln.startswith("#"))
    declared = {}
    for line in (REPO / "setup.cfg").read_text().splitlines():
        m = re.fullmatch(r"\s*(?:cu1\d = )?([A-Za-z0-9_.-]+)(?:\[\w+\])?>=([\d.]+)", line)
        if m:
            declared[m.group(1).lower()] = m.group(2)
    for name, version in floors.items():
        if name not in ("torch", "torchcodec"):  # see floors.txt: only CUDA wheels of their floors exist here
            floor, pinned = Version(declared[name.lower()]), Version(version)
            # the floor itself, or its first patch release with wheels for this Python
            assert floor <= pinned and pinned.release[:2] == (floor.release + (0,))[:2], (name, version, floor)


def test_two_dali_flavours_stop_the_loader_with_the_fix(small_dataset, tmp_path):
    """A second flavour's dist-info on the path (as `pip install dali-stream[cu13]` over [cu12] leaves it)."""
    from dali_stream.pairing import installed_dali

    other = "nvidia-dali-cuda120" if installed_dali() == ["nvidia-dali-cuda130"] else "nvidia-dali-cuda130"
    info = tmp_path / "site" / f"{other.replace('-', '_')}-2.4.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {other}\nVersion: 2.4.0\n")
    code = ("from dali_stream import StreamLoader, InstallError\n"
            f"try:\n    StreamLoader({str(small_dataset)!r})\nexcept InstallError as exc:\n    print(exc)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**__import__("os").environ, "PYTHONPATH": str(tmp_path / "site")})
    assert "nvidia-dali-cuda120 and nvidia-dali-cuda130 are installed together" in out.stdout, out.stderr


def test_no_dali_at_all_is_the_cpu_install():
    """No `nvidia` package on the path (the README's CPU line installs none): DALI is absent, which is no error
    (`check_dali` passes; the loader runs its host routes), and no raw ModuleNotFoundError for the parent package."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    code = ("import sys\nsys.path = [p for p in sys.path if 'site-packages' not in p and 'dist-packages' not in p]\n"
            f"sys.path.insert(0, {str(repo)!r})\n"
            "from dali_stream.pairing import check_dali, dali_missing, dali_present\n"
            "check_dali()\nprint('present:', dali_present())\nprint(dali_missing('resize='))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "present: False" in out.stdout and "resize= runs on NVIDIA DALI" in out.stdout
    assert "'.[cpu,dali]'" in out.stdout
