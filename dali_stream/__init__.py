"""dali_stream: a GPU-first loader for LeRobot v3 datasets, built on NVIDIA DALI.

`from dali_stream import StreamLoader` is the entry point. Heavy modules (torch, DALI) load on first
use, so `dali-stream diagnose`-style tools import this package on a half-broken node.
"""

from __future__ import annotations

from .errors import (ConfigError, DaliStreamError, DatasetError, DatasetNotFoundError, DecodeError, DeviceError,
                     FrameTimestampError, InstallError, RemoteError, StateError, UnsupportedVersionError,
                     VideoFileError)

__version__ = "0.1.0"
__all__ = ["StreamLoader", "DaliStreamError", "ConfigError", "DatasetError", "DatasetNotFoundError", "DecodeError",
           "DeviceError", "FrameTimestampError", "InstallError", "RemoteError", "StateError", "UnsupportedVersionError", "VideoFileError",
           "__version__"]


def __getattr__(name: str):
    if name == "StreamLoader":
        from .loader import StreamLoader

        return StreamLoader
    raise AttributeError(f"module 'dali_stream' has no attribute {name!r}")
