"""The measurement window of `dali-stream bench`, shared by the loader run and the lerobot baseline."""

from __future__ import annotations

import time


class SteadyWindow:
    """The measurement rule shared by the loader run and the baseline, so their rates compare: the window
    opens when batch `warmup_batches + 1` is asked for and closes at the first batch delivered
    `duration_s` after that (or at its `num_batches`-th batch); `waits` are the times spent in `next()` for
    the window's batches."""

    def __init__(self, warmup_batches: int, duration_s: float, num_batches: int | None = None) -> None:
        self.warmup_batches, self.duration_s, self.num_batches = warmup_batches, duration_s, num_batches
        self.delivered = 0
        self.first_got: float | None = None  # when the first batch arrived (first-batch latency)
        self.start: float | None = None
        self.end: float | None = None
        self.last: float | None = None
        self.waits: list[float] = []

    def record(self, asked: float, got: float) -> bool:
        """One batch asked for at `asked`, delivered at `got`; True when it belongs to the window."""
        self.delivered += 1
        if self.first_got is None:
            self.first_got = got
        if self.start is None and self.delivered == self.warmup_batches + 1:
            self.start = asked
        if self.start is None:
            return False
        self.waits.append(got - asked)
        self.last = got
        if (len(self.waits) >= self.num_batches if self.num_batches else got - self.start >= self.duration_s):
            self.end = got
        return True

    def timed(self, it):
        """Each batch of iterator `it`, with whether it belongs to the window (each `next()` timed, recorded)."""
        while True:
            asked = time.perf_counter()
            try:
                batch = next(it)
            except StopIteration:
                return
            yield batch, self.record(asked, time.perf_counter())

    @property
    def closed(self) -> bool:
        return self.end is not None

    @property
    def seconds(self) -> float:
        """Window length: to its closing batch, or to the last batch if the source ran out first."""
        end = self.end if self.end is not None else self.last
        return end - self.start if self.start is not None and end is not None else 0.0
