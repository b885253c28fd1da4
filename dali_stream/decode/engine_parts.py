"""What both forms of the open-decoder engine do alike (`decode.engine`'s threads, `decode.process_engine`'s
processes): a batch camera's samples split into chunks in order, the segments' sizes checked against the camera's,
the errors that name a dropped picture, a failing segment or frames of mixed sizes, and CUDA frames joined on the
hand-off stream."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from ..errors import DecodeError
from ..fetch.indexes import check_size
from ..fetch.segments import decode_error
from .feed import Feed, build_feed


def hand_over(stream: Any, parts: list) -> Any:
    """CUDA frames joined into one tensor on the engine's hand-off `stream`, which is the stream DALI copies them on
    (`graph.pipeline`: the external source's `cuda_stream`): the join, DALI's copy and any later reuse of the memory
    are queued on one stream in that order, and nothing waits on the legacy default stream (where the training step
    runs). Every part, made on a decode thread's stream (complete: `finish`) or copied there from a decode process's
    memory (`ProcessEngine._own`), is marked as used on the hand-off stream, so the caching allocator cannot give its memory to the next decode before
    the join has read it; the joined tensor is allocated on the hand-off stream itself."""
    import torch

    with torch.cuda.stream(stream):
        joined = parts[0] if len(parts) == 1 else torch.cat(parts)
    for part in parts:
        if part.is_cuda:
            part.record_stream(stream)
    return joined


def split(n: int, parts: int) -> list[np.ndarray]:
    """A batch's `n` samples of a camera as at most `parts` contiguous chunks, in order (one per thread or process)."""
    return [c for c in np.array_split(np.arange(n), min(parts, n)) if len(c)]


def check_sizes(sizes: Mapping[str, tuple[int, int] | None], camera: str, segs: list) -> None:
    """Every segment's picture size (its MP4 sample entry) is the camera's (`sizes`, from meta/info.json), by the rule
    the loader checks each file by as it indexes it (`fetch.indexes.check_size`): an NVDEC decoder reconfigured for
    another size would scale its pictures to the first one's without a word."""
    for seg in segs:
        check_size(seg.size(), sizes.get(camera), camera, seg.source, lambda: [seg.episode])


def mixed_sizes(camera: str, segs: list, sizes: list) -> DecodeError:
    return DecodeError(f"camera {camera!r}: the episodes {sorted({s.episode for s in segs})} decode to frames of "
                       f"different sizes {sizes}; every file of a camera must have one size")


def culprit(make: Callable[[str, str], Any], route: Any, camera: str, segs: list, idx: list[np.ndarray],
            exc: BaseException) -> DecodeError:
    """The segment whose packets a decoder fails on, each decoded alone on a fresh decoder (`make`)."""
    for seg in {s.uid: s for s in segs}.values():
        parts = [(s, i) for s, i in zip(segs, idx) if s.uid == seg.uid]
        fresh = make(seg.codec, camera)
        try:
            fresh.decode(build_feed(parts))
        except Exception as alone:  # noqa: BLE001 - this segment is the one
            return decode_error(seg, f"the open-decoder engine ({route})", alone)
        finally:
            fresh.close()
    return failed(route, camera, segs, f"fed together ({type(exc).__name__}: {exc}), although each decodes alone: "
                                       "feeding them back to back is what failed")


def failed(route: Any, camera: str, segs: list, why: str) -> DecodeError:
    """The engine (`route`, with how it runs) failed on a chunk of `camera` for a reason it cannot pin on one
    segment: the episodes, the files, why, and the way round."""
    return DecodeError(
        f"the open-decoder engine ({route}) failed on camera {camera!r}, episodes {sorted({s.episode for s in segs})} "
        f"(cut from {sorted({s.source for s in segs})}) {why}. Decode the camera with torchcodec, "
        f"decode={{{camera!r}: 'cpu'}}, and report it with the output of `dali-stream verify DATASET --decode`")


def missing_error(route: Any, camera: str, segs: list, idx: list[np.ndarray], feed: Feed,
                  missing: np.ndarray) -> DecodeError:
    """An asked picture the decoder never handed back: name the sample's episode, frames and file."""
    lost = set(np.asarray(missing).tolist())
    for seg, steps, asked in zip(segs, idx, feed.asked):
        gone = [int(f) for f, t in zip(np.asarray(steps).tolist(), asked.tolist()) if t in lost]
        if gone:
            return DecodeError(
                f"the open-decoder engine ({route}) got no picture for frames {sorted(set(gone))} of "
                f"episode {seg.episode}, camera {camera!r} (cut from {seg.source}): the decoder dropped them, so "
                f"they never reach training. Decode the camera with torchcodec, decode={{{camera!r}: 'cpu'}}, "
                "and report it with the output of `dali-stream verify DATASET --decode`")
    raise AssertionError("missing pictures belong to no sample")  # Feed.missing only lists asked times
