"""Host frames: torchcodec-decoded cameras of batches that land on the CPU, laid out by the workers, not by DALI.

On a node whose batches stay in host memory, DALI's graph would only lay the decoded frames out (HWC uint8 to
CHW, float32 in [0, 1]), on the same cores that decode them. So when no DALI image op is asked for (no resize,
crop or augmentation) such cameras skip the graph: a worker decodes a segment's frames and writes each
sample's frames straight into the batch's (B, T, 3, H, W) array in the caller's dtype and layout while the frame
is still in cache (gather and CHW layout in one cast copy, then scaling and any mean/std in place), into a
buffer of a `BufferPool` reused once the caller has dropped it. At hand-off the array becomes a tensor without
a copy. On the 2-core VM, AV1 640x480, batch 16, two cameras: 1.15x (float32) and 1.19x (uint8) the samples/s
of DALI's CPU crop_mirror_normalize doing that step, at the same or lower peak RSS
(benchmarks/results/cpu-2core-480p/host_frames.json).

With `memory_format="channels_last"` the buffer is (B, T, H, W, 3), the decoder's own order: the layout step
is then a plain copy instead of a strided byte transpose (0.03 against 0.21 ms a 480p uint8 frame on one
core), and the caller gets (B, T, 3, H, W) views of it. Channels-first, the decoded-frame cache keeps the frames
(3, H, W) (`Resolved.kept_chw`): the transpose is paid once as they are kept, and later epochs copy.

Two measured traps this module avoids: fresh batch-sized buffers (page faults cost more than the writing: 418
samples/s with them against 561 with reused ones), and torch ops on the worker threads (each starts an OpenMP
team on the cores the other workers decode on: 387 against 505 samples/s), hence numpy's single-threaded
ufuncs. Batches on a GPU, or with resize/crop/augmentation, keep the DALI route for these cameras (the layout
then runs on the GPU, or inside DALI's own image ops).
"""

from __future__ import annotations

import numpy as np

from .imageops import ImageOps


def host_dtype(image_ops: ImageOps) -> np.dtype:
    return np.dtype(np.uint8 if image_ops.dtype == "uint8" else np.float32)


def host_shape(image_ops: ImageOps, batch: int, steps: int, height: int, width: int) -> tuple[int, ...]:
    """The buffer of a camera's batch: (B, T, 3, H, W), or (B, T, H, W, 3) for `channels_last` (the caller still
    sees (B, T, 3, H, W): `to_output` hands over a permuted view)."""
    return (batch, steps, height, width, 3) if image_ops.channels_last else (batch, steps, 3, height, width)


def scatter_frames(out: np.ndarray, frames: np.ndarray | list[np.ndarray], members: list[int], wanted: np.ndarray,
                   idx: list[np.ndarray], image_ops: ImageOps, chw: bool = False) -> None:
    """Write each sample's frames of one decoded segment into `out` (`host_shape`) as `image_ops` asks: CHW (or
    HWC as decoded, for `channels_last`), uint8 as decoded or float32 in [0, 1], then (x - mean) / std when given.

    `frames`: the segment's decoded frames (N, H, W, 3) uint8 (or a list of N (H, W, 3)), one per index of
    `wanted` (sorted, distinct); (N, 3, H, W) where `chw` (the decoded-frame cache's order, `Resolved.kept_chw`);
    `members`: the batch positions whose frames come from this segment; `idx[j]`: sample j's frame indices (T
    of them, repeats allowed)."""
    put = _putter(out.dtype, image_ops, chw)
    for j in members:
        for t, k in enumerate(np.searchsorted(wanted, idx[j])):
            put(out[j, t], frames[k])


def lay_out(out: np.ndarray, pictures: list[np.ndarray], image_ops: ImageOps, chw: bool = False) -> None:
    """Write a whole batch's frames into `out` (`host_shape`) as `scatter_frames` does: `pictures` (H, W, 3) uint8
    ((3, H, W) where `chw`), sample after sample, step after step (a batch whose frames the decoded-frame cache all
    holds). uint8 in the buffer's own order is one copy of them all; otherwise a copy a frame, each scaled while in
    cache."""
    flat = out.reshape(-1, *out.shape[2:])
    if (image_ops.channels_last or chw) and out.dtype == np.uint8:
        np.stack(pictures, out=flat)
        return
    put = _putter(out.dtype, image_ops, chw)
    for dst, picture in zip(flat, pictures):
        put(dst, picture)


def _putter(dtype: np.dtype, image_ops: ImageOps, chw: bool = False):
    """(dst, frame) -> None: one (H, W, 3) uint8 frame ((3, H, W) where `chw`) written into one frame of a host buffer
    of `dtype`."""
    # CHW from HWC is a strided copy of single bytes (~0.21 ms a 480p frame on one core, a fifth of an AV1
    # decode); channels_last keeps the decoder's HWC order, a plain copy (~0.03 ms), as does a frame kept CHW.
    transpose = not image_ops.channels_last and not chw
    per_channel = (-1,) if image_ops.channels_last else (-1, 1, 1)  # a channel's value, broadcast over a frame
    scale = shift = divisor = None
    if dtype != np.uint8:
        if image_ops.mean is not None and image_ops.std is not None:  # x / 255 / std - mean / std, per channel
            std = np.asarray(image_ops.std, np.float32).reshape(per_channel)
            scale = np.float32(1.0 / 255.0) / std
            shift = np.asarray(image_ops.mean, np.float32).reshape(per_channel) / std
        else:
            # lerobot's `frames.float() / 255`, bit for bit: a multiply by float32(1 / 255) rounds 126 of the 256
            # values one ulp away from it. The division costs ~7 % more than the multiply on the layout alone
            # (0.49 against 0.46 ms a 480p frame: benchmarks/layout_cost.py), ~1 % of a worker's time.
            divisor = np.float32(255.0)

    def put(dst: np.ndarray, frame: np.ndarray) -> None:
        # Into float32: a cast copy, then scaling in place: 0.30 ms a 480p frame (one thread, destination not in
        # cache) against 0.44 for one multiply casting its strided uint8 input, which numpy buffers; in the loader
        # +1-5 % samples/s (AV1, 3 alternated pairs).
        dst[...] = frame.transpose(2, 0, 1) if transpose else frame
        if divisor is not None:
            np.divide(dst, divisor, out=dst)
        if scale is not None:
            np.multiply(dst, scale, out=dst)
        if shift is not None:
            np.subtract(dst, shift, out=dst)
    return put


def to_output(frames: np.ndarray, squeeze: bool, channels_last: bool = False):
    """The caller's tensor (B, T, 3, H, W) on a batch's frames (`host_shape`), without a copy: (B, 3, H, W) when
    `squeeze` (a camera with one step, as lerobot returns it); a permuted view of the HWC buffer for
    `channels_last`. The tensor keeps the array referenced, so its `BufferPool` hands the buffer out again only
    once the caller has dropped the tensor and its views."""
    import torch

    tensor = torch.from_numpy(frames[:, 0] if squeeze else frames)
    return tensor.movedim(-1, -3) if channels_last else tensor
