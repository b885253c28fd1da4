"""A mixture's epoch: how many samples each member and each of its episodes hands out, and which frames.

Pure numpy. The planner (`epoch.EpochPlan`) sees a mixture as one list of episode positions, the members'
episodes one after another (`Mix.member_of` says whose each is). Without weights an epoch draws every frame
once, exactly as a single dataset of those episodes. With weights, member m's share of the epoch's samples is
proportional to its frames times its weight:

    target_m = samples_per_epoch * frames_m * weight_m / sum_j(frames_j * weight_j)

or, with shares (`Member.share`), `samples_per_epoch * share_m / sum_j(share_j)` whatever the frames
(`samples_per_epoch` defaults to the frames of all members: weight 1 everywhere is the concatenation), rounded
to integers by largest remainder (`member_targets`). A member's target is spread over its episodes in
proportion to their frames by systematic sampling in a seeded order (`quotas`): each episode draws the floor
or the ceiling of its expected share. Each episode's draws (`draws`): every frame `q // n` times, plus a seeded
subset of `q % n` distinct frames. So a member smaller than its share repeats each frame a whole number of
times (plus part of them once more), and a larger one is subsampled with no frame drawn twice in the epoch.
All of it is a function of (frames available, weights, seed, epoch) alone: the same on every rank and world
size, which elastic resume needs (frames already drawn are subtracted from these draws).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from ..errors import ConfigError
from . import salts


@dataclass(frozen=True)
class Mix:
    """The planner's view of a mixture: the member of every episode position, the members' weights, the epoch's
    size and, per member, the frame offsets of each windowed key (None: the member lacks the key, so its samples
    are all padding there)."""

    member_of: np.ndarray  # (E,) int64: the member of each episode position
    weights: tuple[float, ...]
    samples_per_epoch: int | None = None
    delta_indices: tuple[Mapping[str, tuple[int, ...] | None], ...] = field(default_factory=tuple)
    shares: tuple[float, ...] | None = None  # each member's part of the epoch's samples, in place of weights

    def __post_init__(self) -> None:
        member_of = np.asarray(self.member_of, dtype=np.int64)
        object.__setattr__(self, "member_of", member_of)
        if not self.weights:
            raise ConfigError("a mixture needs at least one member")
        bad = [w for w in self.weights if isinstance(w, bool) or not isinstance(w, (int, float))
               or not math.isfinite(w) or w <= 0]
        if bad:
            raise ConfigError(f"mixture weights must be finite numbers > 0. Found: {bad}")
        if len(member_of) and (member_of.min() < 0 or member_of.max() >= len(self.weights)):
            raise ConfigError(f"member_of names members outside 0..{len(self.weights) - 1}")
        spe = self.samples_per_epoch
        if spe is not None and (isinstance(spe, bool) or not isinstance(spe, int) or spe < 1):
            raise ConfigError(f"`samples_per_epoch` must be a positive integer. Found: {spe!r}")
        if self.shares is not None and (len(self.shares) != len(self.weights) or
                                        any(not math.isfinite(s) or s <= 0 for s in self.shares)):
            raise ConfigError(f"mixture shares must be one finite number > 0 per member. Found: {self.shares}")
        if self.delta_indices and len(self.delta_indices) != len(self.weights):
            raise ConfigError(f"delta_indices has {len(self.delta_indices)} members' offsets for "
                              f"{len(self.weights)} members")

    @property
    def reweights(self) -> bool:
        """Whether an epoch differs from drawing every frame once: unequal weights, shares or a set epoch size."""
        return self.samples_per_epoch is not None or self.shares is not None or len(set(self.weights)) > 1


def member_mass(frames: np.ndarray, weights: tuple[float, ...], shares: tuple[float, ...] | None = None) -> np.ndarray:
    """Each member's unnormalised part of an epoch: frames x weight, or its share where members give shares (0 for
    a member with no frames: its share goes to the others, in proportion)."""
    frames = np.asarray(frames, dtype=np.int64)
    if shares is not None:
        return np.where(frames > 0, np.asarray(shares, dtype=np.float64), 0.0)
    return frames.astype(np.float64) * np.asarray(weights, dtype=np.float64)


def member_targets(frames: np.ndarray, weights: tuple[float, ...], total: int,
                   shares: tuple[float, ...] | None = None) -> np.ndarray:
    """Samples of each member in an epoch of `total` samples: in proportion to `member_mass`, integers summing to
    `total` (largest remainder; ties to the earlier member). A member with no frames gets none."""
    frames = np.asarray(frames, dtype=np.int64)
    mass = member_mass(frames, weights, shares)
    if mass.sum() <= 0:
        return np.zeros(len(frames), dtype=np.int64)
    exact = total * mass / mass.sum()
    out = np.floor(exact).astype(np.int64)
    short = int(total - out.sum())
    if short > 0:
        order = np.lexsort((np.arange(len(exact)), -(exact - out)))  # largest remainder first, then member order
        out[order[:short]] += 1
    return out


def quotas(available: np.ndarray, mix: Mix, seed: int, epoch: int) -> np.ndarray:
    """Draws of each episode position this epoch (`available`: frames each may hand out). Weight-free mixtures
    (`Mix.reweights` False) draw each frame once: `available` itself."""
    available = np.asarray(available, dtype=np.int64)
    if not mix.reweights:
        return available.copy()
    frames = np.bincount(mix.member_of, weights=available, minlength=len(mix.weights)).astype(np.int64)
    total = mix.samples_per_epoch if mix.samples_per_epoch is not None else int(frames.sum())
    targets = member_targets(frames, mix.weights, total, mix.shares)
    out = np.zeros(len(available), dtype=np.int64)
    for m, target in enumerate(targets.tolist()):
        positions = np.flatnonzero((mix.member_of == m) & (available > 0))
        if target == 0 or len(positions) == 0:
            continue
        if target == int(frames[m]):
            out[positions] = available[positions]
            continue
        # systematic sampling in a seeded order: episode k gets floor(C_k + u) - floor(C_{k-1} + u) of the target,
        # C the cumulative expected draws (frames x target / member frames): the floor or ceiling of its share
        rng = np.random.default_rng([seed, epoch, m, salts.MEMBER_EPISODES])
        order = positions[rng.permutation(len(positions))]
        expected = available[order] * (target / float(frames[m]))
        cumulative = np.concatenate([[0.0], np.cumsum(expected)])
        cumulative[-1] = float(target)  # no float drift at the end: the target exactly
        u = rng.random()
        got = np.diff(np.floor(cumulative + u).astype(np.int64))
        out[order] = got
    return out


def draws(frames: np.ndarray, quota: int, seed: int, epoch: int, position: int) -> np.ndarray:
    """The frames episode `position` hands out this epoch, ascending: each of `frames` (ascending, distinct)
    `quota // len(frames)` times, plus a seeded subset of `quota % len(frames)` of them once more."""
    frames = np.asarray(frames, dtype=np.int64)
    n = len(frames)
    if n == 0 or quota <= 0:
        return frames[:0]
    whole, part = divmod(int(quota), n)
    extra = np.sort(np.random.default_rng([seed, epoch, position, salts.MEMBER_FRAMES]).permutation(n)[:part])
    return np.sort(np.concatenate([np.repeat(frames, whole), frames[extra]]), kind="stable")


def windows_by_member(frames: np.ndarray, lengths: np.ndarray, members: np.ndarray,
                      offsets: list[tuple[int, ...] | None], steps: int) -> tuple[np.ndarray, np.ndarray]:
    """lerobot's query rows and padding for samples of several members, each member with its own frame offsets
    (`offsets[m]`; None: the member lacks the key, every step is padding and its rows are 0)."""
    frames = np.asarray(frames, dtype=np.int64)
    rows = np.zeros((len(frames), steps), dtype=np.int64)
    is_pad = np.ones((len(frames), steps), dtype=bool)
    for m in np.unique(members).tolist():
        deltas = offsets[m]
        if deltas is None:
            continue
        sel = np.flatnonzero(members == m)
        raw = frames[sel, None] + np.asarray(deltas, dtype=np.int64)[None, :]
        last = np.asarray(lengths, dtype=np.int64)[sel, None] - 1
        rows[sel] = np.clip(raw, 0, last)
        is_pad[sel] = (raw < 0) | (raw > last)
    return rows, is_pad
