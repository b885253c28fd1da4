"""dali_stream: a loader for LeRobot v3 datasets, built on NVIDIA DALI (every camera decodes on the CPU until NVDEC is
measured faster on a node: README, Status).

The public surface is what this module exports: `StreamLoader`, `open_meta` (a source's metadata before a
loader), `LoaderConfig` (its settings), `Mixture` and
`Member` (several datasets as one source), the error classes and `__version__`. The subpackages (`source`, `plan`, `fetch`, `decode`, `graph`, `tools`) and the
other modules are internal: their names may change between versions. Heavy modules (torch, DALI) load on
first use of `StreamLoader` or `open_meta`, so `dali-stream diagnose`-style tools import this package on a half-broken node.
"""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # type checkers and editors see the class; at run time it loads on first use (__getattr__)
    from .loader import StreamLoader, open_meta

# DALI keeps freed host buffers in its own pool, which by default does not give them back: with outputs
# handed to torch without a copy (the dynamic executor), resident memory grew by ~9 MB per 480p batch, to
# 6-7 GB over an epoch. With a threshold set, buffers above it go back to the system; measured flat at
# 1.45 GB at no cost in throughput. Set before DALI allocates anything; a value in the environment wins.
os.environ.setdefault("DALI_MALLOC_POOL_THRESHOLD", str(1 << 20))
# The library prints nothing: routes and settings are logged at INFO, remote retries at WARNING, on the
# `dali_stream` logger; without a handler configured by the application they go nowhere.
logging.getLogger("dali_stream").addHandler(logging.NullHandler())

from .config import LoaderConfig  # noqa: E402 - after the environment DALI reads at import
from .errors import (  # noqa: E402
    ConfigError,
    DaliStreamError,
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
__all__ = ["StreamLoader", "open_meta", "LoaderConfig", "Mixture", "Member", "DaliStreamError", "ConfigError", "DatasetError", "DatasetNotFoundError", "DecodeError",
           "DeviceError", "FrameTimestampError", "InstallError", "RemoteError", "StateError", "UnsupportedVersionError", "VideoFileError",
           "__version__"]


def __getattr__(name: str):
    if name in ("StreamLoader", "open_meta"):
        from . import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'dali_stream' has no attribute {name!r}")
