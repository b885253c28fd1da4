"""What a `Source` hands DALI: one `Output` per key of the loader's batches, and each batch as DALI takes it.

A batch's tensors are split per sample by DALI (the batch axis is DALI's): a camera's frames go as HWC, or FHWC for
a camera with `delta_timestamps` (the loader's (3, H, W) / (T, 3, H, W) samples, channels last: a view, no copy,
with the source's default `memory_format="channels_last"`), every other tensor as the loader shapes it. A tensor on a
CUDA device stays there (DALI reads it in place and copies it on the device); the others are numpy views of the
loader's host tensors. `<camera>_rand` outputs carry the plan's AUGMENT_RANDOMS uniform numbers per sample. Values
that are not tensors (`task`, text columns) have no DALI form: `skipped` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ConfigError

RAND = "_rand"  # suffix of a camera's random-numbers output
FRAMES, TABLE, RANDOMS = "frames", "table", "randoms"
# numpy's name of a dtype -> DALI's `types` name
DALI_TYPES = {"uint8": "UINT8", "uint16": "UINT16", "int8": "INT8", "int16": "INT16", "int32": "INT32",
              "int64": "INT64", "float16": "FLOAT16", "float32": "FLOAT", "float64": "FLOAT64", "bool": "BOOL"}


@dataclass(frozen=True)
class Output:
    """One input of the user's pipeline: its `name` (the batch's key), `kind` (frames, table or randoms), the numpy
    `dtype` and `ndim` of one sample, its DALI `layout` ("HWC", "FHWC", or "" for a table) and `device` ("cpu" or
    "gpu": where DALI's external source takes it)."""

    name: str
    kind: str
    dtype: np.dtype
    ndim: int
    layout: str
    device: str

    @property
    def dali_type(self) -> Any:
        from nvidia.dali import types

        return getattr(types, DALI_TYPES[self.dtype.name])


def _numpy_dtype(key: str, tensor: Any) -> np.dtype:
    name = str(tensor.dtype).removeprefix("torch.")
    if name not in DALI_TYPES:
        raise ConfigError(f"batch key {key!r} holds {tensor.dtype}, which DALI's external source does not take "
                          f"(it takes {sorted(DALI_TYPES)}); leave that key out with read(source, keys=[...])")
    return np.dtype(name)


def outputs_of(batch: Mapping[str, Any], cameras: Sequence[str]) -> tuple[list[Output], list[str]]:
    """The outputs a batch of the loader gives (its tensors, in its order, then each camera's random numbers) and
    the keys left out (values that are not tensors)."""
    outs: list[Output] = []
    skipped: list[str] = []
    for key, value in batch.items():
        if not hasattr(value, "dim"):
            skipped.append(key)
            continue
        device = "gpu" if value.device.type == "cuda" else "cpu"
        if key in cameras:
            if value.dim() not in (4, 5):
                raise ConfigError(f"camera {key!r} comes as {tuple(value.shape)}: expected (B, C, H, W) or "
                                  "(B, T, C, H, W) frames")
            frames = value.dim() == 5
            outs.append(Output(key, FRAMES, _numpy_dtype(key, value), 4 if frames else 3, "FHWC" if frames else "HWC",
                               device))
        else:
            outs.append(Output(key, TABLE, _numpy_dtype(key, value), value.dim() - 1, "", device))
    outs += [Output(key + RAND, RANDOMS, np.dtype(np.float32), 1, "", "cpu") for key in cameras if key in batch]
    return outs, skipped


def channels_last(frames: Any) -> Any:
    """(B, C, H, W) -> (B, H, W, C), (B, T, C, H, W) -> (B, T, H, W, C), contiguous (a view where the memory is
    stored channels last already)."""
    order = (0, 2, 3, 1) if frames.dim() == 4 else (0, 1, 3, 4, 2)
    return frames.permute(*order).contiguous()


def dali_batch(out: Output, value: Any) -> Any:
    """One output's batch as DALI's external source takes it: a CUDA tensor as it is (DALI reads it through
    `__cuda_array_interface__`, on torch's current stream), a host tensor as a numpy view."""
    if out.kind == RANDOMS:
        return value
    if out.kind == FRAMES:
        value = channels_last(value)
    if out.device == "gpu":
        return value.contiguous()
    return value.detach().cpu().contiguous().numpy()


def check_batch(outs: Sequence[Output], batch: Mapping[str, Any]) -> None:
    """Every output's key in `batch`, on its device (the loader's batches keep one form: this only fails on a bug)."""
    for out in outs:
        if out.kind == RANDOMS:
            continue
        value = batch.get(out.name)
        if value is None or ("gpu" if value.device.type == "cuda" else "cpu") != out.device:
            raise ConfigError(f"the loader's batch changed form: key {out.name!r} is "
                              f"{'missing' if value is None else 'on ' + str(value.device)} where the pipeline "
                              f"declared it on {out.device}; report it with the loader's settings")
