"""A seeded random permutation of [0, n) evaluated at any index in constant time and memory.

A global shuffle of a 10-million-frame epoch must not materialise a 10-million-entry permutation per rank, pass
and epoch, and resume must reach sample *i* without drawing the samples before it. `permute(i, n, key)` is a
bijection of [0, n) computed pointwise: a four-round balanced Feistel network over the smallest even number of
bits that covers n (so its domain is below 4n), each round's function a 64-bit mixer (splitmix64's finaliser)
of the half and that round's key; values that land at or beyond n are encrypted again until they fall inside
("cycle walking", which stays a bijection of [0, n)). Numpy only: the planner imports no IO.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

ROUNDS = 4
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def round_keys(words: Sequence[int]) -> np.ndarray:
    """The Feistel round keys of a seed (a sequence of non-negative integers, e.g. (seed, epoch, rank, pass))."""
    return np.random.default_rng(list(words)).integers(0, 2**63, ROUNDS, dtype=np.uint64)


def permute(index: np.ndarray, n: int, keys: np.ndarray) -> np.ndarray:
    """Where each of `index` (int64, each in [0, n)) goes under the permutation of [0, n) that `keys` (from
    `round_keys`) names; int64 out."""
    x = np.asarray(index, dtype=np.int64)
    if n <= 1:
        return np.zeros_like(x)
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = np.uint64((1 << half) - 1)
    shift = np.uint64(half)

    def encrypt(v: np.ndarray) -> np.ndarray:
        left, right = v >> shift, v & mask
        with np.errstate(over="ignore"):
            for k in keys:
                left, right = right, left ^ (_mix(right ^ k) & mask)
        return (left << shift) | right

    y = encrypt(x.astype(np.uint64))
    limit = np.uint64(n)
    outside = np.flatnonzero(y >= limit)
    while len(outside):
        y[outside] = encrypt(y[outside])
        outside = outside[y[outside] >= limit]
    return y.astype(np.int64)
