"""Tests that run in a child process of their own (marker `child`): PyNvVideoCodec ends the process with exit(1)
on a failed CUDA driver call (no exception), which in-process would end the whole test run unexplained. The
parent runs `pytest NODEID` in a child and fails the test with the child's exit status and output. Not a test
module: `tests/conftest.py` wires it in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

CHILD_ENV = "DALI_STREAM_TEST_CHILD"
REPO = Path(__file__).resolve().parents[2]


def in_child() -> bool:
    return os.environ.get(CHILD_ENV) == "1"


def run_in_child(nodeid: str, basetemp: Path, timeout_s: float = 1800, env: dict | None = None
                 ) -> tuple[int, str]:
    """`pytest -s NODEID` in a child process (its own `basetemp`; output not captured, so what a process that ends
    itself printed last is kept); (exit status, output)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", f"--basetemp={basetemp}", nodeid]
    try:
        ran = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
                             stdin=subprocess.DEVNULL, env={**os.environ, **(env or {}), CHILD_ENV: "1"})
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return -9, f"still running after {timeout_s:.0f} s\n{out}"
    return ran.returncode, ran.stdout + ran.stderr


def verdict(nodeid: str, rc: int, output: str) -> str | None:
    """None when the child's test passed or skipped (exit status 0); else why it failed, saying so when the process
    ended itself before pytest could write its summary."""
    if rc == 0:
        return None
    summary = any(word in output for word in (" passed", " failed", " error"))
    ended = "" if summary else (" before pytest's summary: the process ended itself (PyNvVideoCodec exits with 1 on "
                                "a failed CUDA driver call)")
    tail = "\n".join(output.strip().splitlines()[-40:])
    return f"{nodeid} in a child process: exit status {rc}{ended}\n{tail}"
