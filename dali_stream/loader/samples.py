"""`loader.dataset[i]` (and `loader[i]`): sample i as lerobot's `dataset[i]` returns it, one dict without a batch
axis, for looking at a dataset the way a lerobot user does.

Sample i is the i-th frame of the loader's selected episodes, episodes in the episodes table's order and frames in
order (with every episode selected, the frame whose `index` is i, as lerobot's). It is read by a second loader on
the same opened metadata and settings (cameras, windows, resize, dtype, `image_transforms` seeded per sample), one
sample a batch, in order: an evaluation pass (`shuffle=False`) on one rank, positioned at batch i by
`load_state_dict` as a resumed run is, so nothing before it is fetched or decoded.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, Any, Iterator

from ..config import LoaderConfig
from .source_setup import OPENING

if TYPE_CHECKING:
    from . import StreamLoader


class Samples:
    """The loader's samples as a sequence: `len()` frames, `[i]` one sample dict (torch tensors, `task` a string)."""

    def __init__(self, owner: "StreamLoader") -> None:
        self._owner = owner
        self._reader: "StreamLoader | None" = None

    def __len__(self) -> int:
        return int(self._owner.catalog.lengths.sum())

    def __getitem__(self, i: int) -> dict[str, Any]:
        n = len(self)
        try:
            i = operator.index(i)
        except TypeError:
            raise TypeError(f"samples are indexed by an integer (0 to {n - 1}). Found: {i!r}") from None
        if not -n <= i < n:
            raise IndexError(f"sample {i} is out of range: the loader's selected episodes hold {n} frames")
        reader = self._open()
        reader.load_state_dict({**reader.state_dict(), "epoch": 0, "batches_consumed": i % n, "elastic": []})
        batches = iter(reader)
        try:
            batch = next(batches)
        finally:
            batches.close()  # type: ignore[attr-defined]
        return {k: v[0] for k, v in batch.items()}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def _open(self) -> "StreamLoader":
        if self._reader is None:
            owner = self._owner
            defaults = LoaderConfig()
            cfg = dataclasses.replace(owner.config, batch_size=1, shuffle=False, drop_last=False, num_workers=0,
                                      prefetch_batches=0, rank=0, world_size=1, drop_n_first_frames=0,
                                      drop_n_last_frames=0, device=owner.device,
                                      **{name: getattr(defaults, name) for name in OPENING})
            self._reader = type(owner)(owner.meta, config=cfg)
        return self._reader

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None
