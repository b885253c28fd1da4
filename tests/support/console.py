"""Run the installed `dali-stream` console script in a real subprocess, as a user does. Not a test module."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(sys.executable).parent / "dali-stream"


def dali_stream(*args, env: dict | None = None, timeout: float = 300, cwd: Path | None = None
                ) -> subprocess.CompletedProcess:
    """`dali-stream ARGS...` with the environment plus `env` (and a wide terminal for rich tables), in `cwd`."""
    cmd = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "dali_stream"]
    return subprocess.run(cmd + [str(a) for a in args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "COLUMNS": "200", **(env or {})}, cwd=cwd)
