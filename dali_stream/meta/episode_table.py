"""The episodes table (meta/episodes) as the loader reads it, by column, and as lerobot's users read it, by row; and
the check that it names each episode once."""

from __future__ import annotations

import operator
from typing import Any, Iterator, Sequence

import numpy as np

from ..errors import DatasetError
from ..source.storage import parquet_errors, parquet_file


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


def read_episode_tables(fs, files: list[str], needed: Sequence[str] = ()):
    """The episode tables `files` as one pyarrow Table, every column but lerobot's per-episode stats (most of a
    table's bytes, never read), and the rows each file gave. Each of the `needed` columns that some file holds must be in every file, with a
    value in every row (`check_complete`): concatenated, a file without it would read as nulls (NaN times)."""
    import pyarrow as pa

    tables = []
    for path in files:
        with parquet_errors(path):
            pf = parquet_file(fs, path)
            keep = [c for c in pf.schema_arrow.names if not c.startswith("stats/")]
            tables.append(pf.read(columns=keep, use_threads=False))
    if needed:
        check_complete(files, tables, needed)
    return pa.concat_tables(tables, promote_options="default"), [t.num_rows for t in tables]


def check_complete(files: list[str], tables: list, needed: Sequence[str]) -> None:
    """Raise DatasetError naming each episodes file that lacks one of the `needed` columns another file holds (a
    column no file holds is the caller's to report), or holds a null or NaN in one: the file, the columns, its
    episodes and the fix. Reads only the tables' schemas and null counts, and the NaNs of float columns."""
    held = {c for t in tables for c in t.column_names}
    found = []
    for path, table in zip(files, tables):
        missing = [c for c in needed if c in held and c not in table.column_names]
        empty = {c: rows for c in needed if c in table.column_names and len(rows := _empty_rows(table.column(c)))}
        if not missing and not empty:
            continue
        what = [f"has no column{'s' if len(missing) > 1 else ''} {missing} (the other episode tables have it), "
                f"so {_episodes_text(table, None)} have none"] if missing else []
        what += [f"column {c!r} is empty (null or NaN) for {_episodes_text(table, rows)}" for c, rows in empty.items()]
        found.append(f"episodes file {path}: {'; '.join(what)}")
    if found:
        more = f"; and {len(found) - 3} other episodes files" if len(found) > 3 else ""
        raise DatasetError(
            f"{'; '.join(found[:3])}{more}. The loader needs these columns to locate each episode's rows and video "
            "bytes (an episode without them would be read at NaN seconds); re-download meta/episodes, or write the "
            "file again with lerobot's tools (LeRobotDataset, lerobot-edit-dataset), which write every column")


def _empty_rows(column) -> np.ndarray:
    """The rows of a pyarrow column that hold null, or NaN in a float column."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_floating(column.type):
        return np.flatnonzero(column.is_null().to_numpy()) if column.null_count else np.empty(0, np.int64)
    return np.flatnonzero(pc.fill_null(pc.is_nan(column), True).to_numpy())


def _episodes_text(table, rows: np.ndarray | None) -> str:
    """"episodes [3, 4, 5]" of a table's `rows` (all its rows: None), "episodes 0 to 1999 (2000)" for a longer run,
    the first few and the count otherwise; "N rows" where the table has no episode_index."""
    count = table.num_rows if rows is None else len(rows)
    if "episode_index" not in table.column_names:
        return f"its {count} rows (its episode_index is missing too)"
    column = table.column("episode_index")
    held = np.flatnonzero(~column.is_null().to_numpy()) if column.null_count else np.arange(table.num_rows)
    chosen = held if rows is None else np.intersect1d(rows, held)
    episodes = sorted(int(e) for e in column.to_numpy(zero_copy_only=False)[chosen])
    if len(chosen) < count:  # rows whose episode_index is null too: told by their row numbers
        unnamed = np.setdiff1d(np.arange(table.num_rows) if rows is None else rows, held)
        rows_text = f"rows {unnamed[:10].tolist()}{' ...' if len(unnamed) > 10 else ''} (without an episode_index)"
        return f"episodes {episodes} and {rows_text}" if episodes else rows_text
    if len(episodes) <= 10:
        return f"episodes {episodes}"
    if episodes[-1] - episodes[0] == len(episodes) - 1:
        return f"episodes {episodes[0]} to {episodes[-1]} ({len(episodes)})"
    return f"episodes [{', '.join(map(str, episodes[:5]))}, ...] ({len(episodes)} in all)"
