"""What the library tells a user who did something that would otherwise go wrong without a word: windows given in
frames where seconds are meant, a dataset without meta/stats.json, and the `dali_stream` logger's warnings, which
reach stderr where the application configured no logging."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from dali_stream import DatasetError, StreamLoader, open_meta


def test_a_window_in_frames_is_warned_about_where_every_sample_would_pad_it(small_dataset):
    """list(range(8)) read as seconds at 30 fps asks 1..7 s ahead in episodes of at most 20 frames: every sample
    would pad 7 of its 8 action steps. A warning, not an error: a reward model's 8 steps 1 s apart is a real window
    in seconds, even on a dataset of short episodes."""
    longest = int(open_meta(str(small_dataset)).lengths.max())
    with pytest.warns(UserWarning, match=re.escape(
            "delta_timestamps['action'] = [0, 1, ..., 7] look like frame counts: they are seconds in lerobot's "
            "convention (k / fps); at 30 fps write [k / 30 for k in range(8)]. Read as seconds, the steps at "
            f"[1, 2, ..., 7] s lie past the longest episode ({longest} frames, {longest / 30:.3g} s): every sample "
            "pads them")):
        StreamLoader(str(small_dataset), device="cpu", delta_timestamps={"action": list(range(8))}).close()


def test_a_whole_second_window_within_the_episodes_is_warned_about_and_loaded(tmp_path):
    """[0, 2] at 2 fps (now and 2 s, 4 frames, later) in 5 s episodes is a plausible window in seconds: a warning
    at the user's call, and the window as asked."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    root = write_sample(tmp_path / "slow", SampleSpec(episodes=2, min_length=10, max_length=10, gop=5, fps=2,
                                                      episodes_per_file=2, height=32, width=64,
                                                      cameras=parse_cameras("front:h264")))
    with pytest.warns(UserWarning, match=re.escape("delta_timestamps['action'] = [0, 2] look like frame counts: they "
                                                   "are seconds in lerobot's convention (k / fps); at 2 fps write "
                                                   "[k / 2 for k in [0, 2]]")) as told:
        loader = StreamLoader(str(root), batch_size=20, device="cpu", shuffle=False, drop_last=False,
                              delta_timestamps={"action": [0, 2]})
    assert [w.filename for w in told if "frame counts" in str(w.message)] == [__file__]  # points at the call
    with loader:
        batch = next(iter(loader))
    frames = batch["frame_index"].numpy()
    assert batch["action"].shape[:2] == (20, 2)
    assert batch["action_is_pad"].numpy().tolist() == [[False, bool(f + 4 > 9)] for f in frames]
    assert np.count_nonzero(batch["action_is_pad"].numpy()) == 8  # frames 6..9 of each episode


@pytest.fixture
def without_stats(small_dataset, tmp_path):
    """small_dataset without its meta/stats.json."""
    root = tmp_path / "without_stats"
    shutil.copytree(small_dataset, root)
    (root / "meta" / "stats.json").unlink()
    return root


def test_a_dataset_without_stats_says_so_once(without_stats):
    meta = open_meta(str(without_stats))
    with pytest.warns(UserWarning, match=re.escape(
            f"{str(without_stats)!r} has no meta/stats.json ({without_stats / 'meta' / 'stats.json'} does not exist), "
            "so `meta.stats` is {} and a policy's normalisation sees no statistics")) as told:
        assert meta.stats == {} and meta.stats == {}
    assert len(told) == 1 and "Compute the stats with lerobot" in str(told[0].message)


def test_a_policy_that_normalises_is_refused_without_the_stats_it_needs(small_dataset, without_stats):
    """lerobot's normalisers pass a feature without stats through unnormalised: the trainer refuses up front."""
    from dali_stream.tools.lerobot_policy import require_stats

    act = {"VISUAL": "MEAN_STD", "STATE": "MEAN_STD", "ACTION": "MEAN_STD"}  # ACT's normalization_mapping
    features = {"observation.images.front": "VISUAL", "observation.state": "STATE", "action": "ACTION"}
    with pytest.warns(UserWarning, match="has no meta/stats.json"):
        none = open_meta(str(without_stats)).stats
    with pytest.raises(DatasetError, match=re.escape(
            f"the policy normalises features whose statistics {str(without_stats)!r} lacks in meta/stats.json (the "
            "file is absent): 'observation.images.front' (VISUAL, normalised MEAN_STD) needs ['mean', 'std']; "
            "'observation.state' (STATE, normalised MEAN_STD) needs ['mean', 'std']; 'action' (ACTION, normalised "
            "MEAN_STD) needs ['mean', 'std']. Compute the dataset's stats with lerobot")):
        require_stats(features, act, none, str(without_stats))
    stats = open_meta(str(small_dataset)).stats
    require_stats(features, act, stats, str(small_dataset))  # the dataset's own stats: nothing to say
    require_stats(features, {kind: "IDENTITY" for kind in act}, none, str(without_stats))  # raw values asked
    partial = {k: v for k, v in stats.items() if k != "action"}
    with pytest.raises(DatasetError, match=r"\(present, but without them\): 'action' \(ACTION, normalised MIN_MAX\) "
                                           r"needs \['min', 'max'\]\."):
        require_stats(features, {**act, "ACTION": "MIN_MAX"}, partial, str(small_dataset))


CHILD = """
import logging, sys
from dali_stream import StreamLoader
if sys.argv[2] == "configured":
    logging.basicConfig(format="app %(levelname)s: %(message)s")
elif sys.argv[2] == "silenced":
    logging.getLogger("dali_stream").setLevel(logging.ERROR)
same = lambda frames: frames  # cannot go to worker processes: the loader logs a warning saying so, each time
for _ in range(2):
    StreamLoader(sys.argv[1], batch_size=2, device="cpu", num_workers=1, transform_workers=1,
                 image_transforms=same).close()
"""


def test_logged_warnings_reach_stderr_once_unless_the_application_logs_them(small_dataset):
    """The documented warning of a transform kept in the calling thread, in a real process: on stderr once where
    the application configured no logging; through the application's own handler (each time) where it did; not
    at all where it set the `dali_stream` logger's level above WARNING."""
    said = {}
    for mode in ("default", "configured", "silenced"):
        proc = subprocess.run([sys.executable, "-c", CHILD, str(small_dataset), mode], capture_output=True, text=True,
                              timeout=300)
        assert proc.returncode == 0, proc.stderr
        said[mode] = proc.stderr
    warning = "image_transforms <function <lambda> at "
    assert said["default"].count("cannot go to worker processes") == 1, said["default"]
    assert f"dali_stream warning: {warning}" in said["default"], said["default"]
    assert said["configured"].count("cannot go to worker processes") == 2, said["configured"]
    assert f"app WARNING: {warning}" in said["configured"] and "dali_stream warning" not in said["configured"]
    assert "cannot go to worker processes" not in said["silenced"], said["silenced"]
