"""How long the training loop waits for data: per batch, from asking for it (`next`) to getting it, on this rank.

A loop whose steps take longer than the loader needs per batch waits ~0; a loader slower than the loop shows as
a wait fraction near 1. `StreamLoader.data_wait()` reads it at any step: since the loader first handed out a
batch, and over the last `window` batches (a fraction of their wall time, and percentiles of the waits). The
wall time of a step is from getting one batch to getting the next: the training step plus the wait.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

import numpy as np


class DataWait:
    """Waits for batches, as the loop saw them (module doc)."""

    def __init__(self, window: int = 100) -> None:
        self.window = window
        self._lock = threading.Lock()
        self._recent: deque[tuple[float, float]] = deque(maxlen=window)  # (wait, wall since the previous batch), s
        self._first_ask: float | None = None
        self._last_got: float | None = None
        self.batches = 0
        self.wait_s = 0.0

    def got(self, asked: float, now: float | None = None) -> None:
        """A batch asked for at `asked` (time.perf_counter) arrived now."""
        now = time.perf_counter() if now is None else now
        with self._lock:
            if self._first_ask is None:
                self._first_ask = asked
            wall = now - (self._last_got if self._last_got is not None else asked)
            self._recent.append((now - asked, wall))
            self._last_got = now
            self.batches += 1
            self.wait_s += now - asked

    def stats(self) -> dict[str, Any]:
        """`batches`, `wait_s`, `wall_s` and `wait_fraction` since the first batch was asked for; `recent`: the same
        over the last `window` batches with `p50_ms`, `p95_ms` and `max_ms` of their waits (None before any)."""
        with self._lock:
            wall = (self._last_got - self._first_ask) if self._last_got is not None and self._first_ask is not None \
                else 0.0
            waits = np.array([w for w, _ in self._recent])
            walls = sum(v for _, v in self._recent)
            recent = None
            if len(waits):
                recent = {"batches": len(waits), "wait_fraction": float(waits.sum() / walls) if walls > 0 else None,
                          "p50_ms": float(np.percentile(waits, 50) * 1e3),
                          "p95_ms": float(np.percentile(waits, 95) * 1e3), "max_ms": float(waits.max() * 1e3)}
            return {"batches": self.batches, "wait_s": self.wait_s, "wall_s": wall,
                    "wait_fraction": self.wait_s / wall if wall > 0 else None, "window": self.window,
                    "recent": recent}
