"""Which package versions load together on a node: torch ↔ torchcodec, CUDA builds ↔ the NVIDIA driver, and
the DALI flavour. Standard library only, and runnable as a script before anything is installed:

    python3 dali_stream/pairing.py constraint-set    # cpu | cu12 | cu13, from `nvidia-smi`'s driver version

`make install` installs the package with `constraints/<set>.txt` (exact versions tested together), and
`dali-stream diagnose` names the set that fixes a mismatch it finds.

Facts (2026-11):
- torchcodec declares no torch requirement. Its README's table: 0.8 and 0.9 need torch 2.9, 0.10 needs
  2.10, 0.11 needs 2.11; from 0.12 on it builds against torch's stable ABI (torch >= 2.11). PyPI's
  torchcodec >= 0.14 wheels link CUDA 13 (`libnvrtc.so.13`) and do not import next to a CPU torch.
- A CUDA 13 build (torch from PyPI since 2.13, nvidia-dali-cuda130) needs driver >= 580; a CUDA 12 build
  (torch from download.pytorch.org/whl/cu12x, nvidia-dali-cuda120) needs driver >= 525.
- nvidia-dali-cuda120 and -cuda130 install into the same `nvidia/dali` folder: exactly one must be present.
"""

from __future__ import annotations

import re
import subprocess
import sys

DALI_FLAVOURS = {"nvidia-dali-cuda120": ("cu12", 525), "nvidia-dali-cuda130": ("cu13", 580)}
CUDA_MIN_DRIVER = {12: 525, 13: 580}
# torchcodec (major, minor) -> (lowest torch (major, minor), highest or None)
TORCHCODEC_TORCH = {(0, 8): ((2, 9), (2, 9)), (0, 9): ((2, 9), (2, 9)), (0, 10): ((2, 10), (2, 10)),
                    (0, 11): ((2, 11), (2, 11))}
STABLE_ABI_FROM = (0, 12)  # torchcodec >= 0.12: any torch >= 2.11
# The sets of versions tested together, each pinned by constraint files (tests/tools/test_pairing.py keeps them equal):
# constraints/{cpu,cu12,cu13}.txt, the set CI runs the suite on, and constraints/newest.txt (the newest releases, as
# lerobot's next release pins them), which CI runs a smoke subset on. `dali-stream diagnose` fails where the
# installed versions are none of them.
TESTED_SETS = {
    "cpu, cu12, cu13": {"torch": "2.13.0", "torchcodec": "0.13.0", "nvidia-dali": "2.4.0"},
    "newest": {"torch": "2.15.0", "torchcodec": "0.17.0", "nvidia-dali": "2.4.0"},
}
TESTED = TESTED_SETS["cpu, cu12, cu13"]
# The README's install line for each set, run in a checkout (tests/repo/test_readme_install.py runs the cpu line in a
# fresh environment; make install uses the same constraint set and index).
TORCH_INDEX = {"cpu": "https://download.pytorch.org/whl/cpu", "cu12": "https://download.pytorch.org/whl/cu128",
               "cu13": None}
WHEN = {"cpu": "no NVIDIA GPU (or a driver older than 525)", "cu12": "NVIDIA driver 525 to 579",
        "cu13": "NVIDIA driver 580 or newer"}


def install_line(chosen: str) -> str:
    """The pip command that installs the tested set `chosen` (cpu, cu12 or cu13) from a checkout."""
    index = TORCH_INDEX[chosen]
    return (f"pip install {f'--extra-index-url {index} ' if index else ''}-c constraints/{chosen}.txt "
            f"'.[{chosen}]'")  # each set has the extra of its name


def extra_line(extras: str) -> str:
    """How to add the extras `extras` ("nvdec", "cpu,remote") to an install: dali-stream is installed from a
    checkout of its repository (README's install lines), so the command runs there."""
    return f"pip install '.[{extras}]' in the dali_stream checkout"


def minor_of(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a version string ("0.11.1+cpu": (0, 11)); None where it does not start with them."""
    m = re.match(r"(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def driver_major(driver: str | None) -> int | None:
    m = re.match(r"(\d+)", driver or "")
    return int(m.group(1)) if m else None


def constraint_set(driver: str | None) -> str:
    """The constraint set for a node whose NVIDIA driver is `driver` (None: no GPU)."""
    major = driver_major(driver)
    if major is None or major < CUDA_MIN_DRIVER[12]:
        return "cpu"
    return "cu13" if major >= CUDA_MIN_DRIVER[13] else "cu12"


def torchcodec_problem(torchcodec: str | None, torch: str | None, torch_cuda: str | None = None) -> str | None:
    """Why this torchcodec does not load next to this torch; None when the pair is known to work."""
    tc, tv = minor_of(torchcodec), minor_of(torch)
    if tc is None or tv is None:
        return None
    if tc >= STABLE_ABI_FROM:
        if tv < (2, 11):
            return f"torchcodec {torchcodec} needs torch >= 2.11; torch is {torch}"
        if tc >= (0, 14) and torch_cuda is None and "+cpu" not in (torchcodec or ""):
            return (f"torchcodec {torchcodec} from PyPI links CUDA 13 (libnvrtc.so.13) and does not import next to "
                    f"a CPU-only torch {torch}: use torchcodec 0.13, or the CPU build from "
                    "https://download.pytorch.org/whl/cpu")
        return None
    pair = TORCHCODEC_TORCH.get(tc)
    if pair is None:
        return f"torchcodec {torchcodec} is older than 0.8, which dali_stream needs"
    low, high = pair
    if not low <= tv <= high:
        want = f"{low[0]}.{low[1]}" if low == high else f"{low[0]}.{low[1]}..{high[0]}.{high[1]}"
        return f"torchcodec {torchcodec} pairs with torch {want}; torch is {torch}"
    return None


def cuda_driver_problem(what: str, cuda: str | None, driver: str | None) -> str | None:
    """Why a `what` built for CUDA `cuda` does not run on NVIDIA driver `driver`; None when it does."""
    cm, dm = driver_major(cuda), driver_major(driver)
    if cm is None or dm is None or cm not in CUDA_MIN_DRIVER:
        return None
    if dm < CUDA_MIN_DRIVER[cm]:
        return (f"{what} is built for CUDA {cuda}, which needs NVIDIA driver >= {CUDA_MIN_DRIVER[cm]}; this "
                f"node's driver is {driver}")
    return None


def dali_flavour_problem(flavours: list[str], driver: str | None) -> str | None:
    """Why the installed DALI distributions do not work here; None when exactly one fits the driver, or when none
    is installed on a node without an NVIDIA driver (the CPU install: DALI is optional there, `dali_missing`)."""
    if not flavours:
        return None if driver is None else (
            "no NVIDIA DALI is installed, so this node's GPUs are not used (the CPU install): in the dali_stream "
            f"checkout {install_line('cu12')} (NVIDIA driver 525 to 579) or {install_line('cu13')} (driver >= 580)")
    if len(flavours) > 1:
        return (f"{' and '.join(flavours)} are installed together; they share the nvidia/dali folder and "
                f"overwrite each other's files: pip uninstall -y {' '.join(flavours)}, then install one "
                "(`make install` picks it)")
    name = flavours[0]
    if name not in DALI_FLAVOURS:
        return None
    cuda = "13.0" if DALI_FLAVOURS[name][0] == "cu13" else "12.0"
    return cuda_driver_problem(name, cuda, driver)


def installed_dali() -> list[str]:
    """Names of the installed nvidia-dali-cuda* distributions (looked up by name: no scan of every package)."""
    import importlib.metadata as md

    found = []
    for name in ("nvidia-dali-cuda110", "nvidia-dali-cuda120", "nvidia-dali-cuda130"):
        try:
            md.version(name)
        except md.PackageNotFoundError:
            continue
        found.append(name)
    return found


def dali_present() -> bool:
    """Whether NVIDIA DALI is installed: a flavour's distribution, or `nvidia.dali` importable from elsewhere (a
    source build). Without it (the CPU install) the loader runs on its host routes (`dali_missing`)."""
    import importlib.util

    if installed_dali():
        return True
    try:
        return importlib.util.find_spec("nvidia.dali") is not None
    except ModuleNotFoundError:  # no `nvidia` package at all: find_spec raises for the parent
        return False


# What needs DALI, for the InstallError a CPU install raises when asked for it
DALI_EXTRA_LINE = ("add the [dali] extra: the CPU install line with '.[cpu,dali]' (DALI's CPU operators, ~955 MB with "
                   "NVIDIA's libraries), or a GPU node's line (docs/install.md)")


def dali_missing(what: str) -> str:
    """The InstallError's text for `what` (e.g. "resize="), asked of an install without DALI."""
    return f"{what} runs on NVIDIA DALI, which this install does not have (the CPU install); {DALI_EXTRA_LINE}"


def check_dali() -> None:
    """Raise `InstallError` where two DALI flavours are installed together: called before the loader first
    imports nvidia.dali. None installed is the CPU install (`dali_present`)."""
    flavours = installed_dali()
    if len(flavours) <= 1:
        return
    from .errors import InstallError

    raise InstallError(dali_flavour_problem(flavours, None))


def nvidia_driver() -> str | None:
    """The NVIDIA driver version `nvidia-smi` reports, or None without one."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines() if out.returncode == 0 else []
    return lines[0].strip() if lines else None


def fix_for(driver: str | None) -> str:
    chosen = constraint_set(driver)
    return (f"in a checkout, for this node ({WHEN[chosen]}): {install_line(chosen)} (or `make install`, which picks "
            "the same set)")


def _base(version: str | None) -> str | None:
    return version.split("+", 1)[0] if version else None


def untested(torch: str | None, torchcodec: str | None, dali: str | None) -> list[str]:
    """Each of torch, torchcodec and DALI whose installed version differs from the tested set (`TESTED_SETS`) the
    installed ones come closest to, as "torch 2.14.1 (tested: 2.15.0)"; nothing where they are one of the sets. A
    package not installed is not listed here (other checks name it)."""
    found = {name: _base(v) for name, v in (("torch", torch), ("torchcodec", torchcodec), ("nvidia-dali", dali))
             if v is not None}
    sets = list(TESTED_SETS.values())
    closest = max(sets, key=lambda tested: sum(tested[k] == v for k, v in found.items()))  # ties: the first set
    shown = {"torch": torch, "torchcodec": torchcodec, "nvidia-dali": dali}
    return [f"{name} {shown[name]} (tested: {closest[name]})" for name, version in found.items()
            if version != closest[name]]


def cpu_node_cuda_problem(torch: str | None, cuda: str | None, driver: str | None,
                          torchcodec: str | None = None) -> str | None:
    """A CUDA build of torch on a node without an NVIDIA driver: gigabytes of CUDA libraries that cannot run here
    (PyPI's Linux torch is a CUDA build), which diagnose warns of; None otherwise, and where `torchcodec` (>= 0.14
    from PyPI: it links CUDA 13) needs that build to import (the newest tested set)."""
    if driver is not None or cuda is None or (minor_of(torchcodec) or (0, 0)) >= (0, 14):
        return None
    return (f"torch {torch} is a CUDA {cuda} build, and this node has no NVIDIA driver: its CUDA libraries (~4 GB) "
            "cannot run here")


if __name__ == "__main__":
    if sys.argv[1:] == ["constraint-set"]:
        print(constraint_set(nvidia_driver()))
    else:
        sys.exit("usage: python3 dali_stream/pairing.py constraint-set")
