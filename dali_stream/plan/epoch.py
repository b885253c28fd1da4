"""The planner: which episode, which frame, which rows and which padding, for every sample of an epoch.

Pure: numpy and the standard library only, no IO, torch or DALI. A plan for batch *i* of epoch *e* on a
rank is a function of (episode lengths, PlanConfig, World, e, i) and nothing else, so a restarted job
recomputes it instead of saving it.

How an epoch is drawn, per rank (the consumer; loader workers only parallelise fetch and decode, so the
batch sequence does not depend on `num_workers`):

1. Episodes are partitioned over ranks: a seeded shuffle, then longest-first onto the least-loaded rank,
   so ranks get near-equal frame counts. The partition changes every epoch.
2. The rank's episodes get a seeded admission order. A pool of `pool_size` whole episodes is open at a
   time; each open episode hands out its frames in a seeded random order.
3. Each batch draws `batch_size` frames. A draw picks a pool episode with probability proportional to its
   remaining frames among episodes not yet drawn in this batch (so a batch holds min(batch, pool) distinct
   episodes whenever the pool has them), then takes that episode's next frame. An exhausted episode
   leaves the pool and the next episode in admission order enters at once.

4. All ranks yield the same number of batches of the same sizes (a DDP step waits for every rank). With
   `drop_last`, the smallest share sets the count: the rank's stream stops at `num_batches * batch_size`
   samples. Without it, the largest share sets the count and a smaller share continues with padding
   passes: fresh seeded pool passes over its own episodes (repeats, as DistributedSampler pads).

With one rank, every frame is drawn exactly once per epoch (with `drop_last` the final partial batch is
dropped); with several, every rank's own frames come first, exactly once each, before any padding.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

from ..errors import ConfigError
from .world import World

KEPT_BATCHES = 512  # drawn batches an EpochPlan keeps (the loader reads a few dozen behind its position)


@dataclass(frozen=True)
class PlanConfig:
    """What the planner needs besides the dataset: sizes, seed and the delta windows (in frames)."""

    batch_size: int
    pool_size: int
    seed: int = 0
    drop_last: bool = True
    delta_indices: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    shuffle: bool = True  # False: every frame once, episodes and frames in order (evaluation)
    drop_n_first_frames: int = 0  # never draw an episode's first n frames (lerobot's EpisodeAwareSampler)
    drop_n_last_frames: int = 0  # ... nor its last n (they still serve as window context)

    def __post_init__(self) -> None:
        for name in ("drop_n_first_frames", "drop_n_last_frames"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"`{name}` must be an integer >= 0. Found: {value!r}")
        if not isinstance(self.shuffle, bool):
            raise ConfigError(f"`shuffle` must be True or False. Found: {self.shuffle!r}")
        if not isinstance(self.batch_size, int) or self.batch_size <= 0:
            raise ConfigError(f"`batch_size` must be a positive integer. Found: {self.batch_size!r}")
        if not isinstance(self.pool_size, int) or self.pool_size <= 0:
            raise ConfigError(
                f"`episode_pool_size` must be a positive integer. Found: {self.pool_size!r}; "
                "it is the number of whole episodes each rank keeps open (16 is a good start)"
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

    @property
    def size(self) -> int:
        return int(self.episodes.shape[0])


def _seed_int(*words: int) -> int:
    return int(np.random.SeedSequence([int(w) for w in words]).generate_state(2, dtype=np.uint64)[0])


def _candidates(lengths: np.ndarray, world_size: int) -> np.ndarray:
    """Positions of the episodes with frames to hand out; every rank needs at least one."""
    candidates = np.flatnonzero(lengths > 0)
    if world_size > len(candidates):
        raise ConfigError(
            f"world_size={world_size} ranks but the dataset has only {len(candidates)} non-empty episodes: "
            "every rank needs at least one episode; use fewer ranks or a larger dataset"
        )
    return candidates


def partition_episodes(lengths: np.ndarray, world_size: int, seed: int, epoch: int, *salt: int) -> list[np.ndarray]:
    """Split episode positions over ranks, balanced by frame count; deterministic in (seed, epoch, salt)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    candidates = _candidates(lengths, world_size)
    rng = np.random.default_rng([seed, epoch, 0x9A27, *salt])
    order = candidates[rng.permutation(len(candidates))]
    order = order[np.argsort(-lengths[order], kind="stable")]
    heap = [(0, r) for r in range(world_size)]
    owned: list[list[int]] = [[] for _ in range(world_size)]
    for pos in order.tolist():
        load, rank = heapq.heappop(heap)
        owned[rank].append(pos)
        heapq.heappush(heap, (load + int(lengths[pos]), rank))
    return [np.array(sorted(o), dtype=np.int64) for o in owned]


def partition_in_order(lengths: np.ndarray, world_size: int) -> list[np.ndarray]:
    """Split episode positions over ranks in order, contiguous blocks of near-equal frames (no shuffle)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    candidates = _candidates(lengths, world_size)
    sizes = lengths[candidates]
    middle = np.cumsum(sizes) - sizes / 2.0  # an episode goes to the rank its middle frame falls in
    starts = [0]
    for rank in range(1, world_size):
        first = int(np.searchsorted(middle, rank * sizes.sum() / world_size))
        starts.append(min(max(first, starts[-1] + 1), len(sizes) - (world_size - rank)))  # no rank empty
    starts.append(len(sizes))
    return [candidates[starts[r]:starts[r + 1]] for r in range(world_size)]


class _Fenwick:
    """Prefix sums over pool slots, for drawing a slot with probability proportional to its weight."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.tree = [0] * (n + 1)
        self.weight = [0] * n
        self.total = 0
        self._top = 1 << (n.bit_length() - 1) if n else 0

    def add(self, i: int, delta: int) -> None:
        self.weight[i] += delta
        self.total += delta
        i += 1
        while i <= self.n:
            self.tree[i] += delta
            i += i & -i

    def find(self, r: int) -> int:
        """The slot holding cumulative weight position r (0 <= r < total)."""
        pos, step = 0, self._top
        while step:
            nxt = pos + step
            if nxt <= self.n and self.tree[nxt] <= r:
                pos = nxt
                r -= self.tree[nxt]
            step >>= 1
        return pos


class _PoolSampler:
    """Draws (episode, frame) pairs from a pool of open episodes; see the module docstring."""

    def __init__(self, lengths: list[int], pool_size: int, rnd: random.Random,
                 available: list[np.ndarray | None] | None = None, log: list | None = None) -> None:
        # available[i]: the frames episode i still has to hand out (None: all); lengths count those frames.
        # log: receives (True, i) when episode i enters the pool and (False, i) when it leaves.
        self._log = log if log is not None else []
        self._available = available
        self._lengths = lengths
        self._rnd = rnd
        self._next = 0
        slots = max(1, min(pool_size, len(lengths)))
        self._fen = _Fenwick(slots)
        self._ep = [-1] * slots
        self._perm: list[list[int]] = [[] for _ in range(slots)]
        self._pos = [0] * slots
        self.remaining = sum(lengths)
        for s in range(slots):
            self._admit(s)

    def _admit(self, slot: int) -> None:
        while self._next < len(self._lengths) and self._lengths[self._next] == 0:
            self._next += 1
        if self._next >= len(self._lengths):
            self._ep[slot] = -1
            return
        ep = self._next
        self._next += 1
        avail = self._available[ep] if self._available is not None else None
        perm = list(range(self._lengths[ep])) if avail is None else [int(f) for f in avail]
        self._rnd.shuffle(perm)
        self._ep[slot], self._perm[slot], self._pos[slot] = ep, perm, 0
        self._fen.add(slot, len(perm))
        self._log.append((True, ep))

    def draw(self, n: int) -> tuple[list[int], list[int]]:
        fen, rnd = self._fen, self._rnd
        eps: list[int] = []
        frames: list[int] = []
        hidden: list[tuple[int, int]] = []
        for _ in range(min(n, self.remaining)):
            if fen.total == 0:  # every open episode already drew in this batch: allow repeats
                for slot, weight in hidden:
                    fen.add(slot, weight)
                hidden.clear()
            slot = fen.find(int(rnd.random() * fen.total))
            pos = self._pos[slot]
            eps.append(self._ep[slot])
            frames.append(self._perm[slot][pos])
            self._pos[slot] = pos + 1
            left = len(self._perm[slot]) - pos - 1
            fen.add(slot, -fen.weight[slot])
            if left == 0:
                self._log.append((False, self._ep[slot]))
                self._admit(slot)
            else:
                hidden.append((slot, left))
        for slot, weight in hidden:
            fen.add(slot, weight)
        self.remaining -= len(eps)
        return eps, frames


class _InOrder:
    """`shuffle=False`: every frame of each episode in order, episodes in order (the sampler interface)."""

    def __init__(self, counts: list[int], available: list, log: list) -> None:
        self._frames, self._log = available, log
        self._episode, self._pos = 0, 0
        self.remaining = sum(counts)

    def draw(self, n: int) -> tuple[list[int], list[int]]:
        eps: list[int] = []
        frames: list[int] = []
        while len(eps) < n and self.remaining:
            frames_here = self._frames[self._episode]
            if self._pos == 0:
                if len(frames_here) == 0:
                    self._episode += 1
                    continue
                self._log.append((True, self._episode))
            take = min(n - len(eps), len(frames_here) - self._pos)
            eps.extend([self._episode] * take)
            frames.extend(int(f) for f in frames_here[self._pos:self._pos + take])
            self._pos += take
            self.remaining -= take
            if self._pos == len(frames_here):
                self._log.append((False, self._episode))
                self._episode, self._pos = self._episode + 1, 0
        return eps, frames


class EpochPlan:
    """All batches of one epoch on one rank, drawn lazily; the last KEPT_BATCHES are kept, so `batch(i)` is cheap
    for the batches around the loader's position (an earlier one is drawn again from the epoch's start).

    `batch(i)` for a large i draws (never decodes) the batches before it: that is how a resumed job
    reaches its position.
    """

    def __init__(self, lengths: np.ndarray, config: PlanConfig, world: World, epoch: int,
                 consumed: Mapping[int, np.ndarray] | None = None, segment: int = 0) -> None:
        """`consumed` (episode position -> bool mask of frames) and `segment` > 0 describe the rest of an
        epoch resumed on another world size: only unconsumed frames are planned (see `resume_plan`)."""
        if epoch < 0:
            raise ConfigError(f"`epoch` must be >= 0. Found: {epoch}")
        self.config = config
        self.world = world
        self.epoch = epoch
        self.segment = segment
        self.lengths = np.asarray(lengths, dtype=np.int64)
        # Frames an episode hands out: [first, first + count), without the dropped first/last frames.
        self._first = np.minimum(config.drop_n_first_frames, self.lengths)
        remaining = np.maximum(self.lengths - config.drop_n_first_frames - config.drop_n_last_frames, 0)
        consumed = consumed or {}
        self._available: dict[int, np.ndarray] = {
            p: np.flatnonzero(~mask[self._first[p]:self._first[p] + remaining[p]]) + self._first[p]
            for p, mask in consumed.items()}
        for p, frames in self._available.items():
            remaining[p] = len(frames)
        salt = (segment,) if segment else ()
        if config.shuffle:
            shares = partition_episodes(remaining, world.world_size, config.seed, epoch, *salt)
            mine = shares[world.rank]
            rng = np.random.default_rng([config.seed, epoch, world.rank, 0xAD, *salt])
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
        self._log: list[tuple[bool, int]] = []  # pool entries/exits of the sampler, taken per batch
        self._restart()

    def _restart(self) -> None:
        """Back to the epoch's first batch: a fresh sampler, nothing drawn, nothing kept."""
        self._pass = 0
        self._log.clear()
        self._sampler = self._new_sampler()
        # The last KEPT_BATCHES drawn batches (from batch `_base` on), not the whole epoch: 0.73 KB a batch
        # of 16 would be 183 MB by batch 250,000 (issue 28). An earlier batch is drawn again from the start.
        self._base = 0
        self._episodes: deque[np.ndarray] = deque()
        self._frames: deque[np.ndarray] = deque()
        self._events: deque[tuple[tuple[bool, int], ...]] = deque()  # per batch: pool (entered?, position) in order
        self._live: dict[int, None] = {}  # positions open in the pool after the last batch drawn

    def _frames_of(self, pos: int):
        """The frames episode `pos` hands out this segment, ascending (a range when none were consumed)."""
        if pos in self._available:
            return self._available[pos]
        first = int(self._first[pos])
        return range(first, first + int(self._remaining[pos]))

    def _new_sampler(self):
        counts = self._remaining[self.admission_order].tolist()
        available = [self._frames_of(int(p)) for p in self.admission_order]
        if not self.config.shuffle:
            return _InOrder(counts, available, self._log)
        words = (self.config.seed, self.epoch, self.world.rank, 0x5A) + ((self._pass,) if self._pass else ())
        words += (1000 + self.segment,) if self.segment else ()
        return _PoolSampler(counts, self.config.pool_size, random.Random(_seed_int(*words)), available, self._log)

    def _draw(self, n: int) -> tuple[list[int], list[int]]:
        """n samples of this rank's stream; after its own frames come padding passes over them again."""
        eps: list[int] = []
        frames: list[int] = []
        while len(eps) < n:
            if self._sampler.remaining == 0:
                self._pass += 1
                self._sampler = self._new_sampler()
            e, f = self._sampler.draw(n - len(eps))
            eps.extend(e)
            frames.extend(f)
        return eps, frames

    def __len__(self) -> int:
        return self.num_batches

    @property
    def _drawn(self) -> int:
        """Batches drawn so far (the kept ones end there)."""
        return self._base + len(self._episodes)

    def _materialise(self, index: int) -> None:
        if index < self._base:
            self._restart()
        while self._drawn <= index:
            done = self._drawn * self.config.batch_size
            local, frames = self._draw(min(self.config.batch_size, self.num_samples - done))
            self._episodes.append(self.admission_order[np.asarray(local, dtype=np.int64)])
            self._frames.append(np.asarray(frames, dtype=np.int64))
            events = tuple((entered, int(self.admission_order[i])) for entered, i in self._log)
            self._events.append(events)
            self._log.clear()
            for entered, pos in events:
                if entered:
                    self._live[pos] = None
                else:
                    self._live.pop(pos, None)
            if len(self._episodes) > KEPT_BATCHES:
                self._episodes.popleft()
                self._frames.popleft()
                self._events.popleft()
                self._base += 1

    def batch(self, index: int) -> BatchPlan:
        if not 0 <= index < self.num_batches:
            raise IndexError(f"batch {index} is outside epoch {self.epoch}, which has {self.num_batches} batches")
        self._materialise(index)
        k = index - self._base
        episodes, frames, events = self._episodes[k], self._frames[k], self._events[k]
        lengths = self.lengths[episodes]
        windows = {key: window(frames, lengths, deltas) for key, deltas in self.config.delta_indices.items()}
        return BatchPlan(self.epoch, index, episodes, frames, windows,
                         tuple(p for entered, p in events if entered), tuple(p for entered, p in events if not entered))

    def pool_before(self, index: int) -> list[int]:
        """Positions open in the pool when batch `index` starts drawing (admitted earlier, not yet retired):
        the pool after the last batch drawn, with the later batches' entries and exits undone."""
        if index <= 0:
            return []
        self._materialise(index - 1)
        if index < self._base:  # drawn beyond the kept batches: draw again up to it
            self._restart()
            self._materialise(index - 1)
        live = dict(self._live)
        for k in range(self._drawn - 1, index - 1, -1):
            for entered, pos in reversed(self._events[k - self._base]):
                if entered:
                    live.pop(pos, None)
                else:
                    live[pos] = None
        return list(live)


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
                f"tolerance_s={tolerance_s}: {bad}; use k / {fps} seconds for integer k"
            )
        out[key] = tuple(int(round(d * fps)) for d in deltas)
    return out


def consumed_by(lengths: np.ndarray, config: PlanConfig, world_size: int, epoch: int, batches: int,
                consumed: dict[int, np.ndarray] | None = None, segment: int = 0) -> dict[int, np.ndarray]:
    """Frames every rank of `world_size` drew in the first `batches` batches of a plan segment, added to
    `consumed` (episode position -> bool mask). Pure replay: plans are drawn, nothing is decoded."""
    lengths = np.asarray(lengths, dtype=np.int64)
    out = {p: m.copy() for p, m in (consumed or {}).items()}
    for rank in range(world_size):
        plan = EpochPlan(lengths, config, World(rank=rank, world_size=world_size), epoch, consumed, segment)
        for i in range(min(batches, plan.num_batches)):
            b = plan.batch(i)
            for p, f in zip(b.episodes.tolist(), b.frames.tolist()):
                mask = out.get(p)
                if mask is None:
                    mask = out[p] = np.zeros(int(lengths[p]), dtype=bool)
                mask[f] = True
    return out


def resume_plan(lengths: np.ndarray, config: PlanConfig, world: World, epoch: int,
                chain: list[tuple[int, int]]) -> EpochPlan:
    """The plan of this rank for the rest of `epoch` after the job ran `chain` = [(world_size, batches), ...]
    segments of it on other world sizes (elastic resume). Frames drawn in those segments are not drawn
    again; everything else of the epoch is, exactly once (padding aside). Without a chain: the epoch plan."""
    consumed: dict[int, np.ndarray] = {}
    for k, (world_size, batches) in enumerate(chain):
        consumed = consumed_by(lengths, config, world_size, epoch, batches, consumed, k)
    return EpochPlan(lengths, config, world, epoch, consumed if chain else None, len(chain))
