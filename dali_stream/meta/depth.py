"""Depth cameras as lerobot 0.6.1 records them: a depth map quantised to 12-bit codes and encoded as a grey HEVC
video (lossless, `gray12le`), the quantiser's parameters in the feature's `info` (`video.depth_min`, `video.depth_max`,
`video.shift`, `video.use_log`), `is_depth_map: true` marking it, `depth_unit` the unit its stats were recorded in.

`DepthCoding.of(feature)` reads that (None: not a depth camera, lerobot's rule); `DepthCoding.write` turns decoded
codes into depth in millimetres or metres as lerobot's `dequantize_depth` returns them: a code's place on the
linear or logarithmic scale between depth_min and depth_max (metres, `shift` added inside the logarithm), clipped to
that range; millimetres are then rounded to whole ones. There are 4,096 codes: each coding's depth of every code is
computed once, by lerobot's own torch arithmetic (float32, in its order: numpy's `exp` rounds a third of the values
one ulp away from torch's, and a rounding to millimetres then and again), and a frame's codes are looked up in it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..config import DepthOutputUnit

CODE_MAX = 4095  # 12-bit codes
MM_PER_M = 1000.0
PIX_FMT = "gray12le"  # the stream's pixels as lerobot writes and reads them


def is_depth(feature: Mapping[str, Any]) -> bool:
    """lerobot's test of a depth feature: `info.is_depth_map`, or the older `video.is_depth_map` in `info` or in
    `video_info`."""
    info, video_info = feature.get("info") or {}, feature.get("video_info") or {}
    return bool(info.get("is_depth_map") or info.get("video.is_depth_map") or video_info.get("video.is_depth_map"))


@dataclass(frozen=True)
class DepthCoding:
    """How a depth camera's codes map to depth (module doc); `unit`: the unit its stats were recorded in (None:
    not recorded, stats left as they are)."""

    depth_min: float = 0.01  # metres at code 0 (lerobot's defaults)
    depth_max: float = 10.0  # metres at CODE_MAX
    shift: float = 3.5  # metres added inside the logarithm
    use_log: bool = True
    unit: str | None = None

    @classmethod
    def of(cls, feature: Mapping[str, Any]) -> "DepthCoding | None":
        if not is_depth(feature):
            return None
        info = feature.get("info") or {}
        def given(name: str, default: Any) -> Any:
            value = info.get(f"video.{name}")
            return default if value is None else type(default)(value)

        coding = cls(given("depth_min", cls.depth_min), given("depth_max", cls.depth_max), given("shift", cls.shift),
                     given("use_log", cls.use_log), info.get("depth_unit"))
        if coding.use_log and coding.depth_min + coding.shift <= 0:
            raise ValueError(f"depth_min + shift must be positive for a logarithmic scale. Found: "
                             f"{coding.depth_min} + {coding.shift}")
        return coding

    def _ends(self) -> tuple[float, float]:
        """The scale's values at code 0 and CODE_MAX: metres, or their logarithms (plus `shift`)."""
        if self.use_log:
            return math.log(self.depth_min + self.shift), math.log(self.depth_max + self.shift)
        return self.depth_min, self.depth_max

    def write(self, codes: np.ndarray, out: np.ndarray, unit: DepthOutputUnit = "mm") -> None:
        """Depth of `codes` (any integer array, values 0..CODE_MAX) into `out` (float32, the same shape)."""
        np.take(self.table(unit), codes, out=out, mode="clip")

    def table(self, unit: DepthOutputUnit = "mm") -> np.ndarray:
        """The depth of each code 0..CODE_MAX in `unit` (float32), as lerobot 0.6.1's `dequantize_depth` computes it
        on a tensor (its torch path); computed once per coding and unit."""
        return _table(self, unit)

    def stats_factor(self, unit: DepthOutputUnit) -> float:
        """What the recorded stats are multiplied by to be in `unit` (lerobot rescales all but `count`)."""
        if self.unit is None or self.unit == unit:
            return 1.0
        return MM_PER_M if self.unit == "m" else 1.0 / MM_PER_M

    def codes(self, depth: np.ndarray, unit: DepthOutputUnit = "mm") -> np.ndarray:
        """The codes of `depth` in `unit` (the recorder's quantiser: the sample writer's depth cameras)."""
        metres = np.asarray(depth, np.float64) / (MM_PER_M if unit == "mm" else 1.0)
        low, high = self._ends()
        norm = ((np.log(metres + self.shift) if self.use_log else metres) - low) / (high - low)
        return np.clip(np.rint(norm * CODE_MAX), 0, CODE_MAX).astype(np.uint16)


# A table's metres may differ from the exact scale's by this much of a code's step (float32 arithmetic: 0.0007 at
# most for the codings the tests use); more is a fault of the arithmetic, not its rounding.
TABLE_TOLERANCE_CODES = 0.01


@functools.lru_cache(maxsize=64)
def _table(coding: DepthCoding, unit: str) -> np.ndarray:
    """`DepthCoding.table` (a frozen coding: its own cache key): lerobot's torch arithmetic on the codes 0..CODE_MAX
    (read-only).

    The metres are checked against the scale computed in float64 before they are kept: in two test runs of many, a
    table came out with half its codes up to 0.4 of a code's step off (torch splits the `exp` of 4,096 values between
    two threads; the cause is not found), which would have put wrong depth into every frame of that coding. Such a
    table is computed again, with a warning; a second one as wrong is an error."""
    for attempt in range(2):
        buf = _metres(coding)
        errors = _errors(buf.numpy(), coding)
        if errors.max() <= TABLE_TOLERANCE_CODES:
            break
        said = f"the depth table of {coding} came out up to {errors.max():.3f} of a code's step off the float64 scale"
        if attempt:
            raise RuntimeError(f"{said} twice: torch's float32 arithmetic does not compute right in this process; "
                               "report it with the output of `dali-stream diagnose`")
        import warnings

        off = np.flatnonzero(errors > TABLE_TOLERANCE_CODES)
        warnings.warn(f"{said} ({len(off)} codes, {off.min()}..{off.max()}); computed again", RuntimeWarning,
                      stacklevel=2)
    if unit == "mm":
        buf.mul_(MM_PER_M).round_().clamp_(0.0, 65535.0)
    out = buf.numpy()
    out.flags.writeable = False
    return out


def _metres(coding: DepthCoding):
    """lerobot 0.6.1's `dequantize_depth` on the codes 0..CODE_MAX: a float32 tensor of metres, in its order."""
    import torch

    low, high = coding._ends()
    buf = torch.arange(CODE_MAX + 1, dtype=torch.float32)
    buf.mul_((high - low) / CODE_MAX).add_(low)
    if coding.use_log:
        buf.exp_().sub_(coding.shift)
    return buf.clamp_(coding.depth_min, coding.depth_max)


def _errors(metres: np.ndarray, coding: DepthCoding) -> np.ndarray:
    """Each code's metres' distance from the scale computed in float64, in steps of the scale at that code."""
    low, high = coding._ends()
    x = np.arange(CODE_MAX + 1) * ((high - low) / CODE_MAX) + low
    exact = np.exp(x) - coding.shift if coding.use_log else x
    slope = (high - low) / CODE_MAX * (np.exp(x) if coding.use_log else 1.0)
    return np.abs(metres - np.clip(exact, coding.depth_min, coding.depth_max)) / slope

