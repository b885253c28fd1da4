"""`OncePerKey`: a value made once per key even when threads race for it (per-file footers, MP4 indexes)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable, Hashable


class OncePerKey:
    """`get(key, make)` returns the value kept for `key`, or calls `make()` once while other threads asking
    for the same key wait (other keys are not blocked). With `capacity` (values) or `capacity_bytes` (the sum
    of `weigh(value)`), the least recently used values beyond it are dropped, each handed to `on_evict`; the
    value just made is always kept. `nbytes` and `peak_bytes` follow the weights kept."""

    def __init__(self, capacity: int | None = None, on_evict: Callable[[object], None] | None = None, *,
                 capacity_bytes: int | None = None, weigh: Callable[[object], int] | None = None) -> None:
        self.capacity, self.on_evict = capacity, on_evict
        self.capacity_bytes, self.weigh = capacity_bytes, weigh
        self._lock = threading.Lock()
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._values: OrderedDict[Hashable, object] = OrderedDict()
        self._weights: dict[Hashable, int] = {}
        self.nbytes = 0
        self.peak_bytes = 0
        self.evictions = 0

    def _over(self) -> bool:
        if self.capacity is not None and len(self._values) > self.capacity:
            return True
        return self.capacity_bytes is not None and self.nbytes > self.capacity_bytes and len(self._values) > 1

    def _kept(self, key: Hashable) -> tuple[bool, object]:
        with self._lock:
            if key not in self._values:
                return False, None
            self._values.move_to_end(key)
            return True, self._values[key]

    def __len__(self) -> int:
        """Values kept now."""
        with self._lock:
            return len(self._values)

    def holds(self, key: Hashable) -> bool:
        """Whether a value is kept for `key` (made, not evicted)."""
        with self._lock:
            return key in self._values

    def forget(self, key: Hashable) -> None:
        """Drop the value kept for `key`, if any (not handed to `on_evict`)."""
        with self._lock:
            if self._values.pop(key, None) is not None:
                self.nbytes -= self._weights.pop(key)

    def clear(self) -> list:
        """Forget every value; returns them (for the caller to close)."""
        with self._lock:
            values = list(self._values.values())
            self._values.clear()
            self._weights.clear()
            self.nbytes = 0
        return values

    def get(self, key: Hashable, make: Callable[[], object]):
        found, value = self._kept(key)
        if found:
            return value
        with self._lock:
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:
            found, value = self._kept(key)  # made by the thread this one waited for
            if found:
                return value
            value = make()
            weight = int(self.weigh(value)) if self.weigh is not None else 0
            with self._lock:
                self._values[key] = value
                self._weights[key] = weight
                self.nbytes += weight
                self.peak_bytes = max(self.peak_bytes, self.nbytes)
                dropped = []
                while self._over():
                    old_key, old_value = self._values.popitem(last=False)
                    self.nbytes -= self._weights.pop(old_key)
                    self.evictions += 1
                    dropped.append(old_value)
            for old in dropped:
                if self.on_evict is not None:
                    self.on_evict(old)
            return value
