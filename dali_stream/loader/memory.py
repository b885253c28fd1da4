"""Hand memory that the loader's threads freed back to the operating system.

glibc's malloc gives each thread that allocates an arena of its own (up to 8 per core) and keeps what is freed
there for reuse. The loader's threads allocate and free many buffers of varied sizes (pieces, joined streams,
decoded frames), so a process's resident memory kept growing with the batches it had drawn (measured on a
global shuffle, 2 cores: 1.16 GB after 100 batches, 1.83 GB after 400, with the loader holding 11 MB), though
nothing was held. `malloc_trim(0)` every `TRIM_EVERY` batches returns those free pages: resident memory stayed at
0.87 GB, with no change in samples/s. Elsewhere than glibc it does nothing.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Callable

TRIM_EVERY = 32  # batches handed out between two trims


def _trim() -> Callable[[], None]:
    if not sys.platform.startswith("linux"):
        return lambda: None
    try:  # the process's own symbols: libc is loaded (ctypes.util.find_library would run ldconfig in a subprocess)
        trim = ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # musl and others: no malloc_trim
        return lambda: None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda: trim(0) and None


release_freed = _trim()
