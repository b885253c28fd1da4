"""Table rows per episode: a data file written as one row group for many episodes is decoded once, not once
per episode, with one warning per file naming the fix; batches stay identical."""

from __future__ import annotations

import shutil
import warnings

import pyarrow.parquet as pq
import pytest
import torch

from dali_stream import StreamLoader

ARGS = dict(batch_size=3, episode_pool_size=3, seed=2, device="cpu", num_workers=2, drop_last=False,
            delta_timestamps={"action": [0.0, 1 / 30, 2 / 30]})


@pytest.fixture()
def collapsed(small_dataset, tmp_path):
    """A copy whose data files each hold all their episodes in one row group."""
    dst = tmp_path / "collapsed"
    shutil.copytree(small_dataset, dst)
    files = sorted((dst / "data").glob("*/*.parquet"))
    for path in files:
        table = pq.read_table(path)
        pq.write_table(table, path, row_group_size=len(table) + 1)
        assert pq.ParquetFile(path).metadata.num_row_groups == 1
    return dst, files


def test_one_row_group_for_many_episodes(small_dataset, collapsed):
    root, files = collapsed
    with pytest.warns(UserWarning, match=r"row group 0 holds \d+ rows, many episodes' worth.*row_group_size") as seen:
        loader = StreamLoader(str(root), **ARGS)
        got = [b for b in loader]
    assert len({str(w.message).split(":")[0] for w in seen if "row group" in str(w.message)}) <= len(files)
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        for key in ("index", "action", "action_is_pad", "observation.state"):
            assert torch.equal(a[key], b[key]), key
    # each file's single group decoded a few times at most (kept while its episodes are read), not per episode
    assert loader.stages.store.tables.groups_read <= 2 * len(files) < loader.meta.num_episodes


def test_one_row_group_per_episode_reads_no_more_than_the_episode(small_dataset):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for a well-written file
        loader = StreamLoader(str(small_dataset), **ARGS)
        for _ in loader:
            pass
    # one group per episode, and the first episode's once more at construction (it gives the feature dtypes)
    assert loader.stages.store.tables.groups_read == loader.meta.num_episodes + 1


def test_open_data_files_are_bounded_by_their_footers_memory(small_dataset):
    """Parquet footers kept open are bounded in bytes (unbounded, 200 files of 1,000 row groups held
    1.4 GB per rank): with a bound smaller than two footers, one stays open at a time, the others are read again
    when their episodes come back, and every batch is the same."""
    bounded = StreamLoader(str(small_dataset), **ARGS, footer_bytes=1)
    footers = bounded.stages.store.tables.files
    got = [b for b in bounded]
    assert footers.capacity_bytes == 1 and footers.evictions > 0 and len(footers._values) == 1
    assert footers.peak_bytes <= 2 * max(8 * pq.ParquetFile(p).metadata.serialized_size
                                         for p in (small_dataset / "data").glob("*/*.parquet"))
    budget = bounded.memory_budget()
    assert budget["table_footers_bound"] == 1 and budget["table_footers_peak"] == footers.peak_bytes
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        for key in ("index", "action", "action_is_pad", "observation.state"):
            assert torch.equal(a[key], b[key]), key


def test_rows_of_many_episodes_over_http_are_read_together(small_dataset, tmp_path):
    """`TableReader.episodes` (a batch's new episodes, as a global shuffle admits them): over HTTP behind 0.2 s a
    request, the row groups of all of them in flight at once (the data files' footers too), the same rows as
    read one episode at a time from disk; an episode whose data file is gone gets its own error, the others
    their rows."""
    import numpy as np

    from dali_stream import DatasetError
    from dali_stream.meta.dataset import DatasetMeta

    from .faultproxy import FaultProxy
    from .httpserver import Server

    root = tmp_path / "copy"
    shutil.copytree(small_dataset, root)
    local = DatasetMeta.open(str(root))
    keys = ["index", "timestamp", "action", "observation.state"]
    from dali_stream.fetch.tables import TableReader

    want = [TableReader(local, keys).episode(pos) for pos in range(local.num_episodes)]
    gone = local.data_file(local.num_episodes - 1)
    lost = [pos for pos in range(local.num_episodes) if local.data_file(pos) == gone]
    assert 0 < len(lost) < local.num_episodes
    with Server(root) as upstream:
        proxy = FaultProxy(upstream, delay_s=0.2)
        with proxy as url:
            meta = DatasetMeta.open(url)
            (root / gone).unlink()  # after the metadata was read: its episodes' rows cannot be
            got = TableReader(meta, keys).episodes(list(range(meta.num_episodes)))
    for pos, rows in enumerate(got):
        if pos in lost:
            assert isinstance(rows, (DatasetError, FileNotFoundError)) and gone.split("/")[-1] in str(rows), rows
            continue
        assert set(rows) == set(want[pos]) and all(np.array_equal(rows[k], want[pos][k]) for k in rows), pos
    # one request after another would have one in flight: here the six row groups' (and footers') requests overlap
    assert proxy.counts["in_flight_peak"] >= (meta.num_episodes - len(lost)) // 2, proxy.counts
