"""The episodes table (meta/episodes) as the loader reads it, by column, and as lerobot's users read it, by row."""

from __future__ import annotations

import operator
from typing import Any


class EpisodeTable(dict):
    """The episodes table (meta/episodes) as columns, `table["length"]` an array of every episode's, and, as lerobot's
    `meta.episodes` (a Hugging Face dataset) also gives them, rows: `table[0]` the first episode's row as a dict of
    its values, `table[-1]` the last's."""

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            return dict.__getitem__(self, key)
        try:
            row = operator.index(key)
        except TypeError:
            return dict.__getitem__(self, key)
        n = len(dict.__getitem__(self, "episode_index"))
        if not -n <= row < n:
            raise IndexError(f"episode row {row} is out of range: the episodes table holds {n} rows (columns: "
                             f"{', '.join(sorted(self))[:200]})")
        return {name: (column[row].item() if hasattr(column[row], "item") else column[row])
                for name, column in self.items()}
