"""What a loader's life needs beyond its stages: the runtime libraries imported once (their failures kept for the
constructor to name), the loaders still open at interpreter exit closed in the right order, and a collected
loader's threads ended without waiting.

Threads end with the loader, even unclosed. Garbage collection runs the finalizer on whatever thread allocates at
that moment: one of the fetch threads, one holding a lock the close takes, or fsspec's event-loop thread while a
fetch thread waits for that loop (joining it there never returned). So a collected loader is closed on a thread of
its own, which tells the fetch threads to end and does not wait for them; `close()` waits. Not at interpreter exit:
a thread closing the store then races the interpreter's teardown (killed inside pyarrow's ParquetReader dealloc:
"terminate called without an active exception", 1 exit in 5 of benchmarks/epoch_profile.py), so loaders open at
exit are closed on the main thread (`close_open_loaders`). The closing thread is started by the loader's
constructor, never from the finalizer (`fetch.closer._Closer`: a thread started inside the garbage collector can
deadlock every thread start)."""

from __future__ import annotations

import atexit
import concurrent.futures.process  # noqa: F401 - its exit hook registered before ours, so ours runs first (below)
import concurrent.futures.thread  # noqa: F401 - the same
import threading
import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .stream import StreamLoader


def runtime_error(name: str) -> BaseException | None:
    """Import runtime module `name` once (torchcodec's decoders, DALI's torch plugin) and keep its failure: None when
    it imports. Each loads only where a loader's routes use it: torchcodec (~1.4 s, nearly all torch._dynamo, which
    its ops module pulls in) by the constructor of a loader with a camera decoded through it; DALI's torch plugin
    when a loader first builds a DALI graph. A failure is raised, named, by the constructor."""
    if name not in _TRIED:
        import importlib

        try:
            importlib.import_module(name)
            _TRIED[name] = None
        except Exception as exc:  # noqa: BLE001 - reported by `loader.assemble`
            _TRIED[name] = exc
    return _TRIED[name]


_TRIED: dict[str, BaseException | None] = {}
OPEN_LOADERS: "weakref.WeakSet[StreamLoader]" = weakref.WeakSet()


def close_open_loaders() -> None:
    """At interpreter exit, on the main thread: tell every loader left open to close, without waiting; the
    interpreter then joins the threads (see below). Nothing here blocks, so a Ctrl-C during exit cannot stop it
    halfway (an exception out of this hook would skip the joins, and threads still running at teardown abort the
    process)."""
    for loader in list(OPEN_LOADERS):
        try:
            loader.close(wait=False)
        except BaseException:  # noqa: BLE001 - at exit: the next loader must still be told
            pass


# Interpreter exit joins every thread of every ThreadPoolExecutor after handing each executor's registered threads
# an end-of-work sentinel (concurrent.futures' own hook). A KeyboardInterrupt that lands in `submit` between a new
# worker's start and its registration leaves a thread nobody hands one: it waits for work forever, and the exit
# that joins it never ends (Ctrl-C before the first batch, about 1 run in 40 with pieces cut ahead).
# Closing the loaders in threading's own exit hooks, which run before those joins and before concurrent.futures' own
# (those run in reverse order of registering, and both of its modules are imported above, so theirs are registered
# first and run last: the process pools of decode and transform processes included, which the loader may import only
# later), shuts every pool down: `shutdown` wakes registered and orphaned workers alike.
_register_exit = getattr(threading, "_register_atexit", None)
if _register_exit is not None:
    _register_exit(close_open_loaders)
else:  # an interpreter without it: at least close them at exit
    atexit.register(close_open_loaders)


_INHERITED: list[Any] = []  # loaders a forked process got from its parent: kept, never closed or collected there


def inherited(loader: "StreamLoader") -> None:
    """Let go of `loader` in a process forked after it was made (a DataLoader's worker): its threads do not exist here,
    so it is never used, closed or collected here (a close, or its finalizer, would join threads, take locks held at
    the fork and free decoders whose threads are gone). Kept referenced for the process's life, its finalizer
    detached, out of the loaders closed at exit; the parent's own copy is untouched."""
    loader._closed = True
    loader._finalizer.detach()
    OPEN_LOADERS.discard(loader)
    _INHERITED.append(loader)


def shut(store: Any, engines: list[Any], transforms: Any, wait: bool = False) -> None:
    """A loader's close: the store's threads, the engines' threads and the transform processes end, waited for
    with `wait` (`close()`); a collected loader's on a thread of its own, without waiting."""
    store.close(wait)
    for engine in engines:
        engine.close(wait)
    if transforms is not None:
        transforms.close(wait)
