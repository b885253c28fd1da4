"""The sample writer produces a real v3 layout with painted ids."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from dali_stream import paint
from dali_stream.sample_data import SampleSpec, parse_cameras, state_row


def test_paint_round_trip_all_layouts():
    img = paint.render(96, 128, 1234, 56789 % 65536, camera=2)
    assert paint.read_ids(img) == (1234, 56789 % 65536)
    assert paint.read_ids(np.moveaxis(img, -1, 0)) == (1234, 56789 % 65536)
    assert paint.read_ids(np.moveaxis(img, -1, 0).astype(np.float32) / 255) == (1234, 56789 % 65536)


def test_layout_and_info(four_codec_dataset):
    root = four_codec_dataset
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    for key in ("fps", "features", "data_path", "video_path", "chunks_size", "data_files_size_in_mb",
                "video_files_size_in_mb", "total_episodes", "total_frames", "total_tasks", "splits"):
        assert key in info
    codecs = {k: f["info"]["video.codec"] for k, f in info["features"].items() if f["dtype"] == "video"}
    assert sorted(codecs.values()) == ["av1", "h264", "hevc", "vp9"]
    for key in codecs:
        files = sorted((root / "videos" / key).glob("chunk-*/file-*.mp4"))
        assert len(files) >= 3 and len({f.parent for f in files}) >= 2  # several files, several chunks
    assert (root / "meta/stats.json").exists()


def test_episode_table_columns_and_per_camera_offsets(four_codec_dataset):
    eps = pq.read_table(sorted((four_codec_dataset / "meta/episodes").glob("*/*.parquet"))[0]).to_pylist()
    e = eps[3]
    for col in ("episode_index", "tasks", "length", "dataset_from_index", "dataset_to_index", "data/chunk_index",
                "data/file_index", "meta/episodes/chunk_index", "meta/episodes/file_index"):
        assert col in e
    starts = {e[f"videos/observation.images.{c}/from_timestamp"] for c in ("front", "side", "wrist", "top")}
    assert len(starts) > 1  # cameras roll over to new files at different episodes


def test_data_rows_one_row_group_per_episode(four_codec_dataset):
    path = sorted((four_codec_dataset / "data").glob("*/*.parquet"))[0]
    pf = pq.ParquetFile(path)
    table = pf.read()
    assert pf.metadata.num_row_groups == len(set(table.column("episode_index").to_pylist()))
    row = table.slice(5, 1).to_pylist()[0]
    assert np.allclose(row["observation.state"], state_row(row["episode_index"], row["frame_index"], row["task_index"]))


def test_tasks_parquet_has_pandas_index(four_codec_dataset):
    table = pq.read_table(four_codec_dataset / "meta/tasks.parquet")
    meta = json.loads(table.schema.metadata[b"pandas"])
    assert meta["index_columns"] == ["__index_level_0__"]
    assert table.column("task_index").to_pylist() == list(range(table.num_rows))


@pytest.mark.parametrize("bad, message", [
    ("front", "must look like NAME:CODEC"), ("front:mpeg2", "not one of"), ("a:h264,a:vp9", "unique"),
])
def test_bad_camera_specs(bad, message):
    with pytest.raises(ValueError, match=message):
        parse_cameras(bad)


def test_resolution_too_small_for_ids():
    with pytest.raises(ValueError, match="cannot carry painted ids"):
        SampleSpec(height=8, width=32)
