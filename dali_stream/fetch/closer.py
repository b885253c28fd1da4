"""The closing thread: work finalizers hand off (`in_background`) instead of running it, or starting a thread, on
whatever thread garbage collection happens to run them."""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import Callable

log = logging.getLogger("dali_stream")


class _Closer:
    """The thread finalizers hand their work to (`in_background`): started by an ordinary call (a loader's
    constructor, `start`), so that a finalizer only puts work on a queue and never starts a thread. Garbage
    collection can run a finalizer inside `threading`'s own bookkeeping, while it holds the lock every new thread
    takes before it counts as started (`_maintain_shutdown_locks`, under `_shutdown_locks_lock`): a thread started
    there never starts, and every later thread start in the process waits forever behind it (seen under load: a
    loader's first batch hung in `Thread.start`). Not a daemon thread: the interpreter joins it before it tears
    down, since a daemon thread still running then (here: dropping the last reference to a store, whose pyarrow
    readers release the GIL while freed) is killed mid-C++ and aborts the process ("terminate called without an
    active exception"); the exit hook `stop` ends it once what it was handed is done."""

    def __init__(self) -> None:
        self._work: queue.SimpleQueue = queue.SimpleQueue()  # put() is safe inside finalizers and GC callbacks
        self._lock = threading.Lock()
        self._running = False
        self._stopped = False

    def start(self) -> None:
        with self._lock:
            if not self._running and not self._stopped:
                threading.Thread(target=self._run, name="dali-stream-close", daemon=False).start()
                self._running = True

    def hand(self, fn: Callable[..., object], args: tuple) -> bool:
        """Queue `fn(*args)`; False when the thread is not running (not started yet, or stopped at exit)."""
        if not self._running or self._stopped:
            return False
        self._work.put((fn, args))
        return True

    def stop(self) -> None:
        """At exit (a `threading` exit hook, before the interpreter joins its threads): end after the queued work."""
        self._stopped = True
        self._work.put(None)

    def forked(self) -> None:
        """In a forked child the thread does not exist: nothing is handed to it until `start` runs there."""
        self._work, self._lock, self._running = queue.SimpleQueue(), threading.Lock(), False

    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            fn, args = item
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - a close that failed must not end the thread for the next ones
                log.warning("closing %s in the background failed", getattr(fn, "__name__", fn), exc_info=True)


CLOSER = _Closer()
os.register_at_fork(after_in_child=CLOSER.forked)
_register_exit = getattr(threading, "_register_atexit", None)
if _register_exit is not None:  # threading's exit hooks run in reverse order: this one after the loader's own
    _register_exit(CLOSER.stop)


def in_background(fn: Callable[..., object], *args: object) -> None:
    """Run `fn(*args)` off this thread and return at once: for finalizers, which garbage collection runs on
    whatever thread allocates: one of the pool threads `fn` would join (a thread cannot join itself), one
    holding a lock `fn` takes, or one a pool thread waits for. Handed to the closing thread (`_Closer`, started by
    `CLOSER.start()`); before it runs, or after it stopped at exit, on a new thread of its own. `fn` must not
    wait on other threads."""
    if CLOSER.hand(fn, args):
        return
    try:
        threading.Thread(target=fn, args=args, name="dali-stream-close", daemon=False).start()
    except RuntimeError:  # the interpreter is shutting down and starts no threads: its exit ends them anyway
        fn(*args)
