"""Which episodes a loader plans over: `episodes=[...]` (a train/val split, as lerobot's `episodes=`) and the
`max_episodes` cap, as the lengths the planner sees (an episode left out has length 0 and is never drawn).

Pure numpy: the planner, resume and elastic resume work unchanged over the subset, and a saved state
records the selection's digest, so it refuses to resume over another one.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

import numpy as np

from ..errors import ConfigError


def select(episode_index: np.ndarray, lengths: np.ndarray, episodes: Iterable[int] | None,
           max_episodes: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(lengths for the planner, selected episode indices ascending) for the dataset's episodes table."""
    episode_index = np.asarray(episode_index, dtype=np.int64)
    chosen = episode_index.copy()
    if episodes is not None:
        if isinstance(episodes, (str, bytes)) or not hasattr(episodes, "__iter__"):
            raise ConfigError(f"`episodes` must be a list of episode indices. Found: {episodes!r}")
        wanted = list(episodes)
        bad = [e for e in wanted if isinstance(e, bool) or not isinstance(e, (int, np.integer))]
        if bad:
            raise ConfigError(f"`episodes` must hold integer episode indices. Found: {bad[:5]}")
        unknown = sorted(set(int(e) for e in wanted) - set(episode_index.tolist()))
        if unknown:
            raise ConfigError(
                f"`episodes` names episodes {unknown[:10]}{' ...' if len(unknown) > 10 else ''} that the dataset "
                f"does not have; its episode indices run {int(episode_index.min())}..{int(episode_index.max())} "
                f"({len(episode_index)} episodes)")
        chosen = np.unique(np.asarray(wanted, dtype=np.int64))
    if max_episodes is not None:
        if isinstance(max_episodes, bool) or not isinstance(max_episodes, int) or max_episodes < 1:
            raise ConfigError(f"`max_episodes` must be a positive integer. Found: {max_episodes!r}")
        chosen = chosen[:max_episodes]  # the first ones in episode order
    if len(chosen) == 0:
        raise ConfigError("`episodes=[]` selects no episode; pass at least one episode index")
    keep = np.isin(episode_index, chosen)
    return np.where(keep, lengths, 0).astype(np.int64), chosen


def digest(chosen: np.ndarray) -> str:
    """SHA-256 of the selected episode indices (what a saved state must agree on)."""
    return hashlib.sha256(np.asarray(chosen, dtype="<i8").tobytes()).hexdigest()
