"""An image column of an episode's rows read from a row group mapped from `table_cache_dir`, not copied.

A data file written as one row group for many episodes (lerobot's dataset tools) is decoded once into the table cache
and read memory-mapped (`fetch.decoded_groups`). Its episodes' encoded images then already lie on a local drive, in
pages the system's page cache holds or drops: the rows keep a view of the mapped column (`MappedImages`) instead of a
copy of each image in memory (which the store would count against `cache_bytes` and, past it, write to the drive
again: `fetch.image_spill`). A sample's image is read from the mapping by the worker decoding it.
"""

from __future__ import annotations

import numpy as np


class MappedImages:
    """An image column (the Arrow binary chunks of a mapped table's slice): `column[i]` the `i`-th row's encoded
    image, a read-only `memoryview` of the mapped file (no copy: the decoder copies it into its packet), as the object
    array it replaces gives `bytes`. `nbytes`: what it holds in memory (its row offsets; the images are the mapped
    file's pages)."""

    def __init__(self, chunks: list) -> None:
        chunks = [c for c in chunks if len(c)]  # their buffers are kept alive by the views of them
        self.starts = np.cumsum([0, *(len(c) for c in chunks)])
        self._parts = [_offsets_and_data(c) for c in chunks]

    def __len__(self) -> int:
        return int(self.starts[-1])

    def __getitem__(self, i: int) -> memoryview:
        i = int(i)
        if not 0 <= i < len(self):
            raise IndexError(f"row {i} of an image column of {len(self)} rows")
        chunk = 0 if len(self._parts) == 1 else int(np.searchsorted(self.starts, i, side="right")) - 1
        offsets, data = self._parts[chunk]
        row = i - int(self.starts[chunk])
        return data[int(offsets[row]):int(offsets[row + 1])]

    @property
    def nbytes(self) -> int:
        return 8 * (len(self) + 1)


def _offsets_and_data(chunk) -> tuple[np.ndarray, memoryview]:
    """A binary chunk's row offsets (its own rows', relative to its data buffer) and that buffer, as views: a null
    row is an empty image (its offsets equal, as Arrow writes them)."""
    import pyarrow as pa

    _, offsets, data = chunk.buffers()
    kind = np.int64 if pa.types.is_large_binary(chunk.type) else np.int32
    rows = np.frombuffer(offsets, dtype=kind)[chunk.offset:chunk.offset + len(chunk) + 1]
    return rows, memoryview(data if data is not None else b"").cast("B").toreadonly()  # bytes, as `bytes` compare
