"""Batch-sized numpy buffers reused once nothing else refers to them.

A 480p batch is tens of MB; a fresh buffer of that size comes from the kernel as untouched pages, and writing a
batch into one cost 2-4x the writing itself on the 2-core VM we measure on (the page faults: 418 against 561
samples/s for the whole loader, `benchmarks/README.md`). So host frames (`graph.host`) write into buffers
that come back here: a buffer is handed out again only when the pool holds the only reference to it, i.e.
when no prepared batch holds it and no tensor the caller was given (or any view of one) is alive: `torch.
from_numpy` keeps the array referenced for as long as any tensor shares its memory.
"""

from __future__ import annotations

import sys
import threading

import numpy as np


class BufferPool:
    """Up to `keep` buffers per (shape, dtype); beyond that, buffers are allocated and left to the collector."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self._lock = threading.Lock()
        self._buffers: dict[tuple, list[np.ndarray]] = {}
        self.allocated = 0  # buffers allocated (pooled or not)
        self.reused = 0

    def take(self, shape: tuple[int, ...], dtype) -> np.ndarray:
        """An uninitialised array of `shape` and `dtype` that nothing else refers to."""
        key = (tuple(int(s) for s in shape), np.dtype(dtype).str)
        with self._lock:
            kept = self._buffers.setdefault(key, [])
            for arr in kept:
                # referenced by `kept`, by `arr` and by getrefcount's argument: nobody else
                if sys.getrefcount(arr) == 3:
                    self.reused += 1
                    return arr
            self.allocated += 1
            arr = np.empty(key[0], dtype)
            if len(kept) < self.keep:
                kept.append(arr)
            return arr

    @property
    def nbytes(self) -> int:
        """Bytes held by the pool's buffers (in use or idle)."""
        with self._lock:
            return sum(a.nbytes for kept in self._buffers.values() for a in kept)

    def clear(self) -> None:
        with self._lock:
            self._buffers.clear()
