"""Copies of a dataset damaged as users found them: each a named error at the cheapest place that can tell, never
batches that change shape mid-epoch or numpy's own error."""

from __future__ import annotations

import shutil

import pytest

from dali_stream import DatasetError, StreamLoader, VideoFileError
from dali_stream.errors import DamagedVideoError
from dali_stream.meta.dataset import DatasetMeta
from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

FRONT = "observation.images.front"
FILE = f"videos/{FRONT}/chunk-000/file-001.mp4"  # episodes 3, 4, 5


def _spec(**kw) -> SampleSpec:
    return SampleSpec(episodes=6, min_length=10, max_length=30, gop=8, episodes_per_file=3,
                      cameras=parse_cameras("front:h264,wrist:av1"), seed=1, **kw)


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """The dataset at info.json's 96x128, and the same written at 192x256."""
    base = tmp_path_factory.mktemp("damaged")
    return write_sample(base / "small", _spec()), write_sample(base / "large", _spec(height=192, width=256))


@pytest.fixture()
def copy(written, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(written[0], dst)
    return dst


def _loop(root, **kw) -> None:
    with StreamLoader(str(root), batch_size=8, device="cpu", drop_last=False, **kw) as loader:
        for _ in loader:
            pass


@pytest.mark.parametrize("decode", ["cpu", "cpu-open"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_a_cameras_file_at_another_size_than_info_json_says(written, copy, decode, shuffle):
    """One file of a camera at 256x192 where info.json says 128x96: named as the file is indexed (the camera, the
    file, its episodes, both sizes and the fixes), on torchcodec's route and the open engine's, shuffled or not."""
    shutil.copyfile(written[1] / FILE, copy / FILE)
    with pytest.raises(DatasetError, match=rf"camera '{FRONT}': video file .*{FILE} \(episodes \[3, 4, 5\]\) is "
                                           r"256x192 \(width x height\) but meta/info.json gives the camera 128x96; "
                                           r".*re-encode the file at 128x96, or fix the camera's shape"):
        _loop(copy, decode=decode, shuffle=shuffle)


def test_a_file_refused_for_its_size_is_indexed_once(written, copy):
    """Every episode of a refused file asks for its index: the refusal is kept and raised again, the file not read
    again (verify asks for each episode of each file: reading it each time was quadratic in episodes)."""
    from dali_stream.fetch.indexes import IndexCache
    from dali_stream.source.storage import LocalRanges

    shutil.copyfile(written[1] / FILE, copy / FILE)
    meta = DatasetMeta.open(str(copy))
    reads = []
    ranges = LocalRanges(meta.data_fs)
    read_range = ranges.read_range
    ranges.read_range = lambda *args: reads.append(args) or read_range(*args)  # counts the reads, reads as before
    cache = IndexCache(ranges, meta=meta)
    path = str(copy / FILE)
    with pytest.raises(DatasetError, match="256x192") as first:
        cache.get(path, FRONT)
    before = len(reads)
    with pytest.raises(DatasetError) as again:
        cache.get(path, FRONT)
    assert again.value is first.value and len(reads) == before > 0


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_table_column_narrower_in_one_data_file(copy, shuffle):
    """`action` with 5 values a row in one data file where info.json says [6]: the file, the column, both widths."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = copy / "data/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    narrow = pa.array([row[:5] for row in table.column("action").to_pylist()], pa.list_(pa.float32()))
    pq.write_table(table.set_column(table.schema.get_field_index("action"), "action", narrow), path)
    with pytest.raises(DatasetError, match=r"data file .*file-000.parquet: column 'action' holds 5 values per row, "
                                           r"but meta/info.json declares its shape \[6\]; .*re-download the file"):
        _loop(copy, shuffle=shuffle)


EPISODES_FILE = "meta/episodes/chunk-000/file-001.parquet"  # episodes 3, 4, 5


@pytest.mark.parametrize("column", [f"videos/{FRONT}/from_timestamp", f"videos/{FRONT}/chunk_index",
                                    "data/file_index"])
def test_an_episodes_file_without_a_column_the_others_have(copy, column):
    """One episodes file rewritten without a column the loader reads: named as the metadata opens (the file, the
    column, its episodes, the fix), not a video blamed for having no keyframe at NaN seconds."""
    import pyarrow.parquet as pq

    path = copy / EPISODES_FILE
    pq.write_table(pq.read_table(path).drop_columns([column]), path)
    with pytest.raises(DatasetError, match=rf"episodes file .*{EPISODES_FILE}: has no column \['{column}'\] .*so "
                                           r"episodes \[3, 4, 5\] have none.*re-download meta/episodes, or write the "
                                           r"file again with lerobot's tools"):
        StreamLoader(str(copy), batch_size=8, device="cpu")


def test_an_episodes_file_with_a_null_timestamp(copy):
    """A null where episode 4's to_timestamp belongs: named with the column and the episode."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = copy / EPISODES_FILE
    table = pq.read_table(path)
    column = f"videos/{FRONT}/to_timestamp"
    values = table.column(column).to_pylist()
    values[table.column("episode_index").to_pylist().index(4)] = None
    pq.write_table(table.set_column(table.schema.get_field_index(column), column, pa.array(values, pa.float64())),
                   path)
    with pytest.raises(DatasetError, match=rf"episodes file .*{EPISODES_FILE}: column '{column}' is empty \(null or "
                                           r"NaN\) for episodes \[4\].*re-download meta/episodes"):
        _loop(copy)


@pytest.mark.parametrize("decode", ["cpu", "cpu-open"])
def test_an_empty_video_file(copy, decode):
    """A 0-byte MP4 says so, with the fix, not "[Errno 22] Invalid argument; first bytes b''"."""
    (copy / FILE).write_bytes(b"")
    with pytest.raises(VideoFileError, match=rf"video file .*{FILE} is empty \(0 bytes\) \(episode [345], camera "
                                             rf"'{FRONT}'\): .*re-download the file"):
        _loop(copy, decode=decode)


def test_a_git_lfs_pointer_in_place_of_a_video_says_git_lfs_pull(copy):
    """A dataset cloned with git without LFS: each MP4 is a pointer file. The loader names it and the fix, instead of
    taking it for a damaged MP4 to re-download."""
    meta = DatasetMeta.open(str(copy))
    path = copy / meta.video_file(0, meta.video_keys[0])
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 123456\n")
    with pytest.raises(DamagedVideoError, match=r"is a Git LFS pointer, not video: run `git lfs pull`"):
        _loop(copy, shuffle=False)


def test_an_episodes_file_with_a_null_episode_index(copy):
    """A null in an episodes file's episode_index column: named by its row (there is no episode to name), not a
    numpy error turning the null into an integer."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = copy / EPISODES_FILE
    table = pq.read_table(path)
    column = table.column("episode_index").to_pylist()
    column[1] = None
    pq.write_table(table.set_column(table.schema.get_field_index("episode_index"), "episode_index",
                                    pa.array(column, pa.int64())), path)
    with pytest.raises(DatasetError, match=r"column 'episode_index' is empty \(null or NaN\) for rows \[1\] \(without "
                                           r"an episode_index\)"):
        DatasetMeta.open(str(copy))
