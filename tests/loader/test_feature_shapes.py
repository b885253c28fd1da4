"""Table features of more than one dimension (lerobot's 2-D and 3-D features, stored as nested lists) come in the
shape info.json declares, windowed too, as lerobot's dataset[i] returns them (they came flattened before)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from dali_stream import Member, Mixture, StreamLoader
from dali_stream.pairing import dali_present
from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample
from tests.support.columns import add_columns, ids

GRID, CUBE = "observation.grid", "observation.cube"


def grid(episode: int, frame: int) -> np.ndarray:
    return (np.arange(6, dtype=np.float32).reshape(2, 3) + 100 * episode + frame).astype(np.float32)


def cube(episode: int, frame: int) -> np.ndarray:
    return (np.arange(8, dtype=np.int64).reshape(2, 2, 2) * (frame + 1) + episode)


@pytest.fixture(scope="module")
def shaped(tmp_path_factory):
    spec = SampleSpec(episodes=4, min_length=6, max_length=12, gop=4, episodes_per_file=2,
                      cameras=parse_cameras("front:h264"), seed=13)
    root = write_sample(tmp_path_factory.mktemp("shapes") / "shaped", spec)
    add_columns(root, {GRID: {"dtype": "float32", "shape": [2, 3], "names": None},
                       CUBE: {"dtype": "int64", "shape": [2, 2, 2], "names": None}},
                lambda rows: {GRID: pa.array([grid(e, f).tolist() for e, f in ids(rows)]),
                              CUBE: pa.array([cube(e, f).tolist() for e, f in ids(rows)])})
    return root


def _check(batch, steps: tuple[int, ...]) -> None:
    g, c = batch[GRID].numpy(), batch[CUBE].numpy()
    assert g.shape[1:] == (len(steps), 2, 3) and g.dtype == np.float32
    assert c.shape[1:] == (2, 2, 2) and c.dtype == np.int64
    for j, (e, f) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
        np.testing.assert_array_equal(c[j], cube(e, f))
        for t, offset in enumerate(steps):
            if not batch[f"{GRID}_is_pad"][j, t]:
                np.testing.assert_array_equal(g[j, t], grid(e, f + offset))


@pytest.mark.parametrize("settings", [{}, {"resize": (32, 48)}])
def test_features_keep_their_declared_shape(shaped, settings):
    if settings and not dali_present():
        pytest.skip("resize= needs NVIDIA DALI's operators")
    steps = (-1, 0)
    with StreamLoader(str(shaped), batch_size=4, device="cpu", drop_last=False,
                      delta_timestamps={GRID: [k / 30 for k in steps]}, **settings) as loader:
        for batch in loader:
            _check(batch, steps)
        sample = loader.dataset[5]
        assert tuple(sample[GRID].shape) == (2, 2, 3) and tuple(sample[CUBE].shape) == (2, 2, 2)
    with StreamLoader(Mixture([Member(str(shaped), name="a"), Member(str(shaped), name="b")]), batch_size=4,
                      device="cpu", delta_timestamps={GRID: [k / 30 for k in steps]}) as loader:
        _check(next(iter(loader)), steps)
