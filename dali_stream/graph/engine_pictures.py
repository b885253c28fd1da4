"""A batch camera's frames from the open-decoder engines (`decode.engine`): one call per mixture member (each member's
stream kind and size are its own), resized on the workers where the decoded-frame cache keeps them at the batch's
size (`graph.resizer`), samples the cache holds taken as they are and the decoded ones handed back to be kept there
(`CameraBatch.keep`)."""

from __future__ import annotations

from typing import Any, Callable, Mapping

import numpy as np

from ..decode.route import Route
from .worker_decode import Held, Keep


class EngineFrames:
    """`catalog` (`meta.catalog.Catalog`): the members and each key's fields; `engines`: route -> its engine;
    `resizers`: camera -> the `graph.resizer.Resizer` its frames go through first; `blank(key, steps)`: a sample's
    zeros for a member lacking the camera."""

    def __init__(self, catalog, engines: Mapping[Route, Any], resizers: Mapping[str, Any],
                 blank: Callable[[str, int], np.ndarray]) -> None:
        self.catalog, self.engines, self.resizers, self.blank = catalog, engines, resizers, blank

    def __call__(self, route: Route, key: str, segs: list, idx: list[np.ndarray], member_index: np.ndarray,
                 cached: list | None, keep: Keep | None = None):
        """`decode`, with the decoded-frame cache (`cached`: per sample, `FrameCache.look`; `keep`: where the frames
        decoded go to be kept, `CameraBatch.keep`; None: off): a `Held` sample's frames are taken as they are, the
        other samples decoded and their frames handed to `keep`."""
        todo = [j for j, seg in enumerate(segs) if not isinstance(seg, Held)]
        if keep is None or cached is None:
            return self.decode(route, key, segs, idx, member_index)
        steps = len(idx[0])
        decoded: Any = []
        n = 0
        if todo:
            decoded, n = self.decode(route, key, [segs[j] for j in todo], [idx[j] for j in todo],
                                             member_index[todo])
        per_sample = decoded if isinstance(decoded, list) else [decoded[k * steps:(k + 1) * steps]
                                                                for k in range(len(todo))]
        kept = [(name, per_sample[k][t]) for k, j in enumerate(todo) if cached[j] is not None
                for t, name in enumerate(cached[j][0])]
        keep([name for name, _ in kept], [picture for _, picture in kept])
        if len(todo) == len(segs):
            return decoded, n
        held = sorted(set(range(len(segs))) - set(todo))
        shapes = {segs[j].pictures[0].shape for j in held} | {frames.shape[1:] for frames in per_sample}
        if len(shapes) > 1:  # a mixture's members of different sizes (the graph resizes each): per sample
            samples: list[Any] = [None] * len(segs)
            for k, j in enumerate(todo):
                samples[j] = per_sample[k]
            for j in held:
                samples[j] = np.stack(segs[j].pictures)
            return samples, n
        out = np.empty((len(segs) * steps, *shapes.pop()), np.uint8)
        for k, j in enumerate(todo):
            out[j * steps:(j + 1) * steps] = per_sample[k]
        for j in held:
            for t, picture in enumerate(segs[j].pictures):
                out[j * steps + t] = picture
        return out, n

    def decode(self, route: Route, key: str, segs: list, idx: list[np.ndarray], member_index: np.ndarray):
        """Camera `key`'s frames from the open-decoder engine of `route`, sample after sample: one call per member
        (its stream kind and size are its own: the engine keeps decoders per member camera, `engine_camera`),
        each member's through the camera's resizer where the workers resize it (`resizers`)."""
        engine, resize = self.engines[route], self.resizers.get(key)
        if not self.catalog.is_mixture:
            frames, n = engine.decode(key, segs, idx)
            return (frames, n) if resize is None else (resize(frames), n)
        by_sample: list[Any] = [None] * len(segs)
        decoded = 0
        lacking = []  # samples of members without the camera: zeros, in the decoded frames' kind and device
        for m in np.unique(member_index).tolist():
            sel = np.flatnonzero(member_index == m).tolist()
            if segs[sel[0]] is None:
                lacking += sel
                continue
            frames, n = engine.decode(engine_camera(key, self.catalog.members[m].name, True),
                                      [segs[j] for j in sel], [idx[j] for j in sel])
            frames = frames if resize is None else resize(frames)
            steps = len(idx[sel[0]])
            for k, j in enumerate(sel):
                by_sample[j] = frames[k * steps:(k + 1) * steps]
            decoded += n
        on_host = all(f is None or isinstance(f, np.ndarray) for f in by_sample)
        if on_host:  # one array; per sample where the members' frames differ in size (the graph resizes each)
            for j in lacking:
                by_sample[j] = self.blank(key, len(idx[j]))
            return (np.concatenate(by_sample) if len({f.shape[1:] for f in by_sample}) == 1 else by_sample), decoded
        # nvdec-open: CUDA tensors; the blanks made on the engine's hand-off stream, the samples joined there
        # (`OpenDecoders.hand_over`: no part's memory is reused before the join has read it)
        import torch

        device = next(f for f in by_sample if f is not None).device
        with torch.cuda.stream(engine.stream):
            for j in lacking:
                by_sample[j] = torch.zeros((len(idx[j]), *self.catalog.fields[key].shape[:2], 3), dtype=torch.uint8,
                                           device=device)
        return engine.hand_over(by_sample), decoded


def engine_camera(key: str, member: str, mixed: bool) -> str:
    """The open-decoder engine's name for a camera (its decoders are kept per name): a mixture's member cameras
    under one key may differ in codec and size, so each member's is its own."""
    return f"{key}@{member}" if mixed else key
