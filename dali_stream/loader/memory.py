"""Hand memory that the loader's threads freed back to the operating system; read what memory the node has left
(`available_bytes`: the decoded-frame cache's bound, times the node's ranks (`World.local_world_size`), is checked
against it).

glibc's malloc gives each thread that allocates an arena of its own (up to 8 per core) and keeps what is freed
there for reuse. The loader's threads allocate and free many buffers of varied sizes (pieces, joined streams,
decoded frames), so a process's resident memory kept growing with the batches it had drawn (measured on a
global shuffle, 2 cores: 1.16 GB after 100 batches, 1.83 GB after 400, with the loader holding 11 MB), though
nothing was held. `malloc_trim(0)` returns those free pages to the system. Trimming at every look (every
`TRIM_EVERY` batches) handed back pages the next batches took again, each a new page fault: the decoded frames of
the episodes a pool holds come and go at ~1.4 GB an epoch at LIBERO's 256x256, ~280,000 faults an epoch that cost a
2-core VM 0.6-0.8 s of system time. So each look estimates the memory malloc keeps free: the process's anonymous
resident memory less what malloc has handed out (`mallinfo2`, glibc 2.33 and later; elsewhere the resident memory
alone), and trims only where that grew more than `TRIM_SLACK_BYTES` since the last trim: what malloc keeps free is
bounded by that slack (untrimmed, it grew ~450 MB on a global shuffle of 400 episodes, 400-650 MB between looks
at LIBERO's shape). Measured against a trim at every look (benchmarks/freed_memory.py): epoch 3 1.09-1.13x on the
small shapes, peak RSS 0.06-0.27 GB higher. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from typing import Callable

TRIM_EVERY = 32  # batches handed out between two looks at the memory malloc keeps free
TRIM_SLACK_BYTES = 512 << 20  # growth of that memory since the last trim that a trim waits for


def _libc():
    if not sys.platform.startswith("linux"):
        return None
    try:  # the process's own symbols: libc is loaded (ctypes.util.find_library would run ldconfig in a subprocess)
        return ctypes.CDLL(None)
    except OSError:
        return None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def _trim(libc) -> Callable[[], None]:
    trim = getattr(libc, "malloc_trim", None)  # musl and others: none
    if trim is None:
        return lambda: None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0) and None


def _handed_out(libc) -> Callable[[], int | None]:
    """() -> bytes malloc has handed out and not had back (its arenas' chunks in use and its own mappings)."""
    info = getattr(libc, "mallinfo2", None)  # glibc 2.33 and later
    if info is None:
        return lambda: None
    info.argtypes, info.restype = [], _MallInfo2

    def handed_out() -> int:
        got = info()
        return int(got.uordblks + got.hblkhd)
    return handed_out


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def anonymous_resident_bytes() -> int | None:
    """This process's resident memory not backed by files (/proc/self/statm: resident less shared); None where it
    cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            fields = f.read().split()
        return (int(fields[1]) - int(fields[2])) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


class FreedMemory:
    """`__call__`: freed memory handed back to the system (`trim`) where the memory malloc keeps free (`free_bytes`)
    grew more than `slack` bytes since the last trim, or cannot be estimated. `trims`: how many were made."""

    def __init__(self, trim: Callable[[], None], handed_out: Callable[[], int | None],
                 slack: int = TRIM_SLACK_BYTES) -> None:
        self._trim, self._handed_out, self.slack = trim, handed_out, int(slack)
        self._lock = threading.Lock()
        self.after: int | None = None  # `free_bytes` after the last trim
        self.trims = 0

    def free_bytes(self) -> int | None:
        """The memory malloc keeps free, estimated: anonymous resident memory less what malloc has handed out (the
        rest of it, Python's own arenas and libraries' pools, moves little); resident memory alone where malloc
        cannot say."""
        resident = anonymous_resident_bytes()
        if resident is None:
            return None
        used = self._handed_out()
        return resident if used is None else resident - used

    def __call__(self) -> None:
        with self._lock:
            now = self.free_bytes()
            if now is not None and self.after is not None and now <= self.after + self.slack:
                return
            self._trim()
            self.trims += 1
            self.after = self.free_bytes()


_LIBC = _libc()
release_freed = FreedMemory(_trim(_LIBC), _handed_out(_LIBC))


def available_bytes() -> int | None:
    """Memory this process may still take: /proc/meminfo's MemAvailable, lowered to what its cgroup's limit leaves
    (a SLURM job's or a container's allocation: the limit less the usage, cgroup v2 or v1, for its group and each
    one above it); None where none of them can be read."""
    got = []
    try:
        with open("/proc/meminfo") as f:
            got += [int(line.split()[1]) * 1024 for line in f if line.startswith("MemAvailable:")]
    except (OSError, ValueError, IndexError):
        pass
    groups = []  # (folder of the hierarchy, limit file, usage file, this process's group in it)
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                number, controllers, path = line.rstrip("\n").split(":", 2)
                if number == "0" and not controllers:
                    groups.append(("/sys/fs/cgroup", "memory.max", "memory.current", path))
                elif "memory" in controllers.split(","):
                    groups.append(("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", path))
    except (OSError, ValueError):
        pass
    for folder, limit_file, used_file, path in groups:
        while True:  # the group, then its parents: the tightest limit holds
            here = folder + path.rstrip("/")
            try:
                with open(f"{here}/{limit_file}") as f:
                    limit = f.read().strip()
                with open(f"{here}/{used_file}") as f:
                    used = int(f.read())
                if limit.isdigit() and int(limit) < 1 << 62:  # v1 writes "no limit" as a huge number, v2 as "max"
                    got.append(max(int(limit) - used, 0))
            except (OSError, ValueError):
                pass
            if path in ("/", ""):
                break
            path = path.rstrip("/").rsplit("/", 1)[0] or "/"
    return min(got) if got else None
