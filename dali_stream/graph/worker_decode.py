"""A batch camera's frames decoded on the CPU from its segments (torchcodec through `decode.cpu`, or DALI's CPU
decoder on the workers, `graph.dali_on_workers`): each distinct segment once, frames the decoded-frame cache holds read
instead of decoded, as one array per group of samples or laid out straight into host-frame buffers (`graph.host`).
The cache itself is not reached from here: the frames decoded for named samples are handed to a `Keep`, which a
cached camera's batch carries (`graph.sources.CameraBatch.keep`)."""

from __future__ import annotations

from typing import Any, Callable, Iterable, NamedTuple, cast

import numpy as np

from ..decode.cpu import torchcodec_tensor
from ..decode.open_episodes import AskedBy, EpisodeFrames
from .buffers import BufferPool
from .host import host_dtype, host_shape, lay_out, scatter_frames
from .imageops import ImageOps

# Where a source reports the frames it decoded of named samples: (names, frames), frame n under names[n] (the
# decoded-frame cache's `put`, handed over by `graph.sources.CachedFrames`).
Keep = Callable[[list, list], None]


class Held:
    """Stands in for a sample's segment when the decoded-frame cache holds each frame it shows (`held_samples`):
    nothing to fetch, cut or decode. `pictures`: its frames in order, uint8 each as the cache keeps them ((H, W, 3),
    or (3, H, W): `Resolved.kept_chw`); the sample's frame indices are then 0..T-1 (`Locator.locate`)."""

    def __init__(self, pictures: list[np.ndarray]) -> None:
        self.pictures = pictures
        self.uid = self


def held_samples(cached: list | None) -> list[Held | None] | None:
    """Per sample, a `Held` where the cache found every frame it shows (`FrameCache.look`), else None."""
    if cached is None:
        return None
    return [Held(c[1]) if c is not None and all(f is not None for f in c[1]) else None for c in cached]


def decode_segments(segs, idx, cache, keep: Keep | None = None, cached: list | None = None,
                    resize: Callable | None = None, decode: Callable | None = None,
                    episodes: EpisodeFrames | AskedBy | None = None, chw: bool = False, pixel_bytes: int = 3):
    """Decode each distinct segment of a batch's camera once (its distinct frames in one call); samples without a
    segment (None: a mixture's member lacking the camera) are skipped, a `Held` sample's frames come as they are.
    With `cached` (per sample, its frames' names and what the decoded-frame cache holds under each:
    `FrameCache.look`), frames found there are not decoded, and those decoded are handed to `keep` by those names.
    `resize`: the frames decoded go through it first, all of the batch's camera in one call (`graph.resizer`: a
    call costs ~0.8 ms besides its frames; those held were kept resized). `decode`: the decoder, called once with
    every segment's (segment, frame indices) and giving their frames (DALI's CPU decoder on the workers,
    `graph.dali_on_workers`); None: torchcodec, segment after segment (`cache`: its idle decoders). `episodes`: the
    open episodes' frames (`decode.open_episodes`): a segment is decoded whole once, front to back, and its frames
    taken from there while its episode stays in the pool (those that do not fit are decoded as asked). `chw`: the
    cache keeps the camera's frames (3, H, W) (`Resolved.kept_chw`): those decoded are transposed once, before
    they are kept, and every frame yielded is (3, H, W). `pixel_bytes`: what a decoded pixel takes (3: RGB; 2: a
    depth camera's codes, `graph.depth_source`), for `episodes`' bound.

    Yields (members, wanted, pixels, decoded): the batch positions using the segment, the sorted distinct frame
    indices, their pixels (len(wanted), H, W, 3) uint8 (an array, or a list of (H, W, 3) arrays where some came
    from the cache; (3, H, W) where `chw`) and how many of them were decoded."""
    by_seg: dict[Any, tuple[Any, list[int]]] = {}
    for j, seg in enumerate(segs):
        if seg is not None:
            by_seg.setdefault(seg.uid, (seg, []))[1].append(j)
    asks = [_ask(seg, members, idx, cached) for seg, members in by_seg.values()]
    whole: dict[int, np.ndarray] = {}
    if episodes is not None:
        whole = episodes.take([a.seg for a in asks if a.missing and not isinstance(a.seg, Held)],
                              lambda got: decode([(s, np.arange(len(s.pts_s))) for s in got]) if decode is not None
                              else [torchcodec_tensor(s, np.arange(len(s.pts_s)), cache).numpy() for s in got],
                              pixel_bytes)
    rest = [a for a in asks if a.missing and a.seg.uid not in whole]
    decoded_of: Callable[[_Ask], np.ndarray]
    if decode is not None:  # every segment's frames in one call, taken in `rest`'s order below
        done = iter(decode([(a.seg, a.wanted[a.missing]) for a in rest]))
        decoded_of = lambda a: next(done)  # noqa: E731
    else:  # torchcodec, segment after segment as the parts are laid out
        decoded_of = lambda a: torchcodec_tensor(a.seg, a.wanted[a.missing], cache).numpy()  # noqa: E731
    def pixels(a: _Ask) -> tuple[_Ask, np.ndarray | None, bool]:
        """`a`, its missing frames' pixels (None: none missing) and whether they are rather every frame of the
        segment by index: an open episode's held frames themselves (read, not copied), where no cache or resize
        asks for the missing ones alone."""
        if not a.missing:
            return a, None, False
        if a.seg.uid not in whole:
            return a, decoded_of(a), False
        if a.names is None and resize is None:
            return a, whole[a.seg.uid], True
        return a, whole[a.seg.uid][a.wanted[a.missing]], False

    parts: Iterable[tuple[_Ask, np.ndarray | None, bool]] = (pixels(a) for a in asks)
    if resize is not None:  # every segment decoded first, then one call resizes them all (none is held whole)
        parts = list(parts)
        raw = [part[1] for part in parts if part[1] is not None]
        if raw:
            resized = iter(np.split(resize([f for r in raw for f in r]), np.cumsum([len(r) for r in raw])[:-1]))
            parts = [(a, None if px is None else next(resized), every) for a, px, every in parts]
    for a, decoded, every in parts:
        members, wanted, names, found, missing = a[1:]
        if every and decoded is not None:  # every frame held of the episode: index them all
            yield members, np.arange(len(decoded)), decoded, len(missing)
            continue
        order = wanted.tolist()
        if decoded is None:  # every frame held
            yield members, wanted, [found[i] for i in order], 0
            continue
        if chw:
            decoded = chw_frames(decoded)
        if keep is not None and names is not None:
            kept = [(name, picture) for n, picture in zip(missing, decoded) for name in sorted(names[order[n]])]
            keep([k for k, _ in kept], [picture for _, picture in kept])
        if len(missing) == len(wanted):
            yield members, wanted, decoded, len(missing)
            continue
        found.update((order[n], picture) for n, picture in zip(missing, decoded))
        yield members, wanted, [found[i] for i in order], len(missing)  # a list: the frames are not copied first


def chw_frames(frames: np.ndarray | list[np.ndarray]) -> np.ndarray:
    """(N, H, W, 3) frames (or N of them) as one C-ordered (N, 3, H, W) array (`np.stack` of transposed views would
    keep their strides: a later copy of each frame would then be a strided one)."""
    out = np.empty((len(frames), 3, *frames[0].shape[:2]), np.uint8)
    for dst, frame in zip(out, frames):
        dst[...] = frame.transpose(2, 0, 1)
    return out


class _Ask(NamedTuple):
    """What `decode_segments` asks of one segment."""

    seg: Any
    members: list[int]  # the batch positions using it
    wanted: np.ndarray  # the sorted distinct frame indices they show
    names: dict[int, set] | None  # frame index -> the names samples ask it by (None: without the cache)
    found: dict[int, np.ndarray]  # the frames the cache holds, by index
    missing: list[int]  # the positions in `wanted` to decode


def _ask(seg, members: list[int], idx, cached: list | None) -> _Ask:
    if isinstance(seg, Held):
        return _Ask(seg, members, np.arange(len(seg.pictures)), None, dict(enumerate(seg.pictures)), [])
    asked = [idx[j] for j in members]  # one sample asking one frame (most, under a pool): no np.unique (~10 µs)
    wanted = asked[0] if len(asked) == 1 and len(asked[0]) == 1 else np.unique(np.concatenate(asked))
    names: dict[int, set] | None = None
    found: dict[int, np.ndarray] = {}
    if cached is not None:
        names = {}  # frame index -> the names samples ask it by (their file times)
        for j in members:
            for i, name, picture in zip(idx[j].tolist(), *cached[j]):
                names.setdefault(i, set()).add(name)
                if picture is not None:
                    found[i] = picture
    return _Ask(seg, members, wanted, names, found, [n for n, i in enumerate(wanted.tolist()) if i not in found])


def decode_grouped(segs, idx, cache, blank: np.ndarray | None = None, keep: Keep | None = None,
                   cached: list | None = None, resize: Callable | None = None,
                   decode: Callable | None = None, episodes: EpisodeFrames | AskedBy | None = None) -> tuple[list[np.ndarray], int]:
    """Per sample, its frames (T, H, W, 3) uint8 (for DALI's graph), and how many frames were decoded; `blank`
    for a sample without a segment; `keep`, `cached`, `resize`: the decoded-frame cache's, `decode` the decoder
    (`decode_segments`), `episodes` the open episodes' frames."""
    out: list[np.ndarray | None] = [blank if seg is None else None for seg in segs]
    decoded = 0
    for members, wanted, pixels, n in decode_segments(segs, idx, cache, keep, cached, resize, decode,
                                                     episodes):
        decoded += n
        for j in members:
            at = np.searchsorted(wanted, idx[j])
            out[j] = pixels[at] if isinstance(pixels, np.ndarray) else np.stack([pixels[k] for k in at])
    return cast("list[np.ndarray]", out), decoded  # every sample's slot was filled above


def decode_host(segs, idx, cache, pool: BufferPool, image_ops: ImageOps, size: tuple[int, int] | None = None,
                keep: Keep | None = None, cached: list | None = None, decode: Callable | None = None,
                episodes: EpisodeFrames | AskedBy | None = None, chw: bool = False):
    """The batch's frames of one camera as one array of `pool` (`host_shape`), laid out as `image_ops` says
    (host frames, `graph.host`), and how many frames were decoded. `size`: (H, W) of the camera, for a batch
    none of whose samples has a segment (a mixture's members that lack it: zeros); `keep`, `cached`: the
    decoded-frame cache's, `decode` the decoder, `episodes` the open episodes' frames, `chw` the cache's order
    (`decode_segments`)."""
    hw = slice(1, 3) if chw else slice(0, 2)  # (H, W) of a frame as it comes
    out = None
    if size is not None and all(seg is None for seg in segs):
        out = pool.take(host_shape(image_ops, len(segs), len(idx[0]), *size), host_dtype(image_ops))
    if segs and all(isinstance(seg, Held) for seg in segs):  # every frame from the cache: laid out in one go
        pictures = [picture for seg in segs for picture in seg.pictures]
        out = pool.take(host_shape(image_ops, len(segs), len(idx[0]), *pictures[0].shape[hw]), host_dtype(image_ops))
        lay_out(out, pictures, image_ops, chw)
        return out, 0
    decoded = 0
    for members, wanted, pixels, n in decode_segments(segs, idx, cache, keep, cached, decode=decode,
                                                     episodes=episodes, chw=chw):
        if out is None:
            out = pool.take(host_shape(image_ops, len(segs), len(idx[0]), *pixels[0].shape[hw]), host_dtype(image_ops))
        scatter_frames(out, pixels, members, wanted, idx, image_ops, chw)
        decoded += n
    if out is not None:
        for j, seg in enumerate(segs):
            if seg is None:  # a mixture's member without the camera: zeros (a reused buffer holds old frames)
                out[j] = 0
    return out, decoded
