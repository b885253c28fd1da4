"""The two orders of a pass over a rank's episodes (`EpochPlan`): `Lanes`, an episode pool as interleaved lanes,
and `GlobalPass`, a global shuffle of every frame; each a pure function from a position in the pass to (episode,
frame), so any batch is computed without drawing the ones before it (`plan.epoch`'s module doc)."""

from __future__ import annotations

import heapq

import numpy as np

from .permute import permute, round_keys


class Lanes:
    """One pass over a rank's episodes as `lanes` interleaved lanes (see the module docstring): a pure function
    from a position in the pass to (episode, frame), so any batch of the epoch is computed without drawing the
    ones before it.

    Episodes go, in admission order, to the lane that has the fewest frames so far (the one that frees first:
    every lane hands out one frame per turn), each lane handing out its episodes one after another. The pass's
    stream visits lanes in turn: stream index n is lane n % lanes at lane offset n // lanes, skipped once that lane
    has handed out all its frames. Each episode hands out its frames in a seeded random order (`shuffle`), or in
    order."""

    lanes: int
    members: list[np.ndarray]  # per lane: its episodes (local indices), in the order it hands them out
    starts: list[np.ndarray]  # per lane: the lane offset at which each of them begins
    totals: np.ndarray  # per lane: frames it hands out
    frames: int  # frames of the pass

    def __init__(self, counts: list[int], frames_of, lanes: int, shuffle: bool, seed_words: tuple[int, ...],
                 like: "Lanes | None" = None) -> None:
        """`like`: a pass over the same episodes whose lane assignment this one reuses (only the random seed differs)."""
        self.counts, self.frames_of, self.shuffle, self.seed_words = counts, frames_of, shuffle, seed_words
        self._perms: dict[int, np.ndarray] = {}
        self._flat_lanes: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None  # `_flat`, made on first use
        if like is not None:
            self.lanes, self.members, self.starts = like.lanes, like.members, like.starts
            self.totals, self.frames = like.totals, like.frames
            return
        busy = [i for i, c in enumerate(counts) if c > 0]
        self.lanes = max(1, min(lanes, len(busy)))
        heap = [(0, lane) for lane in range(self.lanes)]
        members: list[list[int]] = [[] for _ in range(self.lanes)]
        starts: list[list[int]] = [[] for _ in range(self.lanes)]
        for i in busy:
            total, lane = heapq.heappop(heap)
            members[lane].append(i)
            starts[lane].append(total)
            heapq.heappush(heap, (total + counts[i], lane))
        self.members = [np.asarray(m, dtype=np.int64) for m in members]
        self.starts = [np.asarray(st, dtype=np.int64) for st in starts]
        self.totals = np.zeros(self.lanes, dtype=np.int64)
        for total, lane in heap:
            self.totals[lane] = total
        self.frames = int(self.totals.sum())

    def _visits(self, n, lane):
        """Turns lane(s) `lane` had at stream positions < n (whether or not they still had frames)."""
        return np.maximum(0, (n - lane + self.lanes - 1) // self.lanes)

    def _before(self, n: int) -> int:
        """Stream positions < n that are samples (not skipped)."""
        return int(np.minimum(self._visits(n, np.arange(self.lanes)), self.totals).sum())

    def stream_index(self, v: int) -> int:
        """The stream position of the pass's `v`-th sample (0 <= v < frames)."""
        lo, hi = v, self.lanes * int(self.totals.max())  # _before(lo) <= v < _before(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self._before(mid) <= v:
                lo = mid
            else:
                hi = mid
        return lo

    def at(self, n: int) -> tuple[int, int, int] | None:
        """(episode, place in its frame order, frame) at stream position n; None where the lane is done."""
        lane, offset = n % self.lanes, n // self.lanes
        if offset >= self.totals[lane]:
            return None
        k = int(np.searchsorted(self.starts[lane], offset, side="right")) - 1
        episode = int(self.members[lane][k])
        place = offset - int(self.starts[lane][k])
        return episode, place, int(self._order(episode)[place])

    def _order(self, episode: int) -> np.ndarray:
        """The frames episode `episode` hands out this pass, in their (seeded) order; a few kept."""
        found = self._perms.get(episode)
        if found is None:
            found = np.asarray(self.frames_of(episode), dtype=np.int64)
            if self.shuffle:
                found = np.random.default_rng([*self.seed_words, episode]).permutation(found)
            if len(self._perms) >= 64:
                self._perms.pop(next(iter(self._perms)))
            self._perms[episode] = found
        return found

    def drawn_before(self, n: int) -> dict[int, np.ndarray]:
        """Frames handed out at stream positions < n, per episode (local index): whole episodes and each lane's
        current one's first frames in its order."""
        out: dict[int, np.ndarray] = {}
        for lane in range(self.lanes):
            visits = min(int(self.totals[lane]), int(self._visits(n, lane)))
            for k in range(int(np.searchsorted(self.starts[lane], visits, side="left"))):
                episode, begun = int(self.members[lane][k]), int(self.starts[lane][k])
                out[episode] = self._order(episode)[:visits - begun]
        return out

    def span(self, v: int, stop: int) -> tuple[list[int], list[int], list[int]]:
        """Samples [v, stop) of the pass: (episode, frame, place in its frame order) each; what `at` gives at
        the stream positions from `stream_index(v)` on that are samples, found for all of them at once (a batch's
        plan is drawn on the caller's thread)."""
        want = stop - v
        if want <= 0:
            return [], [], []
        n, taken, found = self.stream_index(v), 0, []
        size = want + self.lanes
        while taken < want:  # the positions are samples where their lane still has frames at their offset
            ns = np.arange(n, n + size, dtype=np.int64)
            ns = ns[ns // self.lanes < self.totals[ns % self.lanes]][:want - taken]
            found.append(ns)
            taken, n, size = taken + len(ns), n + size, size * 2
        ns = np.concatenate(found)
        stride, keys, firsts, members = self._flat()
        lane, offset = ns % self.lanes, ns // self.lanes
        k = np.searchsorted(keys, lane * stride + offset, side="right") - 1
        eps, places = members[k].tolist(), (offset - firsts[k]).tolist()
        return eps, [int(self._order(e)[p]) for e, p in zip(eps, places)], places

    def _flat(self) -> tuple[int, np.ndarray, np.ndarray, np.ndarray]:
        """Every lane's episodes in one sorted array for `span`: the stride (more than any lane offset), and per
        episode lane x stride + start, start, episode."""
        if self._flat_lanes is None:
            stride = int(self.totals.max()) + 1
            lanes = np.repeat(np.arange(self.lanes, dtype=np.int64), [len(st) for st in self.starts])
            firsts = np.concatenate(self.starts) if self.starts else np.zeros(0, np.int64)
            members = np.concatenate(self.members) if self.members else np.zeros(0, np.int64)
            self._flat_lanes = (stride, lanes * stride + firsts, firsts, members)
        return self._flat_lanes

    def drawn(self, end: int) -> dict[int, np.ndarray]:
        """Frames handed out by the pass's first `end` samples (0 < end < frames), per episode (local index)."""
        return self.drawn_before(self.stream_index(end - 1) + 1)

    def open_after(self, v: int) -> list[int]:
        """Episodes open in the pool when the pass's sample `v` is drawn."""
        return self.open_at(self.stream_index(v))

    def open_at(self, n: int) -> list[int]:
        """Episodes handing out frames at stream position n: begun before it, not finished."""
        out = []
        for lane in range(self.lanes):
            offset = int(self._visits(n, lane))
            if offset < self.totals[lane]:
                k = int(np.searchsorted(self.starts[lane], offset, side="right")) - 1
                if offset > self.starts[lane][k]:
                    out.append(int(self.members[lane][k]))
        return out


class GlobalPass:
    """One pass over a rank's episodes as a global shuffle (`pool_size` None): the pass's frames (each episode's
    `frames_of` in a row) in the order of a seeded permutation of all of them (`plan.permute`), so any sample of
    the pass is any frame of the rank's share with equal chance, and sample v is computed on its own in constant
    time and memory. No episode is held open: a batch's episodes come and go with it."""

    ends: np.ndarray
    starts: np.ndarray
    frames: int

    def __init__(self, counts: list[int], frames_of, seed_words: tuple[int, ...], like: "GlobalPass | None" = None) -> None:
        self.counts, self.frames_of = counts, frames_of
        self.keys = round_keys(seed_words)
        if like is not None:
            self.ends, self.starts, self.frames = like.ends, like.starts, like.frames
            return
        self.ends = np.cumsum(np.asarray(counts, dtype=np.int64))  # sample j of the pass's concatenation is
        self.starts = self.ends - np.asarray(counts, dtype=np.int64)  # episode searchsorted(ends, j, "right")
        self.frames = int(self.ends[-1]) if len(self.ends) else 0

    def _locate(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(episode, place) of concatenation indices `flat`."""
        eps = np.searchsorted(self.ends, flat, side="right")
        return eps, flat - self.starts[eps]

    def span(self, v: int, stop: int) -> tuple[list[int], list[int], list[int]]:
        eps, places = self._locate(permute(np.arange(v, stop, dtype=np.int64), self.frames, self.keys))
        frames = [int(self.frames_of(e)[p]) for e, p in zip(eps.tolist(), places.tolist())]
        return eps.tolist(), frames, places.tolist()

    def drawn(self, end: int) -> dict[int, np.ndarray]:
        eps, places = self._locate(permute(np.arange(end, dtype=np.int64), self.frames, self.keys))
        order = np.argsort(eps, kind="stable")
        eps, places = eps[order], places[order]
        out: dict[int, np.ndarray] = {}
        bounds = np.flatnonzero(np.diff(eps)) + 1
        for part_eps, part_places in zip(np.split(eps, bounds), np.split(places, bounds)):
            if len(part_eps):
                episode = int(part_eps[0])
                out[episode] = np.asarray(self.frames_of(episode), dtype=np.int64)[part_places]
        return out

    def open_after(self, v: int) -> list[int]:
        return []
