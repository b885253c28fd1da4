"""Read one episode's rows from the data parquet files: only the row groups that hold it.

A file written with one row group for many episodes (lerobot's dataset tools and its v2.1 converter; pandas' and
pyarrow's default) would make every episode read decode the whole group: such a group is decoded once a node and
kept on a local drive, read memory-mapped (`decoded_groups.DecodedGroups`, `table_cache_dir`); without a folder the
last `SHARED_GROUPS` are kept in memory, with one warning per file naming the fix.

An episode's rows may be read without some columns (`without`): the store leaves out a camera stored in the
tables whose every image the decoded-frame cache holds, so later epochs read (and, remote, fetch) none of its bytes;
a column left out is read alone where a sample needs it after all (`column`).

Columns come back as numpy arrays with lerobot's torch dtypes: floating point as float32, integers as
int64, booleans as bool; fixed-size list columns as (rows, dim) arrays. Beside them, `FRAME_TIME_S` holds the
frames' times in float64 (`exact_times`): the times every camera lookup uses. lerobot stores `timestamp` as
float32, whose rounding passes tolerance_s=1e-4 from 2,048 s into an episode (an hour at 30 fps: 6,208 frames).

Why not `fsspec.parquet.open_parquet_file`: opened per episode it re-reads the footer every time (20 episodes
over HTTP: 40 requests and 20x the bytes of this reader's footer-once, range-per-row-group reads;
`benchmarks/library_choices.py`).
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..config import DEFAULT_FOOTER_BYTES
from ..errors import DatasetError, RemoteError
from ..source.local_disk import file_stamp
from ..source.storage import parquet_errors, parquet_file
from .decoded_groups import DecodedGroups
from .mapped_images import MappedImages
from .once import OncePerKey
from .table_widths import check_widths

log = logging.getLogger("dali_stream")

OPENING_THREADS = 16  # data files whose footers a remote reader fetches at once (`TableReader.episodes`)
SHARED_GROUPS = 2  # decoded row groups that hold many episodes kept in memory per reader, without table_cache_dir
# Open data files (their parquet footers) kept per reader, bounded by the footers' memory (`footer_bytes`): a footer takes 7.4x its
# serialized size once parsed (measured: 6.7 MB resident for a 1,000-row-group, 8-column file of 0.9 MB), so
# each is weighed at 8x. Unbounded, 200 such files held 1.4 GB per rank by the end of an epoch.
FOOTER_IN_MEMORY = 8
RANGE_GAP = 1 << 16  # bytes of columns not read between two stretches read in one request rather than two
FRAME_TIME_S = "timestamp@float64"  # rows key of the frames' float64 times (not a feature: never in a batch)


def exact_times(stored: np.ndarray, fps: float) -> np.ndarray:
    """The frames' times in float64 from the `timestamp` column as stored (float32 in lerobot's datasets).

    A stored value that is exactly the rounding, in its own precision, of a whole frame's time k/fps stands for
    k/fps: that is what the recorder wrote (lerobot's `frame_index / fps`), and k/fps is taken exactly. Any other
    value (a clock's jitter) is kept as stored."""
    stored = np.asarray(stored)
    t = stored.astype(np.float64)
    grid = np.round(t * fps) / fps
    return np.where(grid.astype(stored.dtype) == stored, grid, t)


def _objects(col) -> np.ndarray:
    """A text column (strings, lerobot's language annotations: a list of row dicts a frame), or an image column's
    encoded bytes, as one Python object a row."""
    import pyarrow as pa

    values = (col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col).to_pylist()
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):  # not out[:] = values: equal-length lists would broadcast as a 2-D array
        out[i] = value
    return out


def image_bytes(col, mapped: bool = False):
    """An image column's encoded images, one `bytes` a row (HF datasets' Image: a struct of bytes and path): an
    object array, or where `mapped` (`col` a slice of a table mapped from the table cache) a view of the mapping
    (`fetch.mapped_images`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    blobs = pc.struct_field(col, "bytes") if pa.types.is_struct(col.type) else col
    if mapped:
        return MappedImages(blobs.chunks if isinstance(blobs, pa.ChunkedArray) else [blobs])
    return _objects(blobs)


def _shaped(rows: np.ndarray, feature: dict) -> np.ndarray:
    """A column's rows in its feature's shape where that has several dimensions (lerobot's 2-D and 3-D features,
    stored as nested lists: `_to_numpy` flattens each row)."""
    shape = tuple(int(x) for x in feature.get("shape") or ())
    if len(shape) > 1 and rows.ndim == 2 and rows.shape[1] == int(np.prod(shape)):
        return rows.reshape(len(rows), *shape)
    return rows


def _to_numpy(col) -> np.ndarray:
    import pyarrow as pa

    col = col.combine_chunks() if isinstance(col, pa.ChunkedArray) else col
    if pa.types.is_fixed_size_list(col.type) or pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        rows = len(col)
        flat = _to_numpy(col.flatten())
        return flat.reshape(rows, -1) if rows else flat.reshape(0, 0)
    arr = col.to_numpy(zero_copy_only=False)
    if arr.dtype == np.bool_:
        return arr
    if np.issubdtype(arr.dtype, np.floating):
        return arr.astype(np.float32)
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.int64)
    return arr


def rows_nbytes(rows: dict[str, np.ndarray]) -> int:
    """What an episode's rows (`TableReader.episode`) hold in memory: the arrays, and the objects of a column of them
    (an image column's encoded images, a text column's strings; other objects, lerobot's language annotations'
    row dicts, by their own size alone, not their contents')."""
    total = 0
    for v in rows.values():
        total += v.nbytes
        if isinstance(v, np.ndarray) and v.dtype == object:  # not a column on the drive (`image_spill`)
            total += sum(len(x) if isinstance(x, (bytes, str)) else sys.getsizeof(x) for x in v.tolist())
    return total


def _rows_between(table, start: int, stop: int):
    """The rows of `table` (a row group holding many episodes, in `index` order as lerobot writes them) whose
    `index` is in [start, stop): a slice found by binary search (no scan of the group), or the whole table where
    the group is not in that order (the caller filters it)."""
    import pyarrow as pa

    col = table.column("index")
    if isinstance(col, pa.ChunkedArray):  # one chunk as written: its buffer itself (combine_chunks copies it)
        col = col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    index = col.to_numpy()
    lo = int(np.searchsorted(index, start, side="left"))
    n = stop - start
    if lo + n <= len(index) and n and index[lo] == start and index[lo + n - 1] == stop - 1 and \
            (n < 2 or bool((np.diff(index[lo:lo + n]) == 1).all())):
        return table.slice(lo, n)
    return table


def _footer_bytes(value: Any) -> int:
    """What an open data file (`TableReader._open`'s value) holds in memory: its parsed footer."""
    return FOOTER_IN_MEMORY * int(value[0].metadata.serialized_size)


class TableReader:
    """Per-episode rows of the columns in `keys`; parquet footers are read once per file."""

    def __init__(self, meta, keys: list[str], *, footer_bytes: int = DEFAULT_FOOTER_BYTES,
                 shared: "TableReader | None" = None, table_cache_dir: str | None = None,
                 table_cache_bytes: int | None = None) -> None:
        """`footer_bytes`: the bound of the parsed footers of open files (the loader's setting). `shared`: another
        reader whose open files and decoded shared row groups this one shares, within its bounds (a mixture's
        members: one `footer_bytes` for all of them). `table_cache_dir`: where row groups holding many episodes
        are kept decoded (None: the last `SHARED_GROUPS` in memory), `table_cache_bytes` of them at most."""
        self.meta = meta
        self.keys = keys
        # path -> (ParquetFile, row group index ranges, its read lock); evicted handles close when unused
        self.files: OncePerKey = shared.files if shared is not None else \
            OncePerKey(capacity_bytes=footer_bytes, weigh=_footer_bytes)
        # row groups holding many episodes, decoded once (in the folder, or the last few in memory)
        self.groups: DecodedGroups = shared.groups if shared is not None else \
            DecodedGroups(table_cache_dir, SHARED_GROUPS, table_cache_bytes)
        self._stamps: dict[str, tuple] = {}  # data file -> its identity (`file_stamp`), for the groups' names
        self._warned: set[str] = set()
        self._checked: set[str] = set()  # files whose columns were checked against `keys`
        self._widths: set[str] = set()  # files whose columns' widths were checked against info.json's shapes
        self._lock = threading.Lock()
        self.bytes_read = 0  # compressed bytes of the row groups' columns read (parquet footers not counted)
        self.groups_read = 0  # row groups read (a shared one once while it stays kept)

    def _open(self, path: str):
        try:
            with parquet_errors(path):
                pf = parquet_file(self.meta.data_fs, path)
        except FileNotFoundError:
            raise DatasetError(
                f"data file {path} is missing; the dataset is incomplete: re-download data/"
            ) from None
        names = pf.schema_arrow.names
        if "index" not in names:
            raise DatasetError(f"data file {path} has no 'index' column, which every LeRobot v3 frame row carries; "
                               "the dataset's meta and data disagree: re-download it")
        # the statistics are per leaf column: a struct before `index` (an image stored in the table: bytes, path)
        # puts its leaf at another position than its field's
        col = next(c for c in range(len(pf.schema)) if pf.schema.column(c).path == "index")
        ranges = []
        for g in range(pf.metadata.num_row_groups):
            st = pf.metadata.row_group(g).column(col).statistics
            lo, hi = (st.min, st.max) if st is not None and st.has_min_max else (None, None)
            ranges.append((g, lo, hi))
        # one ParquetFile handle is not safe to read from two threads; (row group, columns) -> its stretches (`_span`), once
        return pf, ranges, threading.Lock(), {}

    @staticmethod
    def _span(rg, keys: tuple[str, ...]) -> list[tuple[int, int, int]]:
        """(first byte, end byte, compressed bytes) of each stretch of the column chunks of `keys` in a row group: one
        stretch, but where columns not read (not asked for, or left out: `without`) lie between them over `RANGE_GAP`
        bytes."""
        chunks = []
        for c in range(rg.num_columns):
            col = rg.column(c)
            if not any(col.path_in_schema == k or col.path_in_schema.startswith(k + ".") for k in keys):
                continue
            first = col.dictionary_page_offset if col.has_dictionary_page and col.dictionary_page_offset else \
                col.data_page_offset
            chunks.append((first, first + col.total_compressed_size, col.total_compressed_size))
        out: list[tuple[int, int, int]] = []
        for first, end, size in sorted(chunks):
            if out and first - out[-1][1] <= RANGE_GAP:
                out[-1] = (out[-1][0], max(out[-1][1], end), out[-1][2] + size)
            else:
                out.append((first, end, size))
        return out or [(0, 0, 0)]

    @classmethod
    def _spans(cls, pf, groups: list[int], known: dict | None, keys: tuple[str, ...]) -> list[tuple[int, int, int]]:
        """The stretches (`_span`) of `groups` over `keys`; `known`: the file's spans computed so far (filled
        here)."""
        known = {} if known is None else known
        for g in groups:
            if (g, keys) not in known:
                known[(g, keys)] = cls._span(pf.metadata.row_group(g), keys)
        return [span for g in groups for span in known[(g, keys)]]

    def _read(self, path: str, pf, groups: list[int], read_lock, episode: int, known: dict | None = None,
              fetched: list[tuple[int, bytes]] | None = None, keys: tuple[str, ...] | None = None):
        """Row groups `groups` of `path` (the columns of `keys`; None: all of `self.keys`): remote ones in one range
        request per stretch (`_span`), unless `fetched` holds them already ((offset, bytes) per stretch, `episodes`).
        `known`: the file's spans computed so far (filled here)."""
        keys = tuple(self.keys) if keys is None else keys
        spans = self._spans(pf, groups, known, keys)
        raw: Any = getattr(pf, "raw", None)
        pieces = fetched or []
        if raw is not None and fetched is None:  # remote: each stretch in a request of its own, at once, outside the locks
            try:
                pieces = list(zip([first for first, *_ in spans], self.meta.data_fs.read_ranges(
                    [(path, first, end) for first, end, _ in spans])))
            except RemoteError as exc:
                raise RemoteError(f"{exc} (rows of episode {episode})") from None
        with read_lock, parquet_errors(path, f" (rows of episode {episode})"):
            for first, data in pieces:
                raw.preload(first, data)
            table = pf.read_row_groups(groups, columns=list(keys), use_threads=False)
        with self._lock:
            self.bytes_read += sum(size for *_, size in spans)
            self.groups_read += len(groups)
        return table

    def _warn_shared(self, path: str, pf, group: int) -> None:
        with self._lock:
            if path in self._warned:
                return
            self._warned.add(path)
        rows = pf.metadata.row_group(group).num_rows
        if self.groups.folder is not None:  # set: kept there, or its one warning said why it stopped writing
            log.info("%s: row group %d holds %d rows, many episodes' worth: %s", path, group, rows,
                     f"decoded once into {self.groups.folder}, read from there memory-mapped" if self.groups.writing
                     else "kept in memory (table_cache_dir is no longer written)")
            return
        warnings.warn(
            f"{path}: row group {group} holds {rows} rows, many episodes' worth (lerobot's dataset tools and its v2.1 "
            "converter write a data file as one group), so reading one episode decodes all of them (remote: fetches "
            f"all of them); the last {SHARED_GROUPS} decoded stay in memory. Set table_cache_dir to a local folder "
            "with room for the decoded tables (each group decoded once a node, read memory-mapped), or rewrite the "
            "file with one row group per episode (lerobot.datasets.io_utils.write_table_one_row_group_per_episode)",
            stacklevel=4)

    def _stamp(self, path: str) -> tuple:
        """The data file's identity (`file_stamp`), asked once per file."""
        stamp = self._stamps.get(path)
        if stamp is None:
            stamp = self._stamps[path] = file_stamp(self.meta.data_fs, path)
        return stamp

    def _decoded_group(self, path: str, pf, group: int, read_lock, episode: int):
        """Row group `group` of `path`, one holding many episodes, decoded once (`DecodedGroups`), and whether it is
        mapped from the table cache."""
        return self.groups.get(path, self._stamp(path), (group, tuple(self.keys)),
                               pf.metadata.row_group(group).num_rows, self.keys,
                               functools.partial(self._read, path, pf, [group], read_lock, episode))

    def _file(self, path: str):
        """The open data file (its footer read once, kept within the bound), its columns checked against `keys`."""
        pf, ranges, read_lock, spans = self.files.get((id(self.meta.data_fs), path), lambda: self._open(path))
        if path not in self._checked:
            missing = [k for k in self.keys if k not in pf.schema_arrow.names]
            if missing:
                raise DatasetError(
                    f"data file {path} has no columns {missing}, which meta/info.json declares as features; "
                    "the dataset's meta and data disagree: re-download it"
                )
            self._checked.add(path)
        return pf, ranges, read_lock, spans

    def ndims(self, pos: int) -> dict[str, int]:
        """Each column of `keys` as `episode` returns it, from the data file's schema (its footer only): dimensions
        per row, 0 for a scalar, 1 for a list (nested lists come back flattened to (rows, n), as `_to_numpy` does)."""
        import pyarrow as pa

        pf, *_ = self._file(self.meta.data_file(pos))
        kinds = {key: pf.schema_arrow.field(key).type for key in self.keys}
        return {key: int(pa.types.is_fixed_size_list(t) or pa.types.is_list(t) or pa.types.is_large_list(t))
                for key, t in kinds.items()}

    def episode(self, pos: int, without: frozenset[str] = frozenset()) -> dict[str, np.ndarray]:
        """The episode's rows in frame order, one numpy array per column of `keys` but those in `without`."""
        return self._rows(pos, *self._where(pos), keys=self._keys(without))

    def column(self, pos: int, key: str) -> np.ndarray:
        """One column of the episode's rows, read alone (one that `episode` was asked to leave out)."""
        return self._rows(pos, *self._where(pos), keys=("index", key))[key]

    def _keys(self, without: frozenset[str]) -> tuple[str, ...]:
        return tuple(k for k in self.keys if k not in without)

    def episodes(self, positions: list[int], without: list[frozenset[str]] | None = None) -> list:
        """`episode` of each of `positions` (leaving out the columns of its `without`), or the error reading it
        raised: on a remote store the row groups of all of them read at once (`remote.RemoteFS.read_ranges`: their
        latencies overlap), where one `episode` after another waits a request's latency each (a global shuffle reads
        the rows of a new episode per sample)."""
        keys = [tuple(self.keys)] * len(positions) if without is None else [self._keys(w) for w in without]
        out: list[Any] = [None] * len(positions)
        where: list[Any] = [None] * len(positions)
        self._open_together([self.meta.data_file(pos) for pos in positions])
        asks: list[tuple[int, str, int, int]] = []  # (which, path, first byte, end byte) of the row groups to read
        for n, pos in enumerate(positions):
            try:
                where[n] = found = self._where(pos)
            except Exception as exc:  # noqa: BLE001 - that episode's error, for whoever reads its rows
                out[n] = exc
                continue
            path, pf, groups, _, known, shared = found
            if getattr(pf, "raw", None) is not None and not shared:
                asks += [(n, path, first, end) for first, end, _ in self._spans(pf, groups, known, keys[n])]
        fetched: dict[int, list[tuple[int, bytes]]] = {}
        if asks:
            try:
                got = self.meta.data_fs.read_ranges([(path, first, end) for _, path, first, end in asks])
            except RemoteError:  # one of them failed after its retries: each reads its own, and names its error
                got = None
            if got is not None:
                for (n, _, first, _), data in zip(asks, got):
                    fetched.setdefault(n, []).append((first, data))
        for n, pos in enumerate(positions):
            if where[n] is None:
                continue
            try:
                path, pf, groups, read_lock, spans, shared = where[n]
                out[n] = self._rows(pos, path, pf, groups, read_lock, spans, shared, fetched.get(n), keys[n])
            except Exception as exc:  # noqa: BLE001 - as above
                out[n] = exc
        return out

    def _open_together(self, paths: list[str]) -> None:
        """Open the data files of `paths` not open yet (their footers: two requests each on a remote store) on
        threads of their own, at once; a file that fails is left for `_file` to raise its error per episode."""
        if getattr(self.meta.data_fs, "read_ranges", None) is None:  # local: a footer read costs microseconds
            return
        new = sorted({p for p in paths if not self.files.holds((id(self.meta.data_fs), p))})
        if len(new) < 2:
            return

        def open_one(path: str) -> None:
            try:
                self._file(path)
            except Exception:  # noqa: BLE001 - raised again, named, when its episodes' rows are read
                pass

        with ThreadPoolExecutor(min(OPENING_THREADS, len(new)), thread_name_prefix="dali-stream-footer") as pool:
            list(pool.map(open_one, new))

    def _where(self, pos: int) -> tuple[str, Any, list[int], Any, dict, list[int]]:
        """(path, its ParquetFile, the row groups holding episode `pos`, their read lock, the file's known spans,
        those of the groups that hold many episodes)."""
        meta = self.meta
        start = int(meta.episodes["dataset_from_index"][pos])
        stop = int(meta.episodes["dataset_to_index"][pos])
        path = meta.data_file(pos)
        pf, ranges, read_lock, spans = self._file(path)
        groups = [g for g, lo, hi in ranges if lo is None or (lo < stop and hi >= start)]
        shared = [g for g in groups if pf.metadata.row_group(g).num_rows > 2 * (stop - start)]
        return path, pf, groups, read_lock, spans, shared

    def _rows(self, pos: int, path: str, pf, groups: list[int], read_lock, spans: dict, shared: list[int],
              fetched: list[tuple[int, bytes]] | None = None,
              keys: tuple[str, ...] | None = None) -> dict[str, np.ndarray]:
        """The episode's rows from its row groups (`_where`), the columns of `keys` (None: all of `self.keys`; a
        group holding many episodes is decoded with all of them, once); `fetched`: their bytes, read already."""
        keys = tuple(self.keys) if keys is None else keys
        import pyarrow as pa
        import pyarrow.compute as pc

        meta = self.meta
        start = int(meta.episodes["dataset_from_index"][pos])
        stop = int(meta.episodes["dataset_to_index"][pos])
        episode = meta.episode_index(pos)
        mapped = bool(shared)  # every part a slice of a group mapped from the table cache: images read from there
        if shared:  # row groups holding many episodes: decode each once, keep it while its episodes are read
            self._warn_shared(path, pf, shared[0])
            parts = []
            for g in groups:
                if g in shared:
                    group, on_drive = self._decoded_group(path, pf, g, read_lock, episode)
                    parts.append(_rows_between(group, start, stop))
                    mapped = mapped and on_drive
                else:
                    parts.append(self._read(path, pf, [g], read_lock, episode))
                    mapped = False
            table = pa.concat_tables(parts)
        else:
            table = self._read(path, pf, groups, read_lock, episode, spans, fetched, keys)
        index = table.column("index").to_numpy()
        exact = len(index) == stop - start and (not len(index) or (index[0] == start and (np.diff(index) == 1).all()))
        if not exact:
            # not exactly the episode's rows in order (lerobot's files are: one row group per episode)
            column = table.column("index")
            table = table.filter(pc.and_(pc.greater_equal(column, start), pc.less(column, stop)))
            table = table.sort_by("index")
            mapped = False  # copies
        if table.num_rows != stop - start:
            raise DatasetError(
                f"episode {meta.episode_index(pos)}: {path} holds {table.num_rows} rows with index in "
                f"[{start}, {stop}) but the episodes table says {stop - start}; re-download data/ and meta/"
            )
        rows = {k: _objects(table.column(k)) if k in meta.text_keys else image_bytes(table.column(k), mapped)
                if k in meta.image_keys else _shaped(_to_numpy(table.column(k)), meta.features.get(k, {}))
                for k in keys}
        if path not in self._widths:  # once per file: its columns' values per row against info.json's shapes
            check_widths(path, rows, meta.features, frozenset([*meta.image_keys, *meta.text_keys]))
            self._widths.add(path)
        if "timestamp" in keys:
            stored = table.column("timestamp").combine_chunks().to_numpy(zero_copy_only=False)
            rows[FRAME_TIME_S] = exact_times(stored, meta.fps)
        return rows
