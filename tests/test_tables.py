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
    assert loader.store.tables.groups_read <= 2 * len(files) < loader.meta.num_episodes


def test_one_row_group_per_episode_reads_no_more_than_the_episode(small_dataset):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for a well-written file
        loader = StreamLoader(str(small_dataset), **ARGS)
        for _ in loader:
            pass
    # one group per episode, and the first episode's once more at construction (it gives the feature dtypes)
    assert loader.store.tables.groups_read == loader.meta.num_episodes + 1


def test_open_data_files_are_bounded_by_their_footers_memory(small_dataset, monkeypatch):
    """Parquet footers kept open are bounded in bytes (unbounded, 200 files of 1,000 row groups held
    1.4 GB per rank): with a bound smaller than two footers, one stays open at a time, the others are read again
    when their episodes come back, and every batch is the same."""
    from dali_stream.fetch import tables

    monkeypatch.setattr(tables, "FOOTER_BYTES", 1)
    bounded = StreamLoader(str(small_dataset), **ARGS)
    footers = bounded.store.tables.files
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
