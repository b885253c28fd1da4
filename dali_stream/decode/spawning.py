"""Processes spawned without running the caller's script: multiprocessing's spawn imports the parent's `__main__`
(its file) in each child before anything else, which re-runs a training script that has no `if __name__ ==
"__main__":` guard (torch's DataLoader workers impose that guard on their users). The loader's own processes (the
transform workers, the decode processes) run this package's functions only."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

_SPAWN_LOCK = threading.Lock()


@contextlib.contextmanager
def without_main():
    """Processes spawned inside it do not import the parent's `__main__` (module doc); one thread at a time."""
    from multiprocessing import spawn

    original = spawn.get_preparation_data

    def prepare(name: str) -> dict[str, Any]:
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    with _SPAWN_LOCK:
        spawn.get_preparation_data = prepare
        try:
            yield
        finally:
            spawn.get_preparation_data = original
