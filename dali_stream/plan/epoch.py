"""The planner: which episode, which frame, which rows and which padding, for every sample of an epoch.

Pure: numpy and the standard library only, no IO, torch or DALI. A plan for batch *i* of epoch *e* on a
rank is a function of (episode lengths, PlanConfig, World, e, i) and nothing else, so a restarted job
recomputes it instead of saving it.

How an epoch is drawn, per rank (the consumer; loader workers only parallelise fetch and decode, so the
batch sequence does not depend on `num_workers`):

1. Episodes are partitioned over ranks: a seeded shuffle, then longest-first onto the least-loaded rank,
   so ranks get near-equal frame counts. The partition changes every epoch (with `partition="node"`, each node
   keeps its share every epoch and only its ranks' split changes: `plan.partition`).
2. The rank's episodes get a seeded admission order. A pool of `pool_size` whole episodes is open at a
   time, one per lane: in admission order each episode goes to the lane with the fewest frames so far (the
   one that frees first), and each episode hands out its frames in a seeded random order (`Lanes`).
3. The rank's stream visits the lanes in turn, one frame each (a lane that has handed out all its frames is
   skipped), and batch i is samples [i * batch_size, (i + 1) * batch_size) of it, their order then drawn
   (seeded by the batch). So a batch holds min(batch, pool) distinct episodes whenever the pool has them, an
   exhausted episode leaves the pool and the lane's next one enters, and where every lane stands after n
   samples is a closed form: batch i is computed on its own, in time independent of i (resume), and the plan
   keeps nothing per batch (a 200k-episode epoch has 750k batches).

   With `pool_size` None (a global shuffle) there is no pool: a pass is the rank's frames in the order of a
   seeded permutation of all of them (`GlobalPass`, `plan.permute`), computed pointwise, so batch i is again a
   function of i alone and a batch's samples come from anywhere in the rank's share.

4. All ranks yield the same number of batches of the same sizes (a DDP step waits for every rank). With
   `drop_last`, the smallest share sets the count: the rank's stream stops at `num_batches * batch_size`
   samples. Without it, the largest share sets the count and a smaller share continues with padding
   passes: fresh seeded pool passes over its own episodes (repeats, as DistributedSampler pads).

With one rank, every frame is drawn exactly once per epoch (with `drop_last` the final partial batch is
dropped); with several, every rank's own frames come first, exactly once each, before any padding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..errors import ConfigError
from . import salts
from .mixture_epoch import Mix, draws, quotas, windows_by_member
from .partition import PARTITIONS, partition_in_order, refuse_dropped_out
from .passes import GlobalPass, Lanes
from .world import World


@dataclass(frozen=True)
class PlanConfig:
    """What the planner needs besides the dataset: sizes, seed and the delta windows (in frames)."""

    batch_size: int
    pool_size: int | None  # None: a global shuffle of the rank's frames (`GlobalPass`), no pool of open episodes
    seed: int = 0
    drop_last: bool = True
    delta_indices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    shuffle: bool = True  # False: every frame once, episodes and frames in order (evaluation)
    drop_n_first_frames: int = 0  # never draw an episode's first n frames (lerobot's EpisodeAwareSampler)
    drop_n_last_frames: int = 0  # ... nor its last n (they still serve as window context)
    partition: str = "rank"  # how a shuffled epoch's episodes split over ranks (`plan.partition.PARTITIONS`)

    def __post_init__(self) -> None:
        if self.partition not in PARTITIONS:
            raise ConfigError(f"`partition` must be one of {sorted(PARTITIONS)}. Found: {self.partition!r}")
        for name in ("drop_n_first_frames", "drop_n_last_frames"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"`{name}` must be an integer >= 0. Found: {value!r}")
        if not isinstance(self.shuffle, bool):
            raise ConfigError(f"`shuffle` must be True or False. Found: {self.shuffle!r}")
        if not isinstance(self.batch_size, int) or self.batch_size <= 0:
            raise ConfigError(f"`batch_size` must be a positive integer. Found: {self.batch_size!r}")
        if self.pool_size is not None and (isinstance(self.pool_size, bool) or not isinstance(self.pool_size, int)
                                           or self.pool_size <= 0):
            raise ConfigError(
                f"`episode_pool_size` must be a positive integer or None (a global shuffle). Found: "
                f"{self.pool_size!r}; it is the number of whole episodes each rank keeps open"
            )
        if not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"`seed` must be a non-negative integer. Found: {self.seed!r}")
        for key, deltas in self.delta_indices.items():
            if len(deltas) == 0:
                raise ConfigError(f"delta_timestamps[{key!r}] is empty; give at least one offset (0.0 = now)")


@dataclass(frozen=True)
class Window:
    """Rows of one windowed key: episode-relative row per (sample, step), clamped, and its padding mask."""

    rows: np.ndarray  # (B, T) int64, clamped into [0, length)
    is_pad: np.ndarray  # (B, T) bool, True where the unclamped row fell outside the episode


@dataclass(frozen=True)
class BatchPlan:
    """One batch: for each sample the episode (position in the episodes table) and the frame in it."""

    epoch: int
    index: int
    episodes: np.ndarray  # (B,) int64 positions into the dataset's episodes table
    frames: np.ndarray  # (B,) int64 frame index inside the episode
    windows: Mapping[str, Window]
    admitted: tuple[int, ...] = ()  # positions that entered the pool while this batch was drawn
    retired: tuple[int, ...] = ()  # positions whose last frame this batch drew (they left the pool)
    # the caller's sample numbers where it picked the samples (`plan.picked`: map-style access); None in an epoch.
    # Per-sample random numbers (augmentation, image_transforms' seed) then follow each sample, not the batch
    samples: np.ndarray | None = None

    @property
    def size(self) -> int:
        return int(self.episodes.shape[0])


class EpochPlan:
    """All batches of one epoch on one rank, each computed on its own by `batch(i)` in time independent of i
    (`Lanes`): a resumed job reaches its position without drawing the batches before it, and nothing grows
    along the epoch."""

    def __init__(self, lengths: np.ndarray, config: PlanConfig, world: World, epoch: int,
                 consumed: Mapping[int, np.ndarray] | None = None, segment: int = 0, mix: Mix | None = None) -> None:
        """`consumed` (episode position -> how many times each frame was drawn, or a bool mask) and `segment` > 0
        describe the rest of an epoch resumed on another world size: only the draws not made yet are planned (see
        `resume_plan`). `mix`: the episodes are a mixture's (`plan.mixture_epoch`): with weights, each episode draws its
        quota of the epoch (repeats or a subset of its frames), and windows use each member's frame offsets."""
        if epoch < 0:
            raise ConfigError(f"`epoch` must be >= 0. Found: {epoch}")
        self.config = config
        self.world = world
        self.epoch = epoch
        self.segment = segment
        self.mix = mix
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if mix is not None and len(mix.member_of) != len(self.lengths):
            raise ConfigError(f"the mixture names the member of {len(mix.member_of)} episodes, the plan has "
                              f"{len(self.lengths)}")
        # Frames an episode may hand out: [first, first + count), without the dropped first/last frames.
        self._first = np.minimum(config.drop_n_first_frames, self.lengths)
        self._count = np.maximum(self.lengths - config.drop_n_first_frames - config.drop_n_last_frames, 0)
        refuse_dropped_out(self.lengths, self._count, config.drop_n_first_frames, config.drop_n_last_frames,
                           world.world_size)
        # Draws of each episode this epoch: each of its frames once, or a weighted mixture's quota (`plan.mixture_epoch`);
        # an evaluation pass (shuffle=False) draws every frame once whatever the weights.
        self._quota = quotas(self._count, mix, config.seed, epoch) \
            if mix is not None and mix.reweights and config.shuffle else None
        remaining = (self._count if self._quota is None else self._quota).copy()
        self._available: dict[int, np.ndarray] = {p: self._left(p, drawn) for p, drawn in (consumed or {}).items()}
        for p, frames in self._available.items():
            remaining[p] = len(frames)
        salt = (segment,) if segment else ()
        if config.shuffle:
            shares = PARTITIONS[config.partition](remaining, self._count, world.world_size, world.local_world_size,
                                                  config.seed, epoch, *salt)
            mine = shares[world.rank]
            rng = np.random.default_rng([config.seed, epoch, world.rank, salts.ADMISSION, *salt])
            self.admission_order = mine[rng.permutation(len(mine))]
        else:  # evaluation: contiguous blocks of episodes per rank, in order
            shares = partition_in_order(remaining, world.world_size)
            self.admission_order = shares[world.rank]
        self._remaining = remaining
        self.num_frames = int(remaining[self.admission_order].sum())
        # Every rank must yield the same batches (a DDP step waits for all ranks): with drop_last the
        # smallest share sets the count (frames beyond it are dropped this epoch); without, the largest
        # does and smaller shares are padded with repeats of their own frames, as DistributedSampler pads.
        sizes = [int(remaining[share].sum()) for share in shares]
        self.share_sizes = sizes  # frames per rank this epoch (segment)
        b = config.batch_size
        if config.drop_last:
            self.num_batches = min(sizes) // b
            self.num_samples = self.num_batches * b
        else:
            self.num_samples = max(sizes)
            self.num_batches = math.ceil(self.num_samples / b)
        self.num_padding = max(0, self.num_samples - self.num_frames)
        self._passes: dict[int, Lanes | GlobalPass] = {}

    def _draws(self, pos: int):
        """The frames episode `pos` draws this epoch, ascending (before any were consumed): its frames once (a
        range), or its weighted quota of them (`plan.mixture_epoch.draws`: repeats, or a subset)."""
        first, count = int(self._first[pos]), int(self._count[pos])
        if self._quota is None:
            return range(first, first + count)
        return draws(np.arange(first, first + count), int(self._quota[pos]), self.config.seed, self.epoch, pos)

    def _left(self, pos: int, drawn: np.ndarray) -> np.ndarray:
        """The draws of episode `pos` not made yet, ascending, given how often each frame was drawn (`drawn`)."""
        planned = np.bincount(np.asarray(self._draws(pos), dtype=np.int64), minlength=int(self.lengths[pos]))
        left = np.maximum(planned - np.asarray(drawn, dtype=np.int64)[:len(planned)], 0)
        return np.repeat(np.arange(len(planned), dtype=np.int64), left)

    def _frames_of(self, pos: int):
        """The frames episode `pos` hands out this segment, ascending (a range when it draws each frame once and
        none were consumed)."""
        if pos in self._available:
            return self._available[pos]
        return self._draws(pos)

    @property
    def is_global(self) -> bool:
        """Whether passes are global shuffles (`pool_size` None) rather than a pool of open episodes."""
        return self.config.pool_size is None and self.config.shuffle

    def _lanes(self, number: int) -> "Lanes | GlobalPass":
        """Pass `number` of this rank's stream (0: its own frames; then padding passes over them again)."""
        lanes = self._passes.get(number)
        if lanes is None:
            words = (self.config.seed, self.epoch, self.world.rank, salts.PASS, number) + (
                (1000 + self.segment,) if self.segment else ())
            order = self.admission_order
            counts, frames_of = self._remaining[order].tolist(), lambda i: self._frames_of(int(order[i]))
            first = self._passes.get(0)  # pass 0, whose episode layout later passes reuse
            if self.is_global:
                lanes = GlobalPass(counts, frames_of, words, like=first if isinstance(first, GlobalPass) else None)
            else:
                lanes = Lanes(counts, frames_of, self.config.pool_size or 1 if self.config.shuffle else 1,
                               self.config.shuffle, words, like=first if isinstance(first, Lanes) else None)
            if lanes.frames == 0 and self.num_samples > 0:
                raise ConfigError(
                    f"rank {self.world.rank} of {self.world.world_size} has no frames to draw in epoch {self.epoch} "
                    "(its episodes are shorter than drop_n_first_frames + drop_n_last_frames) while other ranks "
                    "have some: lower those, use fewer ranks, or drop_last=True")
            self._passes = {number: lanes, **{k: v for k, v in self._passes.items() if k == 0}}
        return lanes

    def __len__(self) -> int:
        return self.num_batches

    def _samples(self, start: int, stop: int) -> tuple[list[int], list[int], list[int], list[int]]:
        """Samples [start, stop) of this rank's stream: (local episode, frame, place in the episode's order,
        the episode's frame count) each."""
        eps: list[int] = []
        frames: list[int] = []
        places: list[int] = []
        per_pass = self._lanes(0).frames
        g = start
        while g < stop:
            lanes = self._lanes(g // per_pass)
            v = g % per_pass
            end = min(stop, g - v + per_pass)
            e, f, p = lanes.span(v, v + end - g)
            eps += e
            frames += f
            places += p
            g = end
        counts = [self._lanes(0).counts[e] for e in eps]
        return eps, frames, places, counts

    def batch(self, index: int) -> BatchPlan:
        """Batch `index`, computed on its own (no earlier batch is drawn): constant time at any position."""
        if not 0 <= index < self.num_batches:
            raise IndexError(f"batch {index} is outside epoch {self.epoch}, which has {self.num_batches} batches")
        b = self.config.batch_size
        start, stop = index * b, min((index + 1) * b, self.num_samples)
        local, frames, places, counts = self._samples(start, stop)
        if self.config.shuffle:  # lanes come in turn: the batch's own order is drawn, within each pass
            words = [self.config.seed, self.epoch, self.world.rank, index, salts.BATCH_ORDER] + (
                [self.segment] if self.segment else [])
            rng = np.random.default_rng(words)
            per_pass = self._lanes(0).frames
            passes = (np.arange(start, stop) // per_pass).tolist()
            order = [i for p in dict.fromkeys(passes)
                     for i in (np.flatnonzero(np.asarray(passes) == p)[rng.permutation(passes.count(p))]).tolist()]
            local, frames, places, counts = ([x[i] for i in order] for x in (local, frames, places, counts))
        positions = self.admission_order
        episodes = positions[np.asarray(local, dtype=np.int64)]
        frames_arr = np.asarray(frames, dtype=np.int64)
        if self.is_global:  # nothing stays open: a batch's episodes enter and leave with it
            admitted = retired = tuple(dict.fromkeys(int(positions[e]) for e in local))
        else:
            admitted = tuple(dict.fromkeys(int(positions[e]) for e, p in zip(local, places) if p == 0))
            retired = tuple(dict.fromkeys(int(positions[e]) for e, p, c in zip(local, places, counts) if p == c - 1))
        return BatchPlan(self.epoch, index, episodes, frames_arr, self.windows(episodes, frames_arr), admitted, retired)

    def windows(self, episodes: np.ndarray, frames: np.ndarray) -> dict[str, Window]:
        """Each windowed key's rows and padding for samples (episode position, frame): lerobot's clamped query."""
        lengths = self.lengths[episodes]
        if self.mix is not None and self.mix.delta_indices:  # each member's own frame offsets (its fps)
            members = self.mix.member_of[episodes]
            return {key: Window(*windows_by_member(frames, lengths, members,
                                                   [d.get(key) for d in self.mix.delta_indices], len(deltas)))
                    for key, deltas in self.config.delta_indices.items()}
        return {key: window(frames, lengths, deltas) for key, deltas in self.config.delta_indices.items()}

    def frames_drawn(self, batches: int) -> dict[int, np.ndarray]:
        """Episode position -> the frames this rank drew in its first `batches` batches, a frame as often as it
        was drawn (padding passes not counted: a whole pass at most): a closed form, as `batch` is, for elastic
        resume's replay (`consumed_by`)."""
        end = min(batches * self.config.batch_size, self.num_samples)
        per_pass = self._lanes(0).frames
        if end <= 0 or per_pass == 0:
            return {}
        if end >= per_pass:  # a whole pass: every frame of the rank's share
            drawn = {i: np.asarray(self._frames_of(int(self.admission_order[i])), dtype=np.int64)
                     for i in range(len(self.admission_order))}
        else:
            drawn = self._lanes(0).drawn(end)
        return {int(self.admission_order[i]): f for i, f in drawn.items() if len(f)}

    def pool_before(self, index: int) -> list[int]:
        """Positions open in the pool when batch `index` starts drawing: each lane's current episode (handing out
        frames, or next in its lane)."""
        if index <= 0:
            return []
        g = min(index * self.config.batch_size, self.num_samples - 1)
        per_pass = self._lanes(0).frames
        return [int(self.admission_order[e]) for e in self._lanes(g // per_pass).open_after(g % per_pass)]


def window(frames: np.ndarray, lengths: np.ndarray, deltas: tuple[int, ...]) -> Window:
    """lerobot's query rows: frame + delta clamped into the episode, padded where it fell outside."""
    raw = np.asarray(frames, dtype=np.int64)[:, None] + np.asarray(deltas, dtype=np.int64)[None, :]
    last = np.asarray(lengths, dtype=np.int64)[:, None] - 1
    return Window(rows=np.clip(raw, 0, last), is_pad=(raw < 0) | (raw > last))


def delta_indices(delta_timestamps: Mapping[str, Sequence[float]], fps: float, tolerance_s: float) -> dict[str, tuple[int, ...]]:
    """Seconds to frame offsets (round(d * fps)); each offset must be a multiple of 1/fps within tolerance."""
    out: dict[str, tuple[int, ...]] = {}
    for key, deltas in delta_timestamps.items():
        if isinstance(deltas, (str, bytes)) or not hasattr(deltas, "__iter__"):
            raise ConfigError(f"delta_timestamps[{key!r}] must be a list of offsets in seconds. Found: {deltas!r}")
        deltas = list(deltas)
        odd = [d for d in deltas if isinstance(d, bool) or not isinstance(d, (int, float, np.integer, np.floating))
               or not math.isfinite(d)]
        if odd:
            raise ConfigError(f"delta_timestamps[{key!r}] has offsets that are not finite numbers of seconds: {odd}; "
                              f"use k / {fps} seconds for integer k")
        bad = [d for d in deltas if abs(d * fps - round(d * fps)) / fps > tolerance_s]
        if bad:
            raise ConfigError(
                f"delta_timestamps[{key!r}] has offsets that are not multiples of 1/fps (fps={fps}) within "
                f"tolerance_s={tolerance_s}: {bad}; use k / {fps} seconds for integer k (fps is meta/info.json's: "
                "where the videos run at another rate, info.json is what to fix)"
            )
        out[key] = tuple(int(round(d * fps)) for d in deltas)
    return out


def frame_counts(key: str, deltas: Sequence[float], fps: float, longest: int) -> str | None:
    """What to warn of where the offsets `delta_timestamps[key]` look like frame counts where seconds are meant
    (lerobot's `delta_timestamps` are seconds, k / fps): every offset a whole number and some beyond 1 in size, at
    fps > 1. None when they do not look so (e.g. [0, 1]: now and 1 s later, or frames 0 and 1: either reading is
    plausible). A warning, never an error: a window of whole seconds is a real one (a reward model's 8 steps 1 s
    apart), even where it reaches past every episode of a small dataset; the message says so where, read as seconds,
    a step lies `longest` frames or more from now (`longest`: the longest selected episode's length), so that every
    sample pads it."""
    values = [float(d) for d in deltas]
    if fps <= 1 or not values or not all(v.is_integer() for v in values) or max(abs(v) for v in values) <= 1:
        return None
    ints = [int(v) for v in values]
    rate = f"{fps:g}"
    start = ints[0]
    counted = f"range({len(ints)})" if start == 0 else f"range({start}, {start + len(ints)})"
    listed = counted if ints == list(range(start, start + len(ints))) else str(ints)
    message = (f"delta_timestamps[{key!r}] = {_abridged(ints)} look like frame counts: they are seconds in lerobot's "
               f"convention (k / fps); at {rate} fps write [k / {rate} for k in {listed}]")
    never = [d for d in ints if abs(d) * fps >= longest] if longest > 0 else []
    if never:
        message += (f". Read as seconds, the steps at {_abridged(never)} s lie past the longest episode ({longest} "
                    f"frames, {longest / fps:.3g} s): every sample pads them")
    return (f"{message}. If whole seconds are meant, this warning can be ignored "
            "(warnings.filterwarnings('ignore', '.*look like frame counts') hides it)")


def _abridged(values: Sequence[int]) -> str:
    """[0, 1, ..., 7] for a long list, the list itself for a short one."""
    return str(list(values)) if len(values) <= 4 else f"[{values[0]}, {values[1]}, ..., {values[-1]}]"


def consumed_by(lengths: np.ndarray, config: PlanConfig, world_size: int, epoch: int, batches: int,
                consumed: dict[int, np.ndarray] | None = None, segment: int = 0,
                mix: Mix | None = None, ranks_per_node: int = 1) -> dict[int, np.ndarray]:
    """Frames every rank of `world_size` (`ranks_per_node` a node) drew in the first `batches` batches of a plan
    segment, added to `consumed` (episode position -> how many times each frame was drawn). Pure: computed from the
    plans' closed form, nothing decoded."""
    lengths = np.asarray(lengths, dtype=np.int64)
    out = {p: np.asarray(m, dtype=np.int64).copy() for p, m in (consumed or {}).items()}
    for rank in range(world_size):
        world = World(rank=rank, world_size=world_size, local_world_size=ranks_per_node)
        plan = EpochPlan(lengths, config, world, epoch, consumed, segment, mix)
        for p, frames in plan.frames_drawn(min(batches, plan.num_batches)).items():
            counts = out.get(p)
            if counts is None:
                counts = out[p] = np.zeros(int(lengths[p]), dtype=np.int64)
            np.add.at(counts, np.asarray(frames, dtype=np.int64), 1)
    return out


def resume_plan(lengths: np.ndarray, config: PlanConfig, world: World, epoch: int,
                chain: Sequence[Sequence[int]], mix: Mix | None = None) -> EpochPlan:
    """The plan of this rank for the rest of `epoch` after the job ran `chain` = [(world_size, batches[,
    ranks_per_node]), ...] segments of it on other worlds (elastic resume). Draws made in those segments are not
    made again; every other draw of the epoch is, exactly once (padding aside). Without a chain: the epoch plan."""
    consumed: dict[int, np.ndarray] = {}
    for k, (world_size, batches, *per_node) in enumerate(chain):
        consumed = consumed_by(lengths, config, world_size, epoch, batches, consumed, k, mix,
                               per_node[0] if per_node else 1)
    return EpochPlan(lengths, config, world, epoch, consumed if chain else None, len(chain), mix)
