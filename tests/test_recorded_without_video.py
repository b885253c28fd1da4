"""lerobot's datasets recorded without videos (`use_videos=False`): their cameras are PNG images inside the frame
tables (dtype "image", a struct<bytes, path> column before `index`) and info.json's `video_path` is null. The
loader streams cameras from videos only: it refuses such cameras with the conversion command, and loads the rest
of the dataset where the user leaves them out."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pytest

from dali_stream import DatasetError, Member, Mixture, StreamLoader
from dali_stream.tools.sample_data import SampleSpec, parse_cameras, state_row, write_sample

from .columns import add_columns

KEY = "observation.image"


def _png(value: int) -> bytes:
    import av

    frame = av.VideoFrame.from_ndarray(np.full((8, 8, 3), value, np.uint8), format="rgb24")
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = 8, 8, "rgb24"
    return b"".join(bytes(p) for p in codec.encode(frame))


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory):
    """A sample turned into what lerobot writes without videos: the camera's feature becomes dtype "image", its
    PNGs the first column of the frame tables (one row group per episode, as written), no videos/, video_path
    null."""
    spec = SampleSpec(episodes=4, min_length=6, max_length=9, gop=4, episodes_per_file=2,
                      cameras=parse_cameras("front:h264"), seed=5)
    root = write_sample(tmp_path_factory.mktemp("ds") / "images", spec)
    shutil.rmtree(root / "videos")
    info = json.loads((root / "meta/info.json").read_text())
    del info["features"]["observation.images.front"]
    info["video_path"] = None
    (root / "meta/info.json").write_text(json.dumps(info))
    image = {"dtype": "image", "shape": [8, 8, 3], "names": ["height", "width", "channels"]}
    add_columns(root, {KEY: image}, lambda rows: {KEY: pa.array(
        [{"bytes": _png(int(i) % 255), "path": f"frame_{int(i):06d}.png"} for i in rows.column("index").to_pylist()],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]))}, first=True)
    return root


def test_cameras_stored_as_images_are_refused_with_the_conversion_command(image_dataset):
    with pytest.raises(DatasetError) as err:
        StreamLoader(str(image_dataset), batch_size=4, device="cpu")
    said = str(err.value)
    assert KEY in said and "as images in its tables" in said
    assert f"--root {image_dataset}" in said and "--operation.type convert_image_to_video" in said
    assert f"keys={{{KEY!r}: None}}" in said
    with pytest.raises(DatasetError, match=r"mixture member 'images'.*as images"):
        StreamLoader(Mixture([Member(str(image_dataset), name="images")]), batch_size=4, device="cpu")


def test_left_out_the_images_every_row_is_the_episodes_own(image_dataset):
    """The frame tables' row groups are found by their `index` column's statistics: a struct column before it puts
    its leaf column at another position than its field (read by field position, every episode's rows came from
    the first row group of its file: 'holds 0 rows with index in [...]')."""
    mix = Mixture([Member(str(image_dataset), keys={KEY: None})])
    with StreamLoader(mix, batch_size=4, device="cpu", shuffle=False, drop_last=False) as loader:
        assert not loader.meta.camera_keys
        seen = []
        for batch in loader:
            assert KEY not in batch
            for j, (episode, frame) in enumerate(zip(batch["episode_index"].tolist(),
                                                     batch["frame_index"].tolist())):
                task = int(batch["task_index"][j])
                np.testing.assert_array_equal(batch["observation.state"][j].numpy(), state_row(episode, frame, task))
            seen += batch["index"].tolist()
    assert seen == list(range(loader.meta.total_frames))
