"""What the DALI graph does to every camera image after decoding: resize, centre crop, dtype and scaling.

A validated value (no DALI import), applied in `graph.pipeline.build_pipeline` on the device the frames are on (the
GPU on the NVDEC route): the preprocessing a policy would otherwise run in its forward pass.
Order: resize to `resize` (H, W) → centre crop to `crop` (H, W) → CHW layout (kept HWC when `channels_last`:
the loader then hands each frame over as a (3, H, W) view of HWC memory) → dtype: uint8 as decoded, or float32
scaled to [0, 1] and, with `mean`/`std` (per channel, in [0, 1] units), (x - mean) / std.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..errors import ConfigError


def _pair(name: str, value) -> tuple[int, int] | None:
    if value is None:
        return None
    try:
        h, w = (int(v) for v in value)
    except (TypeError, ValueError):
        raise ConfigError(f"`{name}` must be (height, width) in pixels. Found: {value!r}") from None
    if h <= 0 or w <= 0:
        raise ConfigError(f"`{name}` must be positive (height, width). Found: {value!r}")
    return h, w


def _channels(name: str, value) -> tuple[float, ...] | None:
    if value is None:
        return None
    values = (float(value),) if isinstance(value, (int, float)) else tuple(float(v) for v in value)
    if len(values) not in (1, 3):
        raise ConfigError(f"`{name}` must be one number or one per RGB channel (3). Found: {value!r}")
    return values


@dataclass(frozen=True)
class ImageOps:
    dtype: str = "float32"
    resize: tuple[int, int] | None = None
    crop: tuple[int, int] | None = None
    mean: tuple[float, ...] | None = None
    std: tuple[float, ...] | None = None
    channels_last: bool = False

    @classmethod
    def make(cls, dtype: str = "float32", resize: Sequence[int] | None = None, crop: Sequence[int] | None = None,
             mean=None, std=None, channels_last: bool = False) -> "ImageOps":
        if dtype not in ("float32", "uint8"):
            raise ConfigError(f"`image_dtype` must be 'float32' or 'uint8'. Found: {dtype!r}")
        ops = cls(dtype, _pair("resize", resize), _pair("crop", crop), _channels("mean", mean), _channels("std", std),
                  channels_last)
        if (ops.mean is None) != (ops.std is None):
            raise ConfigError("`mean` and `std` go together: give both (e.g. ImageNet's (0.485, 0.456, 0.406) and "
                              f"(0.229, 0.224, 0.225)) or neither. Found: mean={mean!r}, std={std!r}")
        if ops.std is not None and any(s <= 0 for s in ops.std):
            raise ConfigError(f"`std` must be > 0 per channel. Found: {std!r}")
        if ops.mean is not None and dtype == "uint8":
            raise ConfigError("`mean`/`std` normalisation gives floats: use image_dtype='float32' with them")
        return ops

    def check_camera(self, key: str, height: int, width: int) -> None:
        """A crop larger than the (resized) image is an error naming the camera."""
        h, w = self.resize or (height, width)
        if self.crop and (self.crop[0] > h or self.crop[1] > w):
            raise ConfigError(f"`crop` {self.crop} is larger than camera {key!r}'s {'resized ' if self.resize else ''}"
                              f"image ({h}, {w}); crop at most ({h}, {w}) or resize first")

    def out_shape(self, height: int, width: int) -> tuple[int, int, int]:
        h, w = self.crop or self.resize or (height, width)
        return 3, h, w
