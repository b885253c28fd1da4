"""`loader.dataset[i]` (and `loader[i]`): sample i as lerobot's `dataset[i]` returns it, one dict without a batch
axis; `loader.dataset.__getitems__(indices)`, which torch's DataLoader calls for a batch of indices, those samples
built together.

Sample i is the i-th frame of the loader's selected episodes, episodes in the episodes table's order and frames in
order (with every episode selected, the frame whose `index` is i, as lerobot's). The samples are built by a second
loader on the same opened metadata and settings (cameras, windows, resize, dtype, `image_transforms` seeded per
sample), opened on first use and kept with its fetch threads, MP4 indexes, parquet footers and fetched episodes.
It is resolved as a global shuffle's, which is random access too: no episode decoded whole for one sample (each
frame decoded from the keyframe before it, as lerobot's), retired episodes kept in the store while they fit
`cache_bytes`. The samples asked for together are planned as batches of at most `PICKED_BATCH` (`plan.picked`) and
built as an epoch's are, so a DataLoader's batch costs one build: its episodes fetched once, each camera's samples
joined into one stream and decoded by one decoder. A sample asked alone or beside others gets the same values (its
random numbers follow the sample).

Fork-safe: torch's DataLoader around `loader.dataset` forks its workers, perhaps after `loader[i]` opened the second
loader here and its threads ran. A forked worker has none of those threads (a fetch they began would never end), so
each process opens its own second loader on first use; one inherited from the parent is let go of unused
(`lifecycle.inherited`). A spawned worker (DataLoader's `multiprocessing_context="spawn"` or "forkserver": macOS's
default, Linux's from Python 3.14) gets the samples pickled: the opened metadata and the settings (`Detached`),
never the loader and its threads, and opens its second loader from them.
"""

from __future__ import annotations

import dataclasses
import operator
import os
import sys
from typing import TYPE_CHECKING, Any, Iterator, Sequence

from ..config import LoaderConfig
from ..errors import ConfigError
from ..plan.picked import PickedPlan
from .deliver import Batch
from .lifecycle import inherited
from .source_setup import OPENING

if TYPE_CHECKING:
    from . import StreamLoader

PICKED_BATCH = 8  # samples built together at most (a DataLoader's batch_size 8: one build)


@dataclasses.dataclass(frozen=True)
class Detached:
    """What a `Samples` pickled into a spawned process knows of its loader: enough to open a second loader there."""

    loader_type: type
    meta: Any
    config: LoaderConfig
    device: str
    num_frames: int
    num_episodes: int
    fps: float


class Samples:
    """The loader's samples as a sequence: `len()` frames, `[i]` one sample dict (torch tensors, `task` a string)."""

    def __init__(self, owner: "StreamLoader | Detached") -> None:
        self._owner = owner
        self._reader: "StreamLoader | None" = None
        self._pid = os.getpid()  # the process `_reader` was opened in
        self._builds = 0  # batches of picked samples built by `_reader`

    def __len__(self) -> int:
        return self._owner.num_frames

    def __reduce__(self) -> tuple:
        """Pickled (a spawned DataLoader worker): the loader's metadata and settings, its second loader left behind."""
        o = self._owner
        kind = o.loader_type if isinstance(o, Detached) else type(o)
        return Samples, (Detached(kind, o.meta, o.config, o.device, o.num_frames, o.num_episodes, o.fps),)

    # what lerobot's LeRobotDataset offers beside dataset[i]: its metadata, frames, episodes and fps
    @property
    def meta(self) -> Any:
        """The loader's metadata (`loader.meta`: lerobot's `dataset.meta`)."""
        return self._owner.meta

    @property
    def num_frames(self) -> int:
        return self._owner.num_frames

    @property
    def num_episodes(self) -> int:
        return self._owner.num_episodes

    @property
    def fps(self) -> float:
        return self._owner.fps

    def __getitem__(self, i: int) -> dict[str, Any]:
        return self.__getitems__([i])[0]

    def __getitems__(self, indices: Sequence[int]) -> list[dict[str, Any]]:
        """Samples `indices`, in that order (what torch's DataLoader asks its dataset for a batch)."""
        n = len(self)
        asked = []
        for i in indices:
            try:
                i = operator.index(i)
            except TypeError:
                raise TypeError(f"samples are indexed by an integer (0 to {n - 1}). Found: {i!r}") from None
            if not -n <= i < n:
                raise IndexError(f"sample {i} is out of range: the loader's selected episodes hold {n} frames")
            asked.append(i % n)
        if not asked:
            return []
        reader = self._open()
        plan = PickedPlan(reader.epoch_plan(0), asked, reader.config.batch_size)
        schedule = reader._delivery.schedule(plan, 0)
        batches = reader._delivery.batches(schedule, plan, 0)
        out: list[dict[str, Any]] = []
        try:
            for batch in batches:
                self._builds += 1
                out += [Batch({k: v[j] for k, v in batch.items()}) for j in range(len(batch["task"]))]
        finally:
            batches.close()
            schedule.close()
        return out

    def stats(self) -> dict[str, Any]:
        """The second loader's `stats()` in this process (its fetches, decoders opened, batches built: `builds`);
        empty before the first sample was asked for here."""
        self._let_go_if_forked()
        if self._reader is None:
            return {}
        return {**self._reader.stats(), "builds": self._builds}

    def __iter__(self) -> Iterator[dict[str, Any]]:
        for i in range(len(self)):
            yield self[i]

    def _open(self) -> "StreamLoader":
        self._let_go_if_forked()
        if self._reader is None:
            owner = self._owner
            defaults = LoaderConfig()
            # random access, resolved as a global shuffle's (`loader.resolve`); the picked plans decide what is drawn
            cfg = dataclasses.replace(owner.config, batch_size=PICKED_BATCH, shuffle=True, episode_pool_size="all",
                                      drop_last=False, num_workers=0, prefetch_batches=0, rank=0, world_size=1,
                                      drop_n_first_frames=0, drop_n_last_frames=0, device=owner.device,
                                      **{name: getattr(defaults, name) for name in OPENING})
            kind = owner.loader_type if isinstance(owner, Detached) else type(owner)
            self._reader = kind(owner.meta, config=cfg)
            self._pid = os.getpid()
            self._builds = 0
        return self._reader

    def _let_go_if_forked(self) -> None:
        """In a process forked from the one that opened the second loader: let go of it, unused (see above)."""
        if self._reader is not None and self._pid != os.getpid():
            inherited(self._reader)
            self._reader = None

    def close(self) -> None:
        self._let_go_if_forked()
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def asked_by_torch_data(depth: int = 2) -> bool:
    """Whether the caller `depth` frames up is torch.utils.data's code (a sampler sizing the loader as a dataset)."""
    return sys._getframe(depth).f_globals.get("__name__", "").startswith("torch.utils.data")


def wrapped(loader: "StreamLoader", *_: Any) -> ConfigError:
    """The error for a loader handed to torch's DataLoader as its dataset: it would take the loader's batches for
    samples and cover one frame in batch_size, silently."""
    batches, frames = loader._position.next_len(), len(loader.dataset)
    return ConfigError(
        f"a StreamLoader is already the DataLoader: `for batch in loader` gives shuffled batches of "
        f"batch_size={loader.config.batch_size} ({batches} a rank this epoch). torch's DataLoader around it would "
        f"take len(loader) = {batches} batches for {batches} samples and cover {batches} of the {frames} frames. "
        f"Iterate the loader itself; for lerobot's map-style samples use loader.dataset ({frames} samples, "
        "loader.dataset[i] as LeRobotDataset's dataset[i]), e.g. DataLoader(loader.dataset, batch_size=8, "
        "shuffle=True, num_workers=2), as lerobot's LeRobotDataset")
