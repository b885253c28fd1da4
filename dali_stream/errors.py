"""One exception family for everything dali_stream reports to users.

Every message names the offending value, where it came from (file, episode, camera) and the fix.
Subclasses also derive from the matching builtin (ValueError, FileNotFoundError, RuntimeError) so
callers that already catch those keep working.
"""

from __future__ import annotations


class DaliStreamError(Exception):
    """Base class of every error dali_stream raises on purpose."""


class ConfigError(DaliStreamError, ValueError):
    """An argument or option has a value dali_stream cannot work with."""


class DatasetError(DaliStreamError, ValueError):
    """The dataset's metadata or tables are missing pieces or contradict each other."""


class DatasetNotFoundError(DatasetError, FileNotFoundError):
    """The dataset folder or one of its metadata files does not exist."""


class UnsupportedVersionError(DatasetError):
    """The dataset is not a LeRobot v3.x dataset."""


class VideoFileError(DaliStreamError, RuntimeError):
    """A video file is missing, truncated or not a readable container."""


class DecodeError(DaliStreamError, RuntimeError):
    """A decoder could not turn an episode's segment into frames."""


class WrongFrameError(DecodeError):
    """A decoder returned another frame than the one planned (its presentation time says so): never silent."""


class FrameTimestampError(DaliStreamError, ValueError):
    """A queried timestamp has no frame within `tolerance_s`."""


class DeviceError(DaliStreamError, RuntimeError):
    """The requested decode route or device is not available on this node."""


class StateError(DaliStreamError, ValueError):
    """A state dict does not match this loader's dataset or configuration."""


class RemoteError(DaliStreamError, OSError):
    """A remote read kept failing after every retry, or failed in a way retrying cannot fix."""


class InstallError(DaliStreamError, ImportError):
    """The installed packages do not work together (no DALI, two DALI flavours, a mismatched pair)."""
