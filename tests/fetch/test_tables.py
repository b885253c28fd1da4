"""Table rows per episode: a data file written as one row group for many episodes (lerobot's dataset tools) is
decoded once a node into `table_cache_dir` and read from there memory-mapped (without a folder: the last few kept in
memory, with one warning per file naming the fix); batches stay identical."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import torch

from dali_stream import ConfigError, StreamLoader

ARGS = dict(batch_size=3, episode_pool_size=3, seed=2, device="cpu", num_workers=2, drop_last=False,
            delta_timestamps={"action": [0.0, 1 / 30, 2 / 30]})


@pytest.fixture()
def collapsed(small_dataset, tmp_path):
    """A copy whose data files each hold all their episodes in one row group; beside it the files whose group holds
    many episodes' worth of rows for one of its episodes at least (over twice its rows: `TableReader._where`)."""
    import numpy as np

    dst = tmp_path / "collapsed"
    shutil.copytree(small_dataset, dst)
    files = []
    for path in sorted((dst / "data").glob("*/*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table, path, row_group_size=len(table) + 1)
        assert pq.ParquetFile(path).metadata.num_row_groups == 1
        lengths = np.unique(table.column("episode_index").to_numpy(), return_counts=True)[1]
        if len(table) > 2 * lengths.min():
            files.append(path)
    assert files
    return dst, files


def same_batches(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        for key in ("index", "action", "action_is_pad", "observation.state", "timestamp", "task_index"):
            assert torch.equal(a[key], b[key]), key


def test_one_row_group_for_many_episodes_without_a_folder(small_dataset, collapsed):
    root, files = collapsed
    with pytest.warns(UserWarning, match=r"row group 0 holds \d+ rows, many episodes' worth.*table_cache_dir") as seen:
        loader = StreamLoader(str(root), **ARGS, table_cache_dir="off")
        got = [b for b in loader]
    assert len({str(w.message).split(":")[0] for w in seen if "row group" in str(w.message)}) <= len(files)
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    assert len(got) == len(want)
    for a, b in zip(got, want):
        for key in ("index", "action", "action_is_pad", "observation.state"):
            assert torch.equal(a[key], b[key]), key
    # each file's single group decoded a few times at most (kept while its episodes are read), not per episode
    assert loader.stats()["fetch"]["table_groups_read"] <= 2 * len(files) < loader.meta.num_episodes
    assert loader.resolved.table_cache_dir is None and loader.stats()["bounded"]["shared_row_groups"]["held"] <= 2


def test_one_row_group_for_many_episodes_is_decoded_once_into_the_folder(small_dataset, collapsed, tmp_path):
    """Each file's group decoded once, written, then read memory-mapped: no warning, the recorder layout's batches;
    a later run (another rank, a restart) decodes nothing."""
    root, files = collapsed
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    folder = tmp_path / "tables"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        first = StreamLoader(str(root), **ARGS, table_cache_dir=str(folder))
        same_batches([b for b in first], want)
        groups = first.stats()["bounded"]["shared_row_groups"]
        assert (groups["decoded"], groups["disk_hits"], groups["damaged"]) == (len(files), 0, 0)
        assert len(list(folder.rglob("*.arrow"))) == len(files) and groups["written_bytes"] > 0
        later = StreamLoader(str(root), **ARGS, table_cache_dir=str(folder))
        same_batches([b for b in later], want)
        stats = later.stats()["bounded"]["shared_row_groups"]
        assert (stats["decoded"], stats["disk_hits"], stats["held"]) == (0, len(files), 0)
        assert stats["folder"].startswith(str(folder))


def test_table_cache_bytes_keeps_the_folder_within_it_least_recently_read_first(small_dataset, collapsed, tmp_path):
    """With a bound of about one group, each group written deletes the least recently read others (never itself):
    the folder stays within it, the batches are the recorder layout's, and a group deleted is decoded again when its
    episodes come back (another epoch)."""
    root, files = collapsed
    assert len(files) >= 2
    plain = StreamLoader(str(small_dataset), **ARGS)
    want = [[b for b in plain] for _ in range(2)]
    folder = tmp_path / "tables"
    whole = StreamLoader(str(root), **ARGS, table_cache_dir=str(folder / "whole"))
    [b for b in whole]
    largest = max(p.stat().st_size for p in (folder / "whole").rglob("*.arrow"))
    bounded = StreamLoader(str(root), **ARGS, table_cache_dir=str(folder / "bounded"), table_cache_bytes=largest)
    for epoch in range(2):
        same_batches([b for b in bounded], want[epoch])
        kept = list((folder / "bounded").rglob("*.arrow"))
        assert sum(p.stat().st_size for p in kept) <= largest and len(kept) == 1
    stats = bounded.stats()["bounded"]["shared_row_groups"]
    assert stats["bytes_bound"] == largest and stats["evicted"] >= len(files) - 1
    assert stats["decoded"] > len(files)  # an epoch's groups decoded again after the bound deleted them
    with pytest.raises(ConfigError, match="table_cache_bytes"):
        StreamLoader(str(root), **ARGS, table_cache_bytes=0)


def test_the_folder_defaults_to_the_disk_tier_then_the_users_cache(small_dataset, collapsed, tmp_path, monkeypatch):
    root, files = collapsed
    monkeypatch.setenv("DALI_STREAM_CACHE", str(tmp_path / "user"))
    loader = StreamLoader(str(root), **ARGS)
    assert loader.resolved.table_cache_dir == str(tmp_path / "user" / "tables")
    assert "user's cache" in loader.resolved.reasons["table_cache_dir"]
    [b for b in loader]
    assert len(list((tmp_path / "user").rglob("*.arrow"))) == len(files)
    beside = StreamLoader(str(root), **ARGS, disk_cache_dir=str(tmp_path / "disk"))
    assert beside.resolved.table_cache_dir == str(tmp_path / "disk" / "tables")
    with pytest.raises(ConfigError, match="table_cache_dir.*local folder"):
        StreamLoader(str(root), **ARGS, table_cache_dir="s3://bucket/tables")


def test_a_data_file_changed_under_a_warm_folder_is_decoded_again(small_dataset, collapsed, tmp_path):
    """A folder never serves stale rows: a data file rewritten with other values (same rows, same layout) under a warm
    folder gives the new values; the files of the old ones are deleted as the new ones are written, with a killed
    writer's temporary file an hour old (one just begun stays)."""
    import os
    import time

    import pyarrow as pa
    import pyarrow.compute as pc

    root, files = collapsed
    folder = str(tmp_path / "tables")
    [b for b in StreamLoader(str(root), **ARGS, table_cache_dir=folder)]
    old = sorted(Path(folder).rglob("*.arrow"))
    assert len(old) == len(files)
    killed, writing = old[0].with_suffix(".arrow.1.2.tmp"), old[0].with_suffix(".arrow.3.4.tmp")
    killed.write_bytes(b"part"), writing.write_bytes(b"part")
    os.utime(killed, (time.time() - 7200, time.time() - 7200))
    for path in sorted((root / "data").glob("*/*.parquet")):
        table = pq.read_table(path)
        state = table.column("observation.state")
        flat = pc.add(state.combine_chunks().flatten(), pa.scalar(1000.0, pa.float32()))
        changed = pa.FixedSizeListArray.from_arrays(flat, state.type.list_size) \
            if pa.types.is_fixed_size_list(state.type) else pa.ListArray.from_arrays(
                state.combine_chunks().offsets, flat)
        table = table.set_column(table.column_names.index("observation.state"), "observation.state", changed)
        pq.write_table(table, path, row_group_size=len(table) + 1)
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    loader = StreamLoader(str(root), **ARGS, table_cache_dir=folder)
    got = [b for b in loader]
    groups = loader.stats()["bounded"]["shared_row_groups"]
    assert groups["decoded"] == len(files)
    for a, b in zip(got, want):
        assert torch.equal(a["observation.state"], b["observation.state"] + 1000)
    new = sorted(Path(folder).rglob("*.arrow"))
    assert len(new) == len(files) and not set(new) & set(old) and not killed.exists() and writing.exists()
    assert groups["swept"] == 2 * len(files) + 1  # each old group's file and its lock file, and the killed writer's


def test_a_damaged_file_in_the_folder_is_made_again(small_dataset, collapsed, tmp_path):
    root, files = collapsed
    folder = tmp_path / "tables"
    [b for b in StreamLoader(str(root), **ARGS, table_cache_dir=str(folder))]
    kept = sorted(folder.rglob("*.arrow"))
    kept[0].write_bytes(kept[0].read_bytes()[: kept[0].stat().st_size // 2])  # cut short
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    loader = StreamLoader(str(root), **ARGS, table_cache_dir=str(folder))
    same_batches([b for b in loader], want)
    groups = loader.stats()["bounded"]["shared_row_groups"]
    assert (groups["damaged"], groups["decoded"], groups["disk_hits"]) == (1, 1, len(files) - 1)


def test_a_folder_that_cannot_be_written_warns_once_and_keeps_groups_in_memory(small_dataset, collapsed, tmp_path):
    root, files = collapsed
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    with pytest.warns(UserWarning) as seen:
        loader = StreamLoader(str(root), **ARGS, table_cache_dir=str(blocker / "tables"))
        same_batches([b for b in loader], want)
    said = [str(w.message) for w in seen if "table_cache_dir" in str(w.message)]
    assert len(said) == 1 and "could not write" in said[0] and "a-file" in said[0], said
    assert not loader.stats()["bounded"]["shared_row_groups"]["writing"]


def test_the_folder_keeps_its_drives_floor_free(small_dataset, collapsed, tmp_path, monkeypatch):
    """The folder leaves the drive's last bytes free as the decoded-frame spill does (here a floor above the drive's
    free space): nothing written, one warning naming the floor, the groups kept in memory, the same batches."""
    root, files = collapsed
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    monkeypatch.setenv("DALI_STREAM_SPILL_KEEP_FREE_BYTES", str(shutil.disk_usage(tmp_path).total + 1))
    with pytest.warns(UserWarning, match=r"table_cache_dir: its drive has .* GiB free, and the cache leaves .* GiB "
                                         r"free \(DALI_STREAM_SPILL_KEEP_FREE_BYTES=") as seen:
        loader = StreamLoader(str(root), **ARGS, table_cache_dir=str(tmp_path / "tables"))
        same_batches([b for b in loader], want)
    assert sum("table_cache_dir" in str(w.message) for w in seen) == 1  # and no per-file warning after it
    assert not list((tmp_path / "tables").rglob("*.arrow")) and loader.stats()["bounded"]["shared_row_groups"]["written_bytes"] == 0


def test_a_group_not_in_index_order_still_gives_each_episodes_rows(small_dataset, tmp_path):
    """The rows of an episode are sliced out of a group by binary search over `index`; a group in another order
    (written shuffled) is filtered instead: the same batches."""
    import numpy as np

    root = tmp_path / "shuffled"
    shutil.copytree(small_dataset, root)
    for path in sorted((root / "data").glob("*/*.parquet")):
        table = pq.read_table(path)
        table = table.take(np.random.default_rng(0).permutation(len(table)))
        pq.write_table(table, path, row_group_size=len(table) + 1)
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    same_batches([b for b in StreamLoader(str(root), **ARGS, table_cache_dir=str(tmp_path / "t"))], want)


def test_groups_that_cut_episodes_in_two_give_each_episodes_rows(small_dataset, tmp_path):
    """Row groups of a fixed size (25 rows: two or three episodes each, some episodes cut between two groups), as a
    writer that ignores episodes leaves them: each episode's rows come from its groups in the folder, the same
    batches."""
    root = tmp_path / "cut"
    shutil.copytree(small_dataset, root)
    for path in sorted((root / "data").glob("*/*.parquet")):
        table = pq.read_table(path)
        pq.write_table(table, path, row_group_size=25)
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    loader = StreamLoader(str(root), **ARGS, table_cache_dir=str(tmp_path / "t"))
    same_batches([b for b in loader], want)
    assert loader.stats()["bounded"]["shared_row_groups"]["decoded"] > 0


def test_processes_of_a_node_decode_each_group_once_between_them(collapsed, tmp_path):
    """Four processes (a node's ranks) reading every episode from one folder at once: each group decoded by one of
    them, the others map what it wrote (a `flock` on the group while it is decoded)."""
    import json
    import subprocess
    import sys
    import time

    root, files = collapsed
    folder = tmp_path / "tables"
    start = time.time() + 3
    code = (
        "import json, sys, time\n"
        "from dali_stream.meta.dataset import DatasetMeta\n"
        "from dali_stream.fetch.tables import TableReader\n"
        "meta = DatasetMeta.open(sys.argv[1])\n"
        "reader = TableReader(meta, ['index', 'action', 'observation.state'], table_cache_dir=sys.argv[2])\n"
        "time.sleep(max(0.0, float(sys.argv[3]) - time.time()))\n"
        "rows = [int(reader.episode(p)['index'][0]) for p in range(meta.num_episodes)]\n"
        "print(json.dumps({'decoded': reader.groups.decoded, 'mapped': reader.groups.disk_hits, 'first': rows}))\n")
    procs = [subprocess.Popen([sys.executable, "-W", "ignore", "-c", code, str(root), str(folder), str(start)],
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(o["decoded"] for o in outs) == len(files), outs
    assert all(o["decoded"] + o["mapped"] == len(files) for o in outs), outs
    assert len({tuple(o["first"]) for o in outs}) == 1


def test_one_row_group_for_many_episodes_over_http_is_fetched_once(small_dataset, collapsed, tmp_path):
    """From a remote store a group holding many episodes is fetched whole: once, into the folder; a later run fetches
    none of them."""
    from tests.support.httpserver import Server

    root, files = collapsed
    folder = str(tmp_path / "tables")
    want = [b for b in StreamLoader(str(small_dataset), **ARGS)]
    with Server(root) as url:
        first = StreamLoader(url, **ARGS, table_cache_dir=folder)
        same_batches([b for b in first], want)
        before = first.stats()
        assert before["bounded"]["shared_row_groups"]["decoded"] == len(files)
        later = StreamLoader(url, **ARGS, table_cache_dir=folder)
        same_batches([b for b in later], want)
        after = later.stats()
        groups = after["bounded"]["shared_row_groups"]
        assert (groups["decoded"], groups["disk_hits"]) == (0, len(files))
        # the same plan reads the same other groups (an episode alone in its group) and none of the shared ones
        assert after["fetch"]["table_groups_read"] == before["fetch"]["table_groups_read"] - len(files)


def test_one_row_group_per_episode_reads_no_more_than_the_episode(small_dataset):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning for a well-written file
        loader = StreamLoader(str(small_dataset), **ARGS)
        for _ in loader:
            pass
    # one group per episode, and the first episode's once more at construction (it gives the feature dtypes)
    assert loader.stats()["fetch"]["table_groups_read"] == loader.meta.num_episodes + 1


def test_open_data_files_are_bounded_by_their_footers_memory(small_dataset):
    """Parquet footers kept open are bounded in bytes (unbounded, 200 files of 1,000 row groups held
    1.4 GB per rank): with a bound smaller than two footers, one stays open at a time, the others are read again
    when their episodes come back, and every batch is the same."""
    bounded = StreamLoader(str(small_dataset), **ARGS, footer_bytes=1)
    got = [b for b in bounded]
    footers = bounded.stats()["bounded"]["table_footers"]
    assert footers["bound"] == 1 and footers["evictions"] > 0 and footers["files"] == 1
    assert footers["peak"] <= 2 * max(8 * pq.ParquetFile(p).metadata.serialized_size
                                         for p in (small_dataset / "data").glob("*/*.parquet"))
    budget = bounded.memory_budget()
    assert budget["table_footers_bound"] == 1 and budget["table_footers_peak"] == footers["peak"]
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
    from tests.support.faultproxy import FaultProxy
    from tests.support.httpserver import Server

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


def test_the_bound_deletes_the_group_read_longest_ago_first(tmp_path):
    """Three groups of one size under a bound of two: a group another process (another reader of the folder) mapped
    since is kept over an older one when the third is written."""
    import time

    import pyarrow as pa

    from dali_stream.fetch.decoded_groups import DecodedGroups

    def group(value: int):
        return lambda: pa.table({"index": pa.array(range(value * 1000, value * 1000 + 1000))})

    writer = DecodedGroups(str(tmp_path), bound=None)
    for name in ("a", "b"):
        writer.get(f"/data/{name}.parquet", (1, 1), (0,), 1000, ["index"], group(ord(name)))
        time.sleep(0.01)
    size = max(p.stat().st_size for p in tmp_path.rglob("*.arrow"))
    reader = DecodedGroups(str(tmp_path), bound=2 * size)  # another rank: maps "a", which touches it
    reader.get("/data/a.parquet", (1, 1), (0,), 1000, ["index"], group(ord("a")))
    assert reader.disk_hits == 1
    time.sleep(0.01)
    reader.get("/data/c.parquet", (1, 1), (0,), 1000, ["index"], group(ord("c")))
    kept = sorted(p.stat().st_size for p in tmp_path.rglob("*.arrow"))
    assert len(kept) == 2 and reader.evicted == 1 and reader.stats()["bytes_bound"] == 2 * size
    again = DecodedGroups(str(tmp_path))
    for name, decoded in (("a", 0), ("c", 0), ("b", 1)):  # "b" was deleted: decoded again
        before = again.decoded
        table, mapped = again.get(f"/data/{name}.parquet", (1, 1), (0,), 1000, ["index"], group(ord(name)))
        assert again.decoded - before == decoded and table.column("index")[0].as_py() == ord(name) * 1000
        assert mapped  # read from the folder (written there first where it was decoded)


@pytest.mark.parametrize("kind", ["binary", "large_binary"])
def test_mapped_images_give_each_rows_bytes_across_slices_chunks_and_empty_rows(kind, tmp_path):
    """`fetch.mapped_images.MappedImages` over a mapped Arrow file's column, sliced mid-chunk and across chunks (an
    episode's rows from two groups), empty and null rows among them: row i's bytes, as the object column gives them."""
    import numpy as np
    import pyarrow as pa

    from dali_stream.fetch.mapped_images import MappedImages

    rng = np.random.default_rng(7)
    values = [rng.bytes(int(n)) if n % 7 else (b"" if n % 2 else None) for n in rng.integers(0, 3000, 500)]
    typ = getattr(pa, kind)()
    table = pa.table({"img": pa.chunked_array([pa.array(values[:180], typ), pa.array(values[180:], typ)])})
    path = tmp_path / "t.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=180)
    mapped = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all().column("img")
    for start, stop in ((0, 500), (33, 170), (150, 420), (181, 182)):
        column = MappedImages(mapped.slice(start, stop - start).chunks)
        assert len(column) == stop - start and column.nbytes == 8 * (stop - start + 1)
        assert [bytes(column[i]) for i in range(len(column))] == [v or b"" for v in values[start:stop]]
    with pytest.raises(IndexError, match="row 3 of an image column of 3 rows"):
        MappedImages(mapped.slice(0, 3).chunks)[3]
