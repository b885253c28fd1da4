"""The episodes table (meta/episodes) as the loader reads it, by column, and as lerobot's users read it, by row; and
the check that it names each episode once."""

from __future__ import annotations

import operator
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import DatasetError


class EpisodeTable(dict):
    """The episodes table (meta/episodes) as lerobot's `meta.episodes` (a Hugging Face dataset) gives it: rows,
    `len(table)` of them, `table[0]` the first episode's row as a dict of its values (`table[-1]` the last's),
    iterated row by row; and columns, `table["length"]` an array of every episode's, `table.column_names`. The
    dict's own methods (`keys()`, `items()`, `in`) see the columns."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return dict.__getitem__(self, key)
        try:
            row = operator.index(key)
        except TypeError:
            return dict.__getitem__(self, key)
        n = len(self)
        if not -n <= row < n:
            raise IndexError(f"episode row {row} is out of range: the episodes table holds {n} rows (columns: "
                             f"{', '.join(sorted(self.keys()))[:200]})")
        return {name: (column[row].item() if hasattr(column[row], "item") else column[row])
                for name, column in self.items()}

    def __len__(self) -> int:
        """Rows: the episodes (lerobot's `len(meta.episodes)`)."""
        return len(dict.__getitem__(self, "episode_index")) if dict.__contains__(self, "episode_index") else 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Row after row, as a Hugging Face dataset iterates."""
        return (self[row] for row in range(len(self)))

    @property
    def column_names(self) -> list[str]:
        return list(self.keys())


def refuse_doubled_episodes(index: np.ndarray, order: np.ndarray, rows: Sequence[int], files: Sequence[str]) -> None:
    """A DatasetError where the episodes table gives an episode_index in more than one row (`index`: the column over
    `files`, which gave `rows` rows each; `order`: its ascending order): the loader would plan the episode twice and
    miss the one whose row was overwritten. Numpy over the one column: a few ms for 200,000 episodes."""
    ordered = index[order]
    doubled = np.unique(ordered[1:][ordered[1:] == ordered[:-1]])
    if not len(doubled):
        return
    first = doubled[0]
    holders = np.searchsorted(np.cumsum(rows), np.flatnonzero(index == first), side="right")
    named = sorted({files[int(i)] for i in holders})
    more = f" (and {len(doubled) - 1} more doubled: {doubled[1:6].tolist()}{' ...' if len(doubled) > 6 else ''})" \
        if len(doubled) > 1 else ""
    raise DatasetError(
        f"the episodes table is damaged: episode_index {int(first)} is given by {len(holders)} rows, in "
        f"{', '.join(named)}{more}; each episode must have one row. Rewrite the episodes table with lerobot's "
        "tools or restore meta/episodes from the dataset's source")
