"""A batch camera's frames decoded on the CPU from its segments (torchcodec through `decode.cpu`): each distinct
segment once, frames the decoded-frame cache holds read instead of decoded, as one array per group of samples or
laid out straight into host-frame buffers (`graph.host`)."""

from __future__ import annotations

from typing import Any, cast

import numpy as np

from ..decode.cpu import torchcodec_tensor
from ..decode.frames import FrameCache
from .buffers import BufferPool
from .host import host_dtype, host_shape, scatter_frames
from .imageops import ImageOps


def decode_segments(segs, idx, cache, frames: FrameCache | None = None, keys: list | None = None):
    """Decode each distinct segment of a batch's camera once (its distinct frames in one call); samples without a
    segment (None: a mixture's member lacking the camera) are skipped. With `frames` (the decoded-frame cache) and
    `keys` (per sample, the cache's name of each of its frames: `frame_keys`), frames found there are not decoded
    and those decoded are kept there.

    Yields (members, wanted, pixels, decoded): the batch positions using the segment, the sorted distinct frame
    indices, their pixels (len(wanted), H, W, 3) uint8 (an array, or a list of (H, W, 3) arrays where some came
    from the cache) and how many of them were decoded."""
    by_seg: dict[int, tuple[Any, list[int]]] = {}
    for j, seg in enumerate(segs):
        if seg is None:
            continue
        by_seg.setdefault(seg.uid, (seg, []))[1].append(j)
    for seg, members in by_seg.values():
        wanted = np.unique(np.concatenate([idx[j] for j in members]))
        if frames is None or keys is None:
            yield members, wanted, torchcodec_tensor(seg, wanted, cache).numpy(), len(wanted)
            continue
        name: dict[int, tuple[str, int]] = {}
        for j in members:
            name.update(zip(idx[j].tolist(), keys[j]))
        names = [name[w] for w in wanted.tolist()]
        found = [frames.get(k) for k in names]
        missing = [n for n, f in enumerate(found) if f is None]
        if missing:
            decoded = torchcodec_tensor(seg, wanted[missing], cache).numpy()
            frames.put([names[n] for n in missing], decoded)
            if len(missing) == len(wanted):
                yield members, wanted, decoded, len(missing)
                continue
            for n, picture in zip(missing, decoded):
                found[n] = picture
        yield members, wanted, found, len(missing)  # a list: the frames are not copied into one array first


def frame_keys(segs, idx, frames: FrameCache) -> list:
    """Per sample, the decoded-frame cache's name of each frame `idx[j]` of `segs[j]` (None without a segment):
    its video file and file time, whatever segment or piece it was cut in."""
    return [None if seg is None else [frames.key(seg.source, t) for t in seg.pts_s[i].tolist()]
            for seg, i in zip(segs, idx)]


def decode_grouped(segs, idx, cache, blank: np.ndarray | None = None, frames: FrameCache | None = None,
                   keys: list | None = None) -> tuple[list[np.ndarray], int]:
    """Per sample, its frames (T, H, W, 3) uint8 (for DALI's graph), and how many frames were decoded; `blank`
    for a sample without a segment; `frames`, `keys`: the decoded-frame cache (`decode_segments`)."""
    out: list[np.ndarray | None] = [blank if seg is None else None for seg in segs]
    decoded = 0
    for members, wanted, pixels, n in decode_segments(segs, idx, cache, frames, keys):
        decoded += n
        for j in members:
            at = np.searchsorted(wanted, idx[j])
            out[j] = pixels[at] if isinstance(pixels, np.ndarray) else np.stack([pixels[k] for k in at])
    return cast("list[np.ndarray]", out), decoded  # every sample's slot was filled above


def decode_host(segs, idx, cache, pool: BufferPool, image_ops: ImageOps, size: tuple[int, int] | None = None,
                frames: FrameCache | None = None, keys: list | None = None):
    """The batch's frames of one camera as one array of `pool` (`host_shape`), laid out as `image_ops` says
    (host frames, `graph.host`), and how many frames were decoded. `size`: (H, W) of the camera, for a batch
    none of whose samples has a segment (a mixture's members that lack it: zeros); `frames`, `keys`: the
    decoded-frame cache (`decode_segments`)."""
    out = None
    if size is not None and all(seg is None for seg in segs):
        out = pool.take(host_shape(image_ops, len(segs), len(idx[0]), *size), host_dtype(image_ops))
    decoded = 0
    for members, wanted, pixels, n in decode_segments(segs, idx, cache, frames, keys):
        if out is None:
            h, w, _ = pixels[0].shape
            out = pool.take(host_shape(image_ops, len(segs), len(idx[0]), h, w), host_dtype(image_ops))
        scatter_frames(out, pixels, members, wanted, idx, image_ops)
        decoded += n
    if out is not None:
        for j, seg in enumerate(segs):
            if seg is None:  # a mixture's member without the camera: zeros (a reused buffer holds old frames)
                out[j] = 0
    return out, decoded
