"""lerobot's names and habits carry over: `repo_id=`/`root=`, `loader.meta` with LeRobotDatasetMetadata's attributes,
`loader[i]` / `loader.dataset[i]` as `dataset[i]`, and lerobot's own arguments the loader has no setting for."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dali_stream import ConfigError, DatasetNotFoundError, StreamLoader, open_meta
from dali_stream.tools.paint import read_ids
from tests.support.reference import Reference

DELTAS = {"action": [-1 / 30, 0.0, 1 / 30], "observation.images.front": [-2 / 30, 0.0]}


def test_root_and_repo_id_name_the_dataset_as_lerobot_does(small_dataset, tmp_path, monkeypatch):
    by_root = StreamLoader(root=small_dataset, batch_size=4, device="cpu")
    assert by_root.meta.total_frames > 0 and len(by_root) > 0
    # repo_id with a root that holds the dataset: the root is read
    named = StreamLoader(repo_id="someone/else", root=str(small_dataset), device="cpu")
    assert named.meta.source == by_root.meta.source and named.meta.repo_id == "someone/else"
    assert open_meta(repo_id="someone/else", root=str(small_dataset)).repo_id == "someone/else"
    # repo_id with a root that does not hold it: lerobot would download; the loader streams the repo_id instead
    # (a Hub id is a local folder of that name where one exists, which stands in for the Hub here)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").symlink_to(small_dataset, target_is_directory=True)
    hub = StreamLoader(repo_id="org/name", root=tmp_path / "not-downloaded", device="cpu", batch_size=4)
    assert hub.meta.total_frames == by_root.meta.total_frames
    assert open_meta(repo_id="org/name").total_frames == by_root.meta.total_frames
    with pytest.raises(DatasetNotFoundError):
        StreamLoader(root=tmp_path / "not-downloaded", device="cpu")


def test_a_dataset_given_twice_or_not_at_all_is_a_named_error(small_dataset):
    with pytest.raises(ConfigError, match=r"given twice.*repo_id='a/b'"):
        StreamLoader(str(small_dataset), repo_id="a/b")
    with pytest.raises(ConfigError, match=r"needs a dataset: its folder, an fsspec URL or a Hub id"):
        StreamLoader(batch_size=4)


@pytest.mark.parametrize("name,hint", [("video_backend", "decode="), ("download_videos", "streams only the bytes"),
                                       ("force_cache_sync", "never stale"), ("return_uint8", "image_dtype='uint8'"),
                                       ("rgb_encoder", "recording setting"), ("streaming_encoding", "recording setting"),
                                       ("token", "storage_options={'token'"), ("buffer_size", "episode_pool_size"),
                                       ("streaming", "always streams"), ("repo_type", "hf://buckets/")])
def test_lerobot_arguments_without_a_setting_say_what_to_use(small_dataset, name, hint):
    with pytest.raises(ConfigError) as err:
        StreamLoader(str(small_dataset), **{name: True})
    assert "lerobot's LeRobotDataset argument" in str(err.value) and hint in str(err.value)


def test_meta_has_lerobots_metadata_attributes(small_dataset):
    info = json.loads((small_dataset / "meta" / "info.json").read_text())
    features = info["features"]
    meta = StreamLoader(str(small_dataset), device="cpu").meta
    # as LeRobotDatasetMetadata computes each from info.json
    assert meta.camera_keys == [k for k, f in features.items() if f["dtype"] in ("video", "image")]
    assert meta.video_keys == [k for k, f in features.items() if f["dtype"] == "video"]
    assert meta.image_keys == []
    assert meta.shapes == {k: tuple(f["shape"]) for k, f in features.items()}
    assert meta.names == {k: f["names"] for k, f in features.items()}
    assert (meta.total_episodes, meta.total_frames, meta.total_tasks) == (
        info["total_episodes"], info["total_frames"], info["total_tasks"])
    assert meta.repo_id == str(small_dataset) and meta.fps == info["fps"] and meta.robot_type == info["robot_type"]


def test_mixture_meta_has_them_too(embodiments):
    from dali_stream import Member, Mixture

    loader = StreamLoader(Mixture([Member(str(embodiments["arm6"]), name="arm6"),
                                   Member(str(embodiments["arm7"]), name="arm7")]), device="cpu", batch_size=4)
    meta = loader.meta
    assert meta.member_names == ["arm6", "arm7"]
    assert set(meta.camera_keys) == set(meta.video_keys) and meta.shapes["action"] == (7,)
    assert meta.total_frames == sum(m.total_frames for m in meta.members)


def _uint8(img):
    return np.rint(img.numpy() * 255).astype(np.uint8)


def test_sample_i_is_lerobots_dataset_i(small_dataset):
    """`loader[i]`: one sample dict without a batch axis, the same keys and values as lerobot's `dataset[i]`
    (the independent reference reads the dataset as LeRobotDataset.__getitem__ does)."""
    loader = StreamLoader(str(small_dataset), batch_size=4, delta_timestamps=DELTAS, device="cpu")
    reference = Reference(small_dataset, DELTAS)
    n = loader.meta.total_frames
    assert len(loader.dataset) == n
    for i in (0, 1, 7, n // 2, n - 1, -1):
        got, want = loader[i], reference.item(i % n)
        assert set(got) == set(want), set(got) ^ set(want)
        assert got["task"] == want["task"] and int(got["index"]) == i % n
        for key, value in want.items():
            if key == "task":
                continue
            if key in loader.meta.video_keys:
                assert tuple(got[key].shape) == value.shape, key
                frames_got = _uint8(got[key]) if got[key].ndim == 4 else _uint8(got[key])[None]
                frames_want = value if value.ndim == 4 else value[None]
                assert [read_ids(f) for f in frames_got] == [read_ids(f) for f in frames_want], (key, i)
            else:
                np.testing.assert_array_equal(got[key].numpy(), value, err_msg=f"{key} of sample {i}")
    with pytest.raises(IndexError, match=f"hold {n} frames"):
        loader[n]
    assert loader.dataset[3]["index"] == loader[3]["index"]
    batches = list(loader)  # iterating is unaffected by looking at samples
    assert sum(len(b["task"]) for b in batches) == len(loader) * 4
    loader.close()


def test_a_dataloader_around_the_loader_is_refused_and_around_its_dataset_covers_every_frame(small_dataset):
    """torch's DataLoader around the loader would take its batches for samples (len(loader) counts batches) and
    cover one frame in batch_size, silently: refused, at construction or first fetch, naming `loader.dataset`; around
    `loader.dataset` it draws every frame once an epoch."""
    import torch

    loader = StreamLoader(str(small_dataset), batch_size=4, device="cpu", delta_timestamps=DELTAS)
    n = loader.meta.total_frames
    with pytest.raises(ConfigError, match=rf"already the DataLoader.*cover {len(loader)} of the {n} frames.*"
                                          r"loader\.dataset"):
        torch.utils.data.DataLoader(loader, batch_size=8, shuffle=True)
    for batch_size in (8, None):  # a sequential sampler sizes it when iterated
        with pytest.raises(ConfigError, match="already the DataLoader"):
            next(iter(torch.utils.data.DataLoader(loader, batch_size=batch_size)))
    assert len(loader) > 0  # the caller's own len() still counts batches
    wrapped = torch.utils.data.DataLoader(loader.dataset, batch_size=8, shuffle=True)
    seen = torch.cat([b["index"] for b in wrapped])
    assert sorted(seen.tolist()) == list(range(n))
    loader.close()


AFTER_A_SAMPLE = r"""
import sys
import torch
from dali_stream import StreamLoader
loader = StreamLoader(sys.argv[1], batch_size=4, device="cpu", delta_timestamps={"action": [0.0, 1 / 30]})
loader[0]  # a lerobot habit: look at a sample first; its loader's fetch threads start here
wrapped = torch.utils.data.DataLoader(loader.dataset, batch_size=8, shuffle=True, num_workers=2,
                                      generator=torch.Generator().manual_seed(0))
for n, batch in enumerate(wrapped):
    for j, i in enumerate(batch["index"].tolist()):  # each sample as loader.dataset[i] gives it in this process
        want = loader.dataset[i]
        assert batch["task"][j] == want["task"], (i, batch["task"][j], want["task"])
        for key, value in want.items():
            if key != "task":
                assert torch.equal(batch[key][j], value), (i, key)
    if n == 1:
        break
print("batches", n + 1, flush=True)
"""


def test_a_dataloader_around_its_dataset_after_looking_at_a_sample_yields_its_samples(small_dataset):
    """`loader[0]` opens the samples' loader and starts its fetch threads; torch's DataLoader then forks its
    workers, which have none of those threads: each opens its own, and the batches hold `loader.dataset[i]` for the
    indices drawn (a worker waited forever on a fetch begun by the parent's threads). A real child process, so a hang
    fails the test instead of hanging it."""
    import subprocess
    import sys

    try:
        proc = subprocess.run([sys.executable, "-c", AFTER_A_SAMPLE, str(small_dataset)], capture_output=True,
                              text=True, timeout=180)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"no batch in 180 s: the DataLoader's workers hung ({exc.stderr!r})")
    assert proc.returncode == 0 and proc.stdout.split() == ["batches", "2"], proc.stdout + proc.stderr[-3000:]


def test_an_episode_selection_indexes_its_own_frames(small_dataset):
    loader = StreamLoader(str(small_dataset), episodes=[2, 5], device="cpu", batch_size=2)
    lengths = {int(e): int(n) for e, n in zip(loader.meta.episodes["episode_index"], loader.meta.lengths)}
    assert len(loader.dataset) == lengths[2] + lengths[5]
    assert int(loader[0]["episode_index"]) == 2 and int(loader[0]["frame_index"]) == 0
    last = loader[-1]
    assert int(last["episode_index"]) == 5 and int(last["frame_index"]) == lengths[5] - 1
    second_rank = StreamLoader(str(small_dataset), episodes=[2, 5], device="cpu", batch_size=2, rank=1,
                               world_size=2)  # samples are the whole selection's, whatever the loader's rank
    assert len(second_rank.dataset) == len(loader.dataset) and int(second_rank[0]["episode_index"]) == 2


def test_episode_filter_keeps_the_episodes_its_predicate_keeps_as_lerobots_does(small_dataset, embodiments):
    """lerobot's `episode_filter`: a predicate over each episode's row of meta/episodes (no stats columns),
    intersected with `episodes`; the selection is the loader's whole dataset (plans, samples, resume)."""
    rows = open_meta(str(small_dataset)).episode_rows()
    assert rows[0]["episode_index"] == 0 and "length" in rows[0] and "tasks" in rows[0]
    assert not any(k.startswith("stats/") for k in rows[0])
    long = [r["episode_index"] for r in rows if r["length"] >= 12]
    assert 0 < len(long) < len(rows)
    loader = StreamLoader(str(small_dataset), episode_filter=lambda ep: ep["length"] >= 12, device="cpu",
                          batch_size=2, drop_last=False, shuffle=False)
    assert sorted({int(e) for batch in loader for e in batch["episode_index"]}) == long
    assert len(loader.dataset) == sum(r["length"] for r in rows if r["length"] >= 12)
    both = StreamLoader(str(small_dataset), episodes=[0, 1, long[-1]], episode_filter=lambda ep: ep["length"] >= 12,
                        device="cpu", batch_size=1)
    assert both.catalog.members[0].episodes.tolist() == sorted({0, 1, long[-1]} & set(long))
    with pytest.raises(ConfigError, match=r"episode_filter raised KeyError: 'lenght' on episode 0.*'length'"):
        StreamLoader(str(small_dataset), episode_filter=lambda ep: ep["lenght"] > 1, device="cpu")
    with pytest.raises(ConfigError, match=r"episode_filter keeps no episode"):
        StreamLoader(str(small_dataset), episode_filter=lambda ep: False, device="cpu")
    with pytest.raises(ConfigError, match=r"a mixture's members take their episodes one by one"):
        StreamLoader([str(embodiments["arm6"]), str(embodiments["big"])], episode_filter=bool, device="cpu")


def test_a_wrong_batch_key_names_the_keys_there_are(small_dataset):
    import pickle

    with StreamLoader(str(small_dataset), batch_size=2, device="cpu") as loader:
        batch = next(iter(loader))
    assert isinstance(batch, dict) and "observation.images.front" in batch
    with pytest.raises(KeyError, match=r"'observation.image' is not a key of this batch \(did you mean "
                                       r"'observation.images.top' or 'observation.images.front'.*its keys: \[.*'action'"):
        batch["observation.image"]
    assert batch.get("observation.image") is None  # dict's own ways of asking are unchanged
    assert set(pickle.loads(pickle.dumps(batch))) == set(batch)


def test_the_loader_shows_its_public_parts_and_names_where_the_rest_is(small_dataset):
    """The values settled at construction under their own names (the same objects each time: what the loader reads
    itself); its parts stay inside, and asking for one says where what it holds is (tests/loader/test_insides.py: the
    private attributes)."""
    with StreamLoader(str(small_dataset), batch_size=2, device="cpu") as loader:
        assert loader.meta is loader.catalog.members[0].meta and loader.meta is loader.meta
        assert set(loader.routes) == set(loader.route_reasons) == set(loader.meta.camera_keys)
        assert loader.resolved is loader.resolved and loader.device == "cpu" and loader.world.world_size == 1
        assert loader.dali_device is None and loader.node is loader.node and loader.node.gpus >= 0
        assert loader.plan_config.batch_size == 2 and loader.image_ops.dtype == "float32"
        with pytest.raises(AttributeError, match=r"the loader's store is its own, not shown; what it holds is in "
                                                 r"loader\.stats\(\)"):
            getattr(loader, "store")  # noqa: B009 - the attribute the loader no longer shows
        with pytest.raises(AttributeError, match=r"has no attribute 'nonsense'$"):
            getattr(loader, "nonsense")  # noqa: B009


def test_lerobots_names_of_the_dataset_and_its_episodes(small_dataset):
    """What a lerobot user reads beside dataset[i]: `num_frames`, `num_episodes`, `fps` on the loader and on
    `loader.dataset`, `loader.dataset.meta`, and `meta.episodes[i]` a row, `len()` and iteration by rows (lerobot's
    episodes are a dataset of rows) while `meta.episodes["length"]` stays a column."""
    from dali_stream import StreamLoader

    episodes = [0, 2, 3]
    with StreamLoader(str(small_dataset), device="cpu", episodes=episodes) as loader:
        meta = loader.meta
        lengths = {int(e): int(n) for e, n in zip(meta.episodes["episode_index"], meta.episodes["length"])}
        for owner in (loader, loader.dataset):
            assert owner.num_episodes == 3
            assert owner.num_frames == sum(lengths[e] for e in episodes) == len(loader.dataset)
            assert owner.fps == 30.0
        assert loader.dataset.meta is meta
        row = meta.episodes[0]
        assert row["episode_index"] == 0 and row["length"] == lengths[0] and isinstance(row["length"], int)
        assert meta.episodes[-1]["episode_index"] == max(lengths)
        with pytest.raises(IndexError, match=r"episode row 99 is out of range: the episodes table holds"):
            meta.episodes[99]
        # rows counted and iterated as lerobot's (a dataset of rows), columns named as its `column_names`
        assert len(meta.episodes) == meta.total_episodes == len(lengths)
        assert [r["episode_index"] for r in meta.episodes] == sorted(lengths)
        assert "length" in meta.episodes.column_names and "length" in meta.episodes
