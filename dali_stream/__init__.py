"""dali_stream: a loader for LeRobot v3 datasets, built on NVIDIA DALI (every camera decodes on the CPU until NVDEC is
measured faster on a node: README, Status).

The public surface is what this module exports: `StreamLoader`, `open_meta` (a source's metadata before a
loader), `LoaderConfig` (its settings), `Mixture` and
`Member` (several datasets as one source), the error classes and `__version__`; `dali_stream.dali` is public too (the
loader's batches as inputs of your own DALI pipeline). The subpackages (`source`, `plan`, `fetch`, `decode`, `graph`, `tools`) and the
other modules are internal: their names may change between versions. Heavy modules (torch, DALI) load on
first use of `StreamLoader` or `open_meta`, so `dali-stream diagnose`-style tools import this package on a half-broken node.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # type checkers and editors see the class; at run time it loads on first use (__getattr__)
    from .loader import StreamLoader, open_meta

# DALI keeps freed host buffers in its own pool, which by default does not give them back: with outputs
# handed to torch without a copy (the dynamic executor), resident memory grew by ~9 MB per 480p batch, to
# 6-7 GB over an epoch. With a threshold set, buffers above it go back to the system; measured flat at
# 1.45 GB at no cost in throughput. Set before DALI allocates anything; a value in the environment wins.
os.environ.setdefault("DALI_MALLOC_POOL_THRESHOLD", str(1 << 20))


class _FirstTimeWarnings(logging.Handler):
    """The `dali_stream` logger's own handler: each distinct WARNING (or worse) to stderr once, while the
    application has configured no logging that receives it (no handler on the root logger nor on the `dali_stream`
    loggers); where it has, the record goes there only, as the application formats it, and this prints nothing.
    Routes and settings go at INFO, which it never prints.

    Why a handler rather than moving these messages to Python's `warnings` (which the library uses for what a
    setting or dataset should change, each shown once by Python): the logger's warnings are events of a run (a
    remote read retried, the disk tier given up, a transform kept in the calling thread) that an application logs
    with its own records; a handler keeps that, and prints them where nothing would (the package's handler keeps
    logging's last resort from firing). Once per text: a retried read does not flood the terminal. Silence it with
    `logging.getLogger("dali_stream").setLevel(logging.ERROR)`, or route the records with `logging.basicConfig()`."""

    KEPT = 10_000  # texts remembered; past them, a text repeats

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self._seen: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        if self._configured(record.name):
            return
        text = record.getMessage()
        if text in self._seen:
            return
        if len(self._seen) < self.KEPT:
            self._seen.add(text)
        try:
            sys.stderr.write(f"dali_stream {record.levelname.lower()}: {self.format(record)}\n")
            sys.stderr.flush()
        except Exception:  # noqa: BLE001 - as logging's own handlers: a closed stream must not break loading
            self.handleError(record)

    def _configured(self, name: str) -> bool:
        """Whether a handler other than this one receives records of logger `name` (the root's included)."""
        logger: logging.Logger | None = logging.getLogger(name)
        while logger is not None:
            if any(h is not self for h in logger.handlers):
                return True
            logger = logger.parent if logger.propagate else None
        return False


# Routes and settings are logged at INFO, events a user should know of (remote retries, the disk tier's fallback) at
# WARNING, on the `dali_stream` logger: warnings reach stderr once each unless the application logs them itself.
logging.getLogger("dali_stream").addHandler(_FirstTimeWarnings())

from .config import LoaderConfig  # noqa: E402 - after the environment DALI reads at import
from .errors import (  # noqa: E402
    ConfigError,
    DaliStreamError,
    DamagedFileError,
    DatasetError,
    DatasetNotFoundError,
    DecodeError,
    DeviceError,
    FrameTimestampError,
    InstallError,
    RemoteError,
    StateError,
    UnsupportedVersionError,
    VideoFileError,
)
from .mixture import Member, Mixture  # noqa: E402

__version__ = "0.1.0"
__all__ = ["StreamLoader", "open_meta", "LoaderConfig", "Mixture", "Member", "DaliStreamError", "ConfigError", "DamagedFileError", "DatasetError", "DatasetNotFoundError", "DecodeError",
           "DeviceError", "FrameTimestampError", "InstallError", "RemoteError", "StateError", "UnsupportedVersionError", "VideoFileError",
           "__version__"]


def __getattr__(name: str):
    if name in ("StreamLoader", "open_meta"):
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'dali_stream' has no attribute {name!r}")
