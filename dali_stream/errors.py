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


class DamagedFileError(DaliStreamError, RuntimeError):
    """A file's own bytes contradict themselves: a size, count or offset that its box (or footer) cannot hold, or
    that points past the file's end. `path` names the file, `part` the box or footer that says so; found before
    anything that size is allocated or read. Catch this one for both kinds below."""

    def __init__(self, message: str, path: str = "", part: str = "") -> None:
        super().__init__(message)
        self.path, self.part = path, part

    def __reduce__(self):  # pickled across processes (DataLoader workers) with the file and part kept
        return type(self), (str(self), self.path, self.part)


class DamagedVideoError(DamagedFileError, VideoFileError):
    """An MP4 whose boxes contradict themselves or the file's length (truncated, flipped bytes, lying sizes)."""


class DamagedTableError(DamagedFileError, DatasetError):
    """A parquet file (a data or metadata table) that pyarrow cannot read: truncated, a bad footer or pages."""


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

    retried = False  # True where every attempt the retry policy allows was made


class InstallError(DaliStreamError, ImportError):
    """The installed packages do not work together (no DALI, two DALI flavours, a mismatched pair)."""


class PipelineError(DaliStreamError, ValueError):
    """A `dali_stream.dali.Source` and the DALI pipeline it is read in do not fit (the subclasses below say how)."""


class BatchSizeMismatchError(PipelineError):
    """The pipeline's `batch_size` is not the source's: every batch the source hands DALI is the loader's."""


class UnknownOutputError(PipelineError, KeyError):
    """A camera or key the source's batches do not have (asked of `read(keys=...)` or of the inputs it returned)."""

    def __str__(self) -> str:  # the message as written, not KeyError's quoted repr
        return str(self.args[0]) if self.args else ""


class SourceInUseError(PipelineError):
    """A source read a second time: one source feeds one pipeline, once."""


class SourceClosedError(PipelineError):
    """A source (or the StreamLoader under it) used after close()."""
