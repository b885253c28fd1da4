"""Bad input gets a clear error: the right type, the value, the file/episode/camera and the fix."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dali_stream import (
    ConfigError,
    DatasetError,
    DatasetNotFoundError,
    DecodeError,
    DeviceError,
    FrameTimestampError,
    StateError,
    StreamLoader,
    UnsupportedVersionError,
    VideoFileError,
)
from dali_stream.meta.dataset import DatasetMeta
from tests.support.damage import scramble_keyframes

FRONT, TOP = "observation.images.front", "observation.images.top"


@pytest.fixture()
def copy(small_dataset, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(small_dataset, dst)
    return dst


def _loop(root, **kw):
    args = dict(batch_size=2, episode_pool_size=2, device="cpu", num_workers=2, drop_last=False)
    args.update(kw)
    for _ in StreamLoader(str(root), **args):
        pass


def test_missing_folder(tmp_path):
    with pytest.raises(DatasetNotFoundError, match=r"nope.*does not exist"):
        StreamLoader(str(tmp_path / "nope"))


def test_missing_info_json(copy):
    (copy / "meta/info.json").unlink()
    with pytest.raises(DatasetNotFoundError, match=r"meta/info\.json"):
        StreamLoader(str(copy))


def test_a_folder_inside_a_dataset_or_above_datasets_names_them(copy):
    """A dataset's meta/ or a camera's chunk folder given for its root; the folder holding datasets: the error names
    the dataset to pass."""
    for inside in ("meta", "videos/observation.images.front/chunk-000"):
        with pytest.raises(DatasetNotFoundError, match=rf"not a LeRobot dataset root .*inside the dataset at {copy}$"):
            StreamLoader(str(copy / inside))
    with pytest.raises(DatasetNotFoundError, match=rf"the datasets in it: {copy.name} \(pass one, e.g. {copy}\)"):
        StreamLoader(str(copy.parent))


def test_a_file_given_for_a_dataset_says_so(tmp_path):
    """A mixture file passed to StreamLoader (the CLI takes one; Python reads it with load_mixture), a YAML file."""
    (tmp_path / "mix.json").write_text('{"members": ["a"]}')
    (tmp_path / "mix.yaml").write_text("members: [a]\n")
    with pytest.raises(DatasetNotFoundError, match=r"'.*mix.json' is a file, not a dataset folder.*load_mixture"):
        StreamLoader(str(tmp_path / "mix.json"))
    with pytest.raises(DatasetNotFoundError, match=r"'.*mix.yaml' is a file, not a dataset folder: pass a LeRobot "
                                                   r"dataset's root folder \(holding meta/, data/ and videos/\)$"):
        StreamLoader(str(tmp_path / "mix.yaml"))


def test_old_codebase_version(copy):
    info = json.loads((copy / "meta/info.json").read_text())
    info["codebase_version"] = "v2.1"
    (copy / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(UnsupportedVersionError, match=r"'v2\.1'.*v3"):
        StreamLoader(str(copy))


def test_delta_key_not_a_feature(small_dataset):
    with pytest.raises(ConfigError, match=r"\['observation\.images\.rear'\] that are not features"):
        StreamLoader(str(small_dataset), delta_timestamps={"observation.images.rear": [0.0]})


def test_delta_not_a_multiple_of_the_frame_period(small_dataset):
    with pytest.raises(ConfigError, match=r"'action'.* not multiples of 1/fps .*\[0\.05\]; use k / 30"):
        StreamLoader(str(small_dataset), delta_timestamps={"action": [0.0, 0.05]})


@pytest.mark.parametrize("field,value", [("batch_size", 0), ("batch_size", -3), ("episode_pool_size", 0)])
def test_non_positive_sizes(small_dataset, field, value):
    with pytest.raises(ConfigError, match=rf"`{field}` must be a positive integer.*Found: {value}"):
        StreamLoader(str(small_dataset), **{field: value})


def test_unknown_decode_choice(small_dataset):
    with pytest.raises(ConfigError, match=r"decode='nvdec'.*\('auto', 'gpu', 'cpu', 'cpu-open', 'dali-cpu'\)"):
        StreamLoader(str(small_dataset), decode="nvdec")


def test_gpu_decode_without_gpu(small_dataset):
    from dali_stream.decode.node import Node

    if Node.probe().gpus:
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceError, match=r"decode='gpu'.*no CUDA GPU.*decode='auto'"):
        StreamLoader(str(small_dataset), decode="gpu")


def test_cuda_device_without_gpu(small_dataset):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    with pytest.raises(DeviceError, match=r"device='cuda'.*device='cpu'"):
        StreamLoader(str(small_dataset), device="cuda")


def _shift_from_timestamp(root, key, episode, by_s):
    """Edit meta/episodes so the camera's from_timestamp of `episode` is off by `by_s` seconds."""
    col = f"videos/{key}/from_timestamp"
    hits = 0
    for path in sorted((root / "meta/episodes").glob("*/*.parquet")):
        table = pq.read_table(path)
        values = table.column(col).to_numpy().copy()
        rows = table.column("episode_index").to_numpy()
        hits += int((rows == episode).sum())
        values[rows == episode] += by_s
        table = table.set_column(table.schema.get_field_index(col), col, pa.array(values))
        pq.write_table(table, path)
    assert hits == 1


@pytest.mark.parametrize("camera,decode", [(FRONT, "cpu"), (TOP, "dali-cpu")])
def test_timestamp_beyond_tolerance(copy, camera, decode):
    meta = DatasetMeta.open(str(copy))
    # An episode followed by another in the same file, so the shifted frames still lie inside the file.
    pos = next(p for p in range(meta.num_episodes - 1) if meta.video_file(p, camera) == meta.video_file(p + 1, camera))
    _shift_from_timestamp(copy, camera, pos, 0.4 / 30)  # between two frames: 13 ms from the nearest
    with pytest.raises(FrameTimestampError, match=rf"episode {pos}, camera '{camera}'.*tolerance_s=0\.0001"):
        _loop(copy, decode=decode)
    # A tolerance that covers the offset accepts it, as lerobot would.
    _loop(copy, decode=decode, tolerance_s=0.02)


def test_missing_video_file(copy):
    meta = DatasetMeta.open(str(copy))
    (copy / meta.video_file(0, TOP)).unlink()
    with pytest.raises(VideoFileError, match=rf"is missing \(episode \d, camera '{TOP}'\)"):
        _loop(copy)


def test_truncated_video_file(copy):
    meta = DatasetMeta.open(str(copy))
    path = copy / meta.video_file(0, FRONT)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoFileError, match=rf"{path.name}.*(truncated|not a readable MP4)"):
        _loop(copy)


@pytest.mark.parametrize("decode,cache", [("dali-cpu", 0), ("dali-cpu", 1 << 24), ("cpu", 0)])
def test_corrupt_segment(copy, decode, cache):
    """The container index is intact but the VP9 frames are garbage: DALI (in the graph, or on the workers with the
    decoded-frame cache) and torchcodec all refuse."""
    meta = DatasetMeta.open(str(copy))
    scramble_keyframes(copy / meta.video_file(0, TOP))
    # DALI's route demuxes the segment to cut per-sample clips, which already fails on these packets.
    pattern = (r"(DALI's video decoder failed .* on|the clip cutter \(DALI routes\) could not decode|dali-cpu could "
               r"not decode) episode \d, camera 'observation.images.top'"
               if decode == "dali-cpu" else r"torchcodec could not decode episode \d, camera 'observation.images.top'")
    with pytest.raises(DecodeError, match=pattern + r".*re-download the file.*`dali-stream verify DATASET --decode` "
                                                    "lists every damaged file"):
        _loop(copy, decode=decode, frame_cache_bytes=cache)


def test_state_from_another_configuration(small_dataset):
    state = StreamLoader(str(small_dataset), batch_size=2, seed=1).state_dict()
    other = StreamLoader(str(small_dataset), batch_size=3, seed=1)
    with pytest.raises(StateError, match=r"batch_size=2 but this loader has batch_size=3"):
        other.load_state_dict(state)
    with pytest.raises(StateError, match=r"state version 99 is not 3"):
        other.load_state_dict({**state, "version": 99})
    bad = StreamLoader(str(small_dataset), batch_size=2, seed=1)
    with pytest.raises(StateError, match=r"batches_consumed=10000 is outside"):
        bad.load_state_dict({**state, "batches_consumed": 10000})


def test_more_ranks_than_episodes(small_dataset):
    with pytest.raises(ConfigError, match=r"world_size=8 ranks but the dataset has only 7 non-empty episodes"):
        StreamLoader(str(small_dataset), rank=0, world_size=8)


def test_errors_do_not_hang_the_next_epoch(copy):
    """After a failed epoch the loader is still usable once the data is fixed (no stuck threads)."""
    meta = DatasetMeta.open(str(copy))
    path = copy / meta.video_file(0, TOP)
    good = path.read_bytes()
    path.unlink()
    loader = StreamLoader(str(copy), batch_size=2, episode_pool_size=2, device="cpu", num_workers=2)
    with pytest.raises(VideoFileError):
        for _ in loader:
            pass
    path.write_bytes(good)
    assert sum(1 for _ in loader) == len(loader)
    assert np.isfinite(loader.last_epoch_stats["wall_s"])


# ---- damaged copies a new user meets -------------------------------------------------------------
def _edit_info(root, change):
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    path.write_text(json.dumps(change(info)))


def _inspect(root):
    from tests.support.console import dali_stream

    return dali_stream("inspect", root)


def _one_line_error(proc, *words):
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for w in words:
        assert w in proc.stderr, (w, proc.stderr)


@pytest.mark.parametrize("change,words", [
    (lambda info: [info], ["holds a JSON list, not an object", "re-download"]),
    (lambda info: {**info, "fps": "thirty"}, ["fps must be a positive number", "'thirty'"]),
    (lambda info: {**info, "fps": float("nan")}, ["fps must be a positive number", "nan"]),
    (lambda info: {**info, "features": ["action"]}, ["'features' must map each feature key"]),
])
def test_info_json_of_the_wrong_shape(copy, change, words):
    _edit_info(copy, change)
    with pytest.raises(DatasetError, match="info.json"):
        StreamLoader(str(copy))
    _one_line_error(_inspect(copy), "DatasetError", "info.json", *words)


def _truncate(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def test_truncated_episodes_table(copy):
    path = sorted((copy / "meta/episodes").glob("*/*.parquet"))[-1]
    _truncate(path)
    with pytest.raises(DatasetError, match=rf"{path.name} is not a readable parquet file.*truncated or damaged"):
        StreamLoader(str(copy))
    _one_line_error(_inspect(copy), "DamagedTableError", path.name, "re-download it")


def test_an_episodes_table_giving_an_episode_twice_is_refused(copy):
    """A meta/episodes file rewritten so that episode 3's row says episode_index 0: refused when the metadata is
    opened, naming both files, the index and the fix (it was taken, and `episodes=[0]` drew two episodes)."""
    files = sorted((copy / "meta/episodes").glob("*/*.parquet"))
    table = pq.read_table(files[1])
    column = table.schema.get_field_index("episode_index")
    index = table.column(column).to_numpy().copy()
    assert 3 in index and 0 not in index
    index[index == 3] = 0
    pq.write_table(table.set_column(column, table.schema.field(column), pa.array(index, table.schema.field(column).type)),
                   files[1])
    match = (rf"episodes table is damaged: episode_index 0 is given by 2 rows, in \S*{files[0].name}, "
             rf"\S*{files[1].name}; each episode must have one row. Rewrite the episodes table with lerobot's tools "
             "or restore meta/episodes")
    with pytest.raises(DatasetError, match=match):
        DatasetMeta.open(str(copy))
    for episodes in ([0], [3]):
        with pytest.raises(DatasetError, match=match):
            StreamLoader(str(copy), device="cpu", episodes=episodes)


def test_truncated_data_file_at_construction_and_later(copy):
    first, last = sorted((copy / "data").glob("*/*.parquet"))[0], sorted((copy / "data").glob("*/*.parquet"))[-1]
    _truncate(last)  # read only when a batch draws an episode it holds
    with pytest.raises(DatasetError, match=rf"{last.name} is not a readable parquet file.*re-download"):
        _loop(copy)
    _truncate(first)  # read at construction (the first episode's rows give the feature dtypes)
    with pytest.raises(DatasetError, match=rf"{first.name} is not a readable parquet file"):
        StreamLoader(str(copy))


@pytest.mark.parametrize("camera,decode", [(FRONT, "cpu"), (TOP, "dali-cpu")])
def test_damaged_moov(copy, camera, decode):
    """The MP4's index box is garbage: H.264 through torchcodec and VP9 through DALI both name the file."""
    import random

    meta = DatasetMeta.open(str(copy))
    path = copy / meta.video_file(0, camera)
    data = bytearray(path.read_bytes())
    at = data.find(b"moov")
    rnd = random.Random(0)
    data[at + 200:at + 600] = bytes(rnd.randrange(256) for _ in range(400))
    path.write_bytes(bytes(data))
    with pytest.raises(VideoFileError, match=rf"{path.name} is damaged \([a-z0-9 ]+ box: .*\); re-download .*"
                                             rf"\(episode \d+, camera '{camera}'\)"):
        _loop(copy, decode=decode)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "0.1", None])
def test_delta_timestamps_that_are_not_finite_numbers(small_dataset, value):
    with pytest.raises(ConfigError, match=r"delta_timestamps\['action'\]"):
        StreamLoader(str(small_dataset), delta_timestamps={"action": [0.0, value]})


@pytest.mark.parametrize("edit,pattern", [
    ({"batches_consumed": "abc"}, r"state\['batches_consumed'\] must be an integer >= 0. Found: 'abc'"),
    ({"batches_consumed": None}, r"state\['batches_consumed'\] must be an integer >= 0. Found: None"),
    ({"batches_consumed": 2.5}, r"state\['batches_consumed'\] must be an integer >= 0. Found: 2.5"),
    ({"batches_consumed": -1}, r"Found: -1; pass the dict StreamLoader.state_dict\(\) returned, unchanged"),
    ({"batches_consumed": 10_000}, r"batches_consumed=10000 is outside the epoch.*edited or comes from another "
                                   r"run.*start afresh"),
    ({"epoch": True}, r"state\['epoch'\] must be an integer"),
    ({"drop_last": "yes"}, r"state\['drop_last'\] must be true or false"),
    ({"elastic": [[2]]}, r"state\['elastic'\] must be a list of \[world_size, batches\] pairs"),
    ({"version": 1}, r"state version 1 is not 3 \(saved by dali_stream 0.1"),
    ({"version": 2}, r"state version 2 is not 3 \(saved before plans were drawn by lanes"),
])
def test_state_values_of_the_wrong_type_or_range(small_dataset, edit, pattern):
    state = StreamLoader(str(small_dataset), batch_size=2).state_dict()
    with pytest.raises(StateError, match=pattern):
        StreamLoader(str(small_dataset), batch_size=2).load_state_dict({**state, **edit})


def test_state_without_an_entry(small_dataset):
    state = StreamLoader(str(small_dataset), batch_size=2).state_dict()
    del state["epoch"]
    with pytest.raises(StateError, match=r"state has no \['epoch'\] entries"):
        StreamLoader(str(small_dataset), batch_size=2).load_state_dict(state)
    with pytest.raises(StateError, match=r"must be the dict StreamLoader.state_dict\(\) returned. Found: list"):
        StreamLoader(str(small_dataset), batch_size=2).load_state_dict([state])


def _two_length_sets_with_equal_totals(episodes=4, low=8, high=14):
    from dali_stream.tools.sample_data import SampleSpec

    seen = {}
    for seed in range(500):
        lengths = SampleSpec(episodes=episodes, min_length=low, max_length=high, seed=seed).lengths()
        total = int(lengths.sum())
        if total in seen and sorted(seen[total][1].tolist()) != sorted(lengths.tolist()):
            return seen[total][0], seed
        seen.setdefault(total, (seed, lengths))
    raise AssertionError("no two seed values found")


def test_state_from_another_dataset_with_the_same_totals_is_refused(tmp_path):
    """Same episode count, frame count, fps and cameras, other episode lengths: the plans differ, so refuse."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    a, b = _two_length_sets_with_equal_totals()
    spec = dict(episodes=4, min_length=8, max_length=14, cameras=parse_cameras("top:vp9"), height=32, width=64)
    first = write_sample(tmp_path / "a", SampleSpec(seed=a, **spec))
    second = write_sample(tmp_path / "b", SampleSpec(seed=b, **spec))
    one, two = StreamLoader(str(first), batch_size=2), StreamLoader(str(second), batch_size=2)
    assert one.meta.total_frames == two.meta.total_frames and one.meta.num_episodes == two.meta.num_episodes
    with pytest.raises(StateError, match=r"state was saved with dataset=.*episodes_sha256"):
        two.load_state_dict(one.state_dict())


def test_load_state_dict_while_iterating_is_refused(small_dataset):
    loader = StreamLoader(str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu")
    saved = loader.state_dict()
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(StateError, match=r"while epoch 0 is being iterated \(2 batches delivered\).*before the `for`"):
        loader.load_state_dict(saved)
    it.close()  # leaving the loop: now it loads, and the next `for` starts where `saved` was taken
    loader.load_state_dict(saved)
    fresh = StreamLoader(str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu")
    assert [b["index"].tolist() for b in loader] == [b["index"].tolist() for b in fresh]


@pytest.mark.parametrize("denied,decode,settings,words", [
    ("torchcodec", "cpu", "", "decode with torchcodec, which does not import"),
    ("nvidia.dali.plugin", "dali-cpu", "episode_frames_bytes=0", "NVIDIA DALI does not import"),
    ("nvidia.dali", "dali-cpu", "frame_cache_bytes=1 << 20", "NVIDIA DALI does not import"),
    ("nvidia.dali", "dali-cpu", "", "NVIDIA DALI does not import"),
])
def test_a_runtime_library_that_does_not_import_is_named_by_the_constructor(small_dataset, denied, decode, settings,
                                                                             words):
    """torchcodec failing to import stops a loader whose cameras decode with it, DALI's torch plugin one that builds
    a DALI graph (the VP9 camera on DALI's CPU decoder, decoded per sample), DALI one that runs its CPU decoder on
    the workers (the decoded-frame cache, or the open episodes' frames, keeps the VP9 camera's pictures; no graph):
    each an InstallError that names it and the tool that finds the fix, raised by the constructor, not by the first
    batch."""
    import subprocess
    import sys

    code = f"""
import sys
class Deny:
    def find_spec(self, name, path=None, target=None):
        if name == {denied!r} or name.startswith({denied!r} + "."):
            raise ImportError(name + " is broken here")
sys.meta_path.insert(0, Deny())
from dali_stream import InstallError, StreamLoader
try:
    StreamLoader({str(small_dataset)!r}, batch_size=2, device="cpu", decode={decode!r}, {settings})
except InstallError as exc:
    print("InstallError:", exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("InstallError:") and words in out and "dali-stream diagnose" in out, out


def test_a_task_missing_from_the_tasks_table(copy):
    """meta/tasks.parquet cut to its first task: a sample of another task is a DatasetError naming the episode, the
    task_index and the fix, never an empty prompt (lerobot's dataset[i] fails there too)."""
    path = copy / "meta" / "tasks.parquet"
    table = pq.read_table(path)
    assert table.num_rows > 1
    pq.write_table(table.slice(0, 1), path)
    with pytest.raises(DatasetError, match=r"episode \d+ .*has task_index [1-9]\d*, which meta/tasks.parquet does not "
                                           r"list \(it lists 1 task\(s\): task_index \[0\]\).*re-download"):
        _loop(copy, shuffle=False)
