"""What failed when DALI's video decoder fails on a batch without naming a sample: this GPU (`explain_device`), a
stream DALI cannot open, a frame asked past a stream's end, or a sample torchcodec also fails on; each named by
camera and episode, with the fix. Read from the batches in flight (`Prepared`), the builder's routes and catalog."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ..decode.cpu import torchcodec_frames
from ..decode.errors import classify, explain_device, stream_format
from ..errors import DaliStreamError, DecodeError
from ..fetch.segments import FIX_FILE

if TYPE_CHECKING:  # the builder hands its batches in flight; nothing here builds one
    from .batches import Prepared


def explain(builder, pending: list[Prepared], exc: BaseException, node=None) -> DaliStreamError:
    """DALI's decoder failed on one of `pending` (in flight, oldest first) without naming a sample: say what
    failed (this GPU, or one stream), which camera and which episode, and the fix."""
    failure = classify(str(exc))
    dali_keys = builder.dali_keys
    nvdec = {k: [seg for b in pending for seg in b.asked.get(k, ([], []))[0]]
             for k, r in builder.routes.items() if r.dali_gpu}
    found = explain_device(failure, nvdec, node)
    if found is not None:
        return found
    if failure.kind == "out-of-bounds":
        found = _out_of_bounds(builder, pending, failure)
        if found is not None:
            return found
    found = _unopened(builder, pending, failure) if failure.kind == "unopened" else None
    found = found or _check_asked_frames(builder, pending, failure)
    if found is not None:
        return found
    episodes = builder.catalog.episodes_text([p for b in pending for p in b.plan.episodes])
    if not dali_keys:
        return DecodeError(f"DALI pipeline failed: {failure.line}")
    return DecodeError(
        f"DALI's video decoder failed ({failure.line}) on a batch with {episodes} of cameras "
        f"{dali_keys}, although torchcodec decodes every frame those batches asked for: the failure is "
        f"DALI's, not the data's. Route the cameras through torchcodec with "
        f"decode={dict.fromkeys(dali_keys, 'cpu')!r}, and report it with the output of "
        "`dali-stream diagnose DATASET --decode-test --json`")

def _unopened(builder, pending: list[Prepared], failure) -> DecodeError | None:
    """DALI could not open a stream (`decode.errors`, kind "unopened"): the first clip or joined stream handed
    to it that FFmpeg cannot open either, or whose codec DALI's CPU decoder lacks (the bytes DALI got, not the
    segment they were cut from). NVDEC's refusals were asked before (`explain_device`)."""
    for prepared in pending:
        for key in prepared.asked:
            for g, data in enumerate(prepared.arrays[builder._slot[f"{key}@encoded"]]):
                fmt = stream_format(np.asarray(data).tobytes())
                n = prepared.members
                eps = builder.catalog.episodes_text(prepared.plan.episodes[g * n:(g + 1) * n])
                where = f"camera {key!r}, {eps}"
                if fmt is None:
                    return DecodeError(
                        f"DALI's video decoder could not open the stream cut for {where} ({failure.line}), and "
                        f"FFmpeg cannot open it either: the cut is wrong, not the file. Decode the camera with "
                        f"torchcodec, decode={{{key!r}: 'cpu'}}, and report it with "
                        "`dali-stream diagnose DATASET --decode-test --json`")
                decoder = builder.routes[key]
                if not decoder.takes(fmt.codec):
                    member = builder.catalog.locate(int(prepared.plan.episodes[g * n]))[0]
                    claimed = member.camera(key).codec
                    return DecodeError(
                        f"DALI's CPU decoder could not open {where}: the stream is {fmt.describe()}, and it "
                        f"decodes only {', '.join(sorted(decoder.codecs or ()))} ({failure.line}); meta/info.json "
                        f"says {claimed!r}. Fix info.json's video.codec for the camera, or decode it with "
                        f"torchcodec: decode={{{key!r}: 'cpu'}}")
    return None

def _check_asked_frames(builder, pending: list[Prepared], failure) -> DecodeError | None:
    """The frames the failed batches asked of their DALI-routed cameras, decoded by torchcodec from their
    segments, each frame's time checked: the first that fails names its episode and camera. Only those
    frames: a whole segment of an hour-long episode would take minutes."""
    for prepared in pending:
        for key, (segs, asked) in prepared.asked.items():
            by_seg: dict[int, tuple[Any, list[np.ndarray]]] = {}
            for seg, idx in zip(segs, asked):
                by_seg.setdefault(seg.uid, (seg, []))[1].append(np.asarray(idx))
            for seg, parts in by_seg.values():
                try:
                    torchcodec_frames(seg, np.unique(np.concatenate(parts)))
                except DecodeError as cpu_exc:
                    return DecodeError(f"DALI's video decoder failed ({failure.line}) on episode {seg.episode}, "
                                       f"camera {key!r}; the CPU check agrees: {cpu_exc}")
    return None

def _out_of_bounds(builder, pending: list[Prepared], failure) -> DecodeError | None:
    """The sample that asked DALI for frame `failure.frame` of a stream DALI found shorter."""
    for prepared in pending:
        for key in builder.dali_keys:
            frames = prepared.arrays[builder._slot[f"{key}@frames"]]
            for j, idx in enumerate(frames):
                if failure.frame is not None and failure.frame in np.asarray(idx).tolist():
                    if prepared.members > 1:
                        return _joined_out_of_bounds(builder, prepared, key, j, failure)
                    seg = prepared.asked[key][0][j]
                    return DecodeError(
                        f"DALI's video decoder found {failure.frames} frames in the clip of episode "
                        f"{seg.episode}, camera {key!r} (cut from {seg.source}) but frame {failure.frame} was "
                        "asked for: the file's index lists more frames than the stream decodes. The file is "
                        f"damaged: {FIX_FILE}; or decode the camera with torchcodec: decode={{{key!r}: 'cpu'}}")
    return None

def _joined_out_of_bounds(builder, prepared: Prepared, key: str, group: int, failure) -> DecodeError:
    """A joined stream (`graph.joined`) decoded shorter than its clips' sample tables say: name its episodes,
    and whether the clips decode apart (then joining them is what failed)."""
    n = prepared.members
    segs = prepared.asked[key][0][group * n:(group + 1) * n]
    episodes = sorted({seg.episode for seg in segs})
    what = (f"DALI's video decoder found {failure.frames} frames in a stream joining the clips of episodes "
            f"{episodes}, camera {key!r}, where frame {failure.frame} was asked for")
    for seg in {seg.uid: seg for seg in segs}.values():
        try:
            torchcodec_frames(seg, np.arange(len(seg.pts_s)))
        except DecodeError as exc:
            return DecodeError(f"{what}; the CPU check finds a damaged segment: {exc}")
    return DecodeError(f"{what}, although every one of those segments decodes apart: joining these clips is what "
                       "failed. Decode one clip per sample with join_streams=0, and report it with "
                       "`dali-stream diagnose DATASET --decode-test --json`")
