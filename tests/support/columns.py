"""Columns added to a written sample's frame tables, as lerobot's tools add them (its annotation writer, its image
and N-D features): the feature declared in info.json, its column in every data file, row group by row group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Mapping

import pyarrow as pa
import pyarrow.parquet as pq


def ids(table: pa.Table) -> list[tuple[int, int]]:
    """(episode, frame) of each row of a frame table."""
    return list(zip(table.column("episode_index").to_pylist(), table.column("frame_index").to_pylist()))


def add_columns(root: Path, features: Mapping[str, dict], make: Callable[[pa.Table], Mapping[str, pa.Array]],
                first: bool = False, after: str | None = None) -> None:
    """Declare `features` in `root`'s info.json and add their columns to its data files: `make(rows)` gives a row
    group's (one episode's, as written) values per feature; `first` puts them before the other columns, as lerobot
    writes image features converted from v2.1 or published for pi0; `after`: right after that column, as lerobot's
    recorder writes a camera's (after the robot's action and state, before `timestamp`)."""
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info["features"] = {**features, **info["features"]} if first else {**info["features"], **features}
    path.write_text(json.dumps(info))
    for data in sorted((root / "data").rglob("*.parquet")):
        pf = pq.ParquetFile(data)
        groups = []
        for g in range(pf.metadata.num_row_groups):
            table = pf.read_row_group(g)
            at = 0 if first else None if after is None else table.schema.get_field_index(after) + 1
            for n, (name, values) in enumerate(make(table).items()):
                table = table.append_column(name, values) if at is None else table.add_column(at + n, name, values)
            groups.append(table)
        with pq.ParquetWriter(data.with_suffix(".new"), groups[0].schema) as out:
            for table in groups:
                out.write_table(table)
        data.with_suffix(".new").replace(data)
