"""The image spill (`fetch.image_spill`) on a real drive: columns of encoded images written and read back exactly,
files that outlive nothing, and a failed read named with its episode, camera, folder and fix."""

from __future__ import annotations

import os

import numpy as np
import pytest

from dali_stream import DatasetError
from dali_stream.fetch import image_spill
from dali_stream.fetch.image_spill import ImageSpill


def _column(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    out = np.empty(n, dtype=object)
    for i in range(n):  # empty rows too (an image lerobot could not write), and more rows than one pwritev takes
        out[i] = rng.bytes(int(rng.integers(0, 900)))
    return out


def test_columns_come_back_byte_for_byte_from_unlinked_files(tmp_path, monkeypatch):
    monkeypatch.setattr(image_spill, "FILE_BYTES", 1 << 20)  # several files: a column begins the next one
    spill = ImageSpill(str(tmp_path))
    columns = [_column(n, seed) for seed, n in enumerate((3000, 1, 2500, 700))]
    kept = [spill.keep(c, f"episode {i}, camera 'image'") for i, c in enumerate(columns)]
    assert all(isinstance(k, image_spill.SpilledImages) for k in kept)
    for column, back in zip(columns, kept):
        assert len(back) == len(column) and [back[i] for i in range(len(back))] == column.tolist()
        assert back.nbytes == 8 * (len(column) + 1)
    assert len({k.file.fd for k in kept}) >= 2
    assert spill.written_bytes == sum(len(b) for c in columns for b in c.tolist()) and spill.columns == 4
    assert list((tmp_path / image_spill.FOLDER).iterdir()) == []  # unlinked as made: nothing outlives the process


def test_a_read_that_fails_names_the_episode_camera_folder_and_fix(tmp_path):
    spill = ImageSpill(str(tmp_path))
    kept = spill.keep(_column(10, 1), "episode 7, camera 'observation.images.wrist_image'")
    nothing = os.open(os.devnull, os.O_RDONLY)
    os.dup2(nothing, kept.file.fd)  # the drive gives nothing back
    os.close(nothing)
    with pytest.raises(DatasetError, match=r"episode 7, camera 'observation.images.wrist_image', row 3: .*could not "
                                           r"be read back .*came back.*table_cache_dir") as raised:
        kept[3]
    assert str(tmp_path) in str(raised.value)
