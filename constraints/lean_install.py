"""Install a tested set into the running venv, less packages nothing in the suite loads, one heavy wheel at a time.

Used by `make test-newest`. PyPI's torch 2.15 is a CUDA 13 build: with all that pip resolves for it (triton,
cuSOLVER, cuDNN, NCCL, ...) the newest set's venv holds 6.6 GB, and pip keeps every wheel it downloaded until it
ends (~3.5 GB more): more than CI's drive has had free (~7 GB). This resolves the set exactly as pip would
(`pip install --dry-run --report`), leaves out the names given to --skip, and installs the rest pinned to the
versions pip chose, with --no-deps: torch and the nvidia-*/cuda-* wheels one per pip call (at most one of them on
the drive beside the venv), the others in one call. What is already installed at its version is left as it is.

    python constraints/lean_install.py --skip triton,nvidia-cusolver -- -c constraints/newest.txt -e '.[cu13,test]'

What --skip leaves out must be what no test loads: triton is torch.compile's GPU code generator and cuSOLVER is
torch.linalg's GPU solver (loaded by torch only when a GPU solve is asked for); `import torch` and torchcodec's
CPU decoders run without either.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from urllib.parse import unquote, urlparse

HEAVY = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", *args]
    if subprocess.call(command) != 0:
        sys.exit(f"lean_install: this pip command failed: {' '.join(command)}")


def resolve(pip_args: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as scratch:
        report = os.path.join(scratch, "report.json")
        pip("install", "-q", "--dry-run", "--ignore-installed", "--report", report, *pip_args)
        with open(report) as file:
            return json.load(file)["install"]


def installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def target(item: dict) -> list[str]:
    """pip's arguments for one resolved item: its pinned version (the same indexes give pip the same file), or the
    local project in editable mode."""
    info = item["download_info"]
    if info.get("dir_info", {}).get("editable"):
        return ["-e", unquote(urlparse(info["url"]).path)]
    return [f"{item['metadata']['name']}=={item['metadata']['version']}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip", default="", help="comma-separated distribution names to leave out")
    parser.add_argument("pip_args", nargs=argparse.REMAINDER, help="after --: what `pip install` would be given")
    options = parser.parse_args()
    pip_args = [a for a in options.pip_args if a != "--"]
    if not pip_args:
        parser.error("give pip's install arguments after --, e.g. -- -c constraints/newest.txt -e '.[cu13]'")
    skip = {canonical(n) for n in options.skip.split(",") if n}
    plan = resolve(pip_args)
    names = {canonical(item["metadata"]["name"]) for item in plan}
    unknown = sorted(skip - names)
    if unknown:
        sys.exit(f"lean_install: --skip names {unknown}, which the resolution does not hold; "
                 f"it holds {sorted(names)}. Fix the --skip list.")
    todo = []
    for item in plan:
        name, version = canonical(item["metadata"]["name"]), item["metadata"]["version"]
        editable = item["download_info"].get("dir_info", {}).get("editable", False)
        if name in skip or (not editable and installed(name) == version):
            continue
        todo.append((name, version, target(item)))
    heavy = [t for t in todo if HEAVY.match(t[0])]
    light = [t for t in todo if not HEAVY.match(t[0])]
    for number, (name, version, args) in enumerate(heavy, 1):
        print(f"lean_install: {name}=={version} ({number}/{len(heavy)} heavy wheels)", flush=True)
        pip("install", "-q", "--no-deps", *args)
    if light:
        print(f"lean_install: {len(light)} more packages", flush=True)
        pip("install", "-q", "--no-deps", *[a for _, _, args in light for a in args])
    print(f"lean_install: left out {sorted(skip)}", flush=True)


if __name__ == "__main__":
    main()
