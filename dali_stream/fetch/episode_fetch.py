"""An episode's fetch, in parts: its table rows (part None) and each camera's segment, each begun once and ended
once by whichever thread claims it first — a batch builder that needs the episode (`Fetcher.fill`, in its own
thread) or the background threads after the loader pins it (`Fetcher.fill_together`: the episodes' rows in one
task, each camera in a task of its own). A part that fails hands its error to whoever waits for the episode; after
the last part the episode is done and its waiters wake. What a part fetches and what its end counts are the
store's (`fetch.store`); this module holds the threads, the claims and the order (cameras after the rows).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Sequence

from ..errors import DaliStreamError


@dataclass
class Fetch:
    """An episode's fetch state (the store's entries extend it with what the parts fetched, `rows` among it)."""

    done: threading.Event = field(default_factory=threading.Event)
    rows_ready: threading.Event = field(default_factory=threading.Event)
    started: bool = False
    pending: int = 0  # parts (rows, one per camera) not ended yet
    claimed: set = field(default_factory=set)  # parts begun (None: the rows), each ends exactly once
    error: BaseException | None = None
    rows: dict = field(default_factory=dict)  # filled by the rows part, before rows_ready is set

    def fail(self, error: BaseException) -> None:
        """End the fetch failed with `error` (unless it failed before) and wake its waiters."""
        self.error = self.error or error
        self.rows_ready.set()
        self.done.set()


# A part: None (the rows) or a camera key
Part = Hashable
# (episode position, its fetch, part) -> what one part does alone: the rows (None) or a camera's segment, fetched into
# the entry; raising fails the episode
Work = Callable[[int, Any, Any], None]
# [(position, fetch)] -> per episode, (position, fetch, its rows or the error reading them): rows read together
ReadRows = Callable[[list[tuple[int, Any]]], Iterable[tuple[int, Any, Any]]]
# (position, fetch, background, start time): a part ended; the last one marks the fetch done
Ended = Callable[[int, Any, bool, float], None]


class Fetcher:
    """Runs episodes' fetches: `workers` background threads (0: none, each builder fetches what it needs), `lock`
    the store's (claims are taken under it), `read_rows`, `work` and `ended` the store's part of it (above)."""

    def __init__(self, workers: int, lock: threading.Lock, read_rows: ReadRows, work: Work, ended: Ended) -> None:
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="dali-stream-fetch") if workers > 0 else None
        self._lock, self._read_rows, self._work, self._ended = lock, read_rows, work, ended

    def threads_ran(self) -> bool:
        """Whether a background thread was started (a process forked since has none of them)."""
        return self.pool is not None and bool(self.pool._threads)

    def close(self, wait: bool) -> None:
        """End the background threads: pending fetches are cancelled (`wait`: and the running ones waited for)."""
        pool, self.pool = self.pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=True)

    def fill(self, pos: int, fetch: Fetch, cameras: list) -> None:
        """Fetch the rows and each camera's segment one after another in this thread (a builder's demand fetch)."""
        fetch.pending = 1 + len(cameras)
        for part in [None, *cameras]:
            self.part(pos, fetch, part, False)

    def fill_together(self, starting: Sequence[tuple[int, Fetch, list]]) -> None:
        """Fetch episodes (position, fetch, cameras) in the background: their rows in one task, each camera in a task
        of its own (the cameras whose segments are cut whole wait for the rows, which start first)."""
        tasks: list[tuple[Callable[..., None], tuple]] = [(self._rows_together, ([(p, f) for p, f, _ in starting],))]
        for pos, fetch, cameras in starting:
            fetch.pending = 1 + len(cameras)
            tasks += [(self.part, (pos, fetch, camera, True)) for camera in cameras]
        for n, (fn, args) in enumerate(tasks):
            try:
                assert self.pool is not None  # background fetches need the threads
                self.pool.submit(fn, *args)
            except BaseException as exc:  # the pool closed, or an interrupt (Ctrl-C) landed here: the parts not
                # handed over end failed, so nobody waits for these episodes forever
                why = DaliStreamError(f"the fetch of this episode was stopped before it began ({type(exc).__name__})")
                for rest, rest_args in tasks[n:]:
                    if rest == self._rows_together:
                        for pos, fetch, _ in starting:
                            self.part(pos, fetch, None, True, failed=why)
                    else:
                        pos, fetch, camera, _ = rest_args
                        self.part(pos, fetch, camera, True, failed=why)
                raise

    def _rows_together(self, starting: list[tuple[int, Fetch]]) -> None:
        """The rows part of each of `starting`, read together (`read_rows`)."""
        claimed = [(pos, fetch) for pos, fetch in starting if self.claim(fetch, None)]
        t0 = time.perf_counter()
        ended: set[int] = set()
        try:
            for pos, fetch, rows in self._read_rows(claimed):
                if isinstance(rows, BaseException):
                    fetch.error = fetch.error or rows
                else:
                    fetch.rows = rows
                fetch.rows_ready.set()
                ended.add(pos)
                self._ended(pos, fetch, True, t0)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for these episodes
            for pos, fetch in claimed:
                if pos not in ended:
                    fetch.error = fetch.error or exc
                    fetch.rows_ready.set()
                    self._ended(pos, fetch, True, t0)
            raise

    def claim(self, fetch: Fetch, part: Part) -> bool:
        """Whether this caller does `part` of the fetch: each part begins once."""
        with self._lock:
            if part in fetch.claimed:
                return False
            fetch.claimed.add(part)
            return True

    def part(self, pos: int, fetch: Fetch, part: Part, background: bool, failed: BaseException | None = None) -> None:
        """Do one part of the episode's fetch (None: its rows, alone); `failed`: end it failed with that error
        instead. A part already begun (or ended failed) is not done again."""
        if not self.claim(fetch, part):
            return
        t0 = time.perf_counter()
        try:
            if failed is not None:
                raise failed
            self._work(pos, fetch, part)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for this episode
            fetch.error = fetch.error or exc
        finally:
            if part is None:
                fetch.rows_ready.set()
        self._ended(pos, fetch, background, t0)
