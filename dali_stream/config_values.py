"""The settings' numbers and lists as their callers spell them: Python's, numpy's (`np.int64(4)`, `np.float32(0.5)`,
`np.array([0, 1])`) and torch's (`torch.arange(3) / 30`), each read as the plain Python value it stands for, so a
setting given either way makes the same, equal config. Shared by the settings' groups (`config_groups`) and a mixture's
`Member` (`mixture`), which take the same kinds of values. A bool is never a number here (`True` is no batch size),
nor a number a bool (`1` is no `shuffle`).
Imports neither numpy nor torch: numpy's scalars are `numbers.Integral`/`numbers.Real`, an array or tensor has `ndim`
and `tolist()`."""

from __future__ import annotations

import math
import numbers
from typing import Any, Sequence

from .errors import ConfigError


def as_int(value: Any) -> Any:
    """`value` as a Python int where it is an integer (a numpy integer scalar too; never a bool), else as it is."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else value


def as_float(value: Any) -> Any:
    """`value` as a Python float where it is a real number (an int, a numpy scalar; never a bool), else as it is."""
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool) else value


def as_list(value: Any) -> Any:
    """A 1-D numpy array or torch tensor as a list of Python numbers (its `tolist()`), anything else as it is."""
    return value.tolist() if getattr(value, "ndim", None) == 1 and callable(getattr(value, "tolist", None)) else value


def as_bool(value: Any) -> Any:
    """`value` as a Python bool where it is a bool: numpy's `np.True_`, a 0-d bool array or tensor too; else as it
    is (an int is no bool here: `1` is no `shuffle`)."""
    if getattr(value, "ndim", None) == 0 and str(getattr(value, "dtype", "")) in ("bool", "torch.bool"):
        return bool(value.item())
    return value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def episode_indices(value: Any, member: str = "") -> tuple[int, ...]:
    """`episodes` (a list, tuple, range or any other non-string sequence, a 1-D numpy array or tensor) as a tuple of
    Python ints; `member`: the mixture member's error prefix."""
    items = as_list(value)
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise ConfigError(f"{member}`episodes` must be a list of episode indices (a list, tuple, range, or a 1-D numpy "
                          f"array or tensor of integers). Found: {value!r}")
    out = tuple(as_int(e) for e in items)
    bad = [e for e in out if not is_int(e)]
    if bad:
        raise ConfigError(f"{member}`episodes` must hold integer episode indices. Found: {bad[:5]}; pass the "
                          "episodes' `episode_index` values, e.g. [0, 1, 2]")
    return out


def offsets(key: Any, value: Any) -> tuple[float, ...]:
    """delta_timestamps[key]: a non-empty list of finite offsets in seconds (or a 1-D numpy array or tensor of them)
    as a tuple of Python floats."""
    items = as_list(value)
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence) or not items:
        raise ConfigError(f"delta_timestamps[{key!r}] must be a non-empty list of offsets in seconds (or a 1-D numpy "
                          f"array or tensor of them). Found: {value!r}")
    out = tuple(as_float(v) for v in items)
    for v in out:
        if not isinstance(v, float) or not math.isfinite(v):
            raise ConfigError(f"delta_timestamps[{key!r}] holds {v!r}: every offset must be a finite number of "
                              "seconds (e.g. -0.1, 0.0)")
    return out
