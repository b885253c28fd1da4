"""Mixtures end to end: datasets of different embodiments (camera sets and sizes, 6 vs 7 dof, 30 vs 10 fps,
H.264 + AV1 + VP9) through one StreamLoader. Every sample is checked against its own member read the way
lerobot reads it (tests/support/reference.py): tables bit-exact, frames by painted ids (each member paints its own
episode ids), masks exactly where keys are missing or vectors padded; shares, resume and elastic resume."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch

from dali_stream import ConfigError, Member, Mixture, StreamLoader
from dali_stream.loader.source_setup import epoch_shares
from dali_stream.plan.mixture_epoch import member_targets
from dali_stream.tools.paint import read_ids
from tests.support.parts import store_for
from tests.support.reference import Reference
from tests.support.take import same_batches, take

FRONT, WRIST, TOP = "observation.images.front", "observation.images.wrist", "observation.images.top"
STATE, ACTION = "observation.state", "action"
DELTAS = {ACTION: [0.0, 0.1, 0.2], FRONT: [-0.1, 0.0]}  # multiples of 1/30 and of 1/10 s
ARGS = dict(batch_size=4, episode_pool_size=3, seed=7, device="cpu", num_workers=2, drop_last=False,
            delta_timestamps=DELTAS)
OFFSET = {"arm6": 0, "arm7": 100, "big": 200}
OWN = {"arm6": {}, "arm7": {FRONT: TOP, WRIST: None}, "big": {WRIST: None}}  # mixture key -> member's key


def _mix(embodiments, *names, **kwargs):
    members = {"arm6": Member(str(embodiments["arm6"]), name="arm6"),
               "arm7": Member(str(embodiments["arm7"]), name="arm7", keys={TOP: FRONT}),
               "big": Member(str(embodiments["big"]), name="big")}
    weights = kwargs.pop("weights", None) or [1.0] * len(names)
    return Mixture(tuple(Member(**{**members[n].__dict__, "weight": w}) for n, w in zip(names, weights)), **kwargs)


@pytest.fixture(scope="module")
def refs(embodiments):
    """Each member read as lerobot reads it, with the loader's windows under its own keys."""
    def own(name):
        return {OWN[name].get(k, k): v for k, v in DELTAS.items() if OWN[name].get(k, k) is not None}
    return {name: Reference(root, own(name)) for name, root in embodiments.items()}


def _samples(batch):
    n = len(batch["task"])
    return [{k: (v[i] if k == "task" else v[i].numpy()) for k, v in batch.items()} for i in range(n)]


def _ids(frames) -> list[tuple[int, int]]:
    frames = frames if frames.ndim == 4 else frames[None]
    return [read_ids(f) for f in frames]


def _check_sample(s, names, refs, own_keys):
    """One sample against its member's lerobot-style reading (`own_keys[name]`: mixture key -> its key)."""
    name = names[int(s["dataset_index"])]
    ref = refs[name].item(int(s["index"]))
    mine = own_keys[name]
    for key, value in s.items():
        if key in ("dataset_index", "task") or key.endswith(("_is_missing", "_dim_is_pad")):
            continue
        own = mine.get(key.removesuffix("_is_pad"), key.removesuffix("_is_pad"))
        if key.endswith("_is_pad"):
            if own is None:
                assert value.all(), (name, key)
            else:
                np.testing.assert_array_equal(value, ref[f"{own}_is_pad"], err_msg=f"{name} {key}")
            continue
        own = mine.get(key, key)
        if own is None:  # the member lacks the key: zeros and the mask
            assert not value.any() and bool(s[f"{key}_is_missing"]), (name, key)
            continue
        if f"{key}_is_missing" in s:
            assert not s[f"{key}_is_missing"], (name, key)
        want = ref[own]
        if key.startswith("observation.images."):
            assert _ids(value) == _ids(want), (name, key, int(s["index"]))
            assert all(e >= OFFSET[name] for e, _ in _ids(value))
            continue
        if f"{key}_dim_is_pad" in s:  # a shorter vector: its values, then zeros
            n = want.shape[-1]
            assert s[f"{key}_dim_is_pad"].tolist() == [False] * n + [True] * (value.shape[-1] - n), (name, key)
            assert not value[..., n:].any()
            value = value[..., :n]
        assert value.dtype == want.dtype, (name, key, value.dtype, want.dtype)
        np.testing.assert_array_equal(value, want, err_msg=f"{name} {key}")
    assert s["task"] == ref["task"]
    return name




def test_an_epoch_is_every_members_samples_with_masks(embodiments, refs):
    loader = StreamLoader(_mix(embodiments, "arm6", "arm7"), decode="cpu", **ARGS)
    names = loader.meta.member_names
    assert names == ["arm6", "arm7"]
    assert loader.routes == {FRONT: "torchcodec", WRIST: "torchcodec"} and loader.host_batches
    seen = Counter()
    for batch in loader:
        assert batch[FRONT].shape[1:] == (2, 3, 96, 128) and batch[WRIST].shape[1:] == (3, 96, 128)
        assert batch[STATE].shape[1:] == (7,) and batch[ACTION].shape[1:] == (3, 7)
        assert batch["dataset_index"].dtype == torch.int64
        assert set(batch) >= {f"{WRIST}_is_missing", f"{STATE}_dim_is_pad", f"{ACTION}_dim_is_pad"}
        assert f"{FRONT}_is_missing" not in batch, "every member has a front camera"
        for s in _samples(batch):
            seen[(_check_sample(s, names, refs, OWN), int(s["index"]))] += 1
    frames = {n: json.loads((embodiments[n] / "meta/info.json").read_text())["total_frames"] for n in names}
    assert set(seen.values()) == {1}, "weight 1 everywhere: every frame once"
    assert {n: sum(1 for m, _ in seen if m == n) for n in names} == frames


def test_a_dataloader_around_a_mixtures_dataset(embodiments, refs):
    """`loader.dataset` of a mixture in torch's DataLoader (`__getitems__`, `plan.picked` over the mixture's plan):
    samples of both members asked together, repeats and edges included, are each member's own samples as lerobot
    reads them (masks for the camera one member lacks), and each equals the sample asked alone."""
    loader = StreamLoader(_mix(embodiments, "arm6", "arm7"), decode="cpu", **ARGS)
    names, n = loader.meta.member_names, len(loader.dataset)
    asked = [0, n - 1, 5, 5, n // 2, 1, n - 2, 3, 40]
    together = loader.dataset.__getitems__(asked)
    assert len(together) == len(asked) and loader.dataset.stats()["builds"] == 2  # 9 samples: builds of at most 8
    members = [_check_sample({k: v if k == "task" else v.numpy() for k, v in s.items()}, names, refs, OWN)
               for s in together]
    assert set(members) == {"arm6", "arm7"}
    alone = StreamLoader(_mix(embodiments, "arm6", "arm7"), decode="cpu", **ARGS)
    for got, i in zip(together, asked):
        want = alone.dataset[i]
        assert set(got) == set(want)
        for key, value in got.items():
            assert value == want[key] if key == "task" else torch.equal(value, want[key]), (i, key)
    loader.close()
    alone.close()


def test_cameras_of_different_sizes_need_resize(embodiments, refs):
    with pytest.raises(ConfigError, match=r"camera 'observation.images.front' has different sizes.*arm6: 96x128, "
                                          r"big: 120x160.*resize="):
        StreamLoader(_mix(embodiments, "arm6", "big"), decode="cpu", **ARGS)
    loader = StreamLoader(_mix(embodiments, "arm6", "big"), decode="cpu", resize=(96, 128), mean=(0.5, 0.5, 0.5),
                          std=(0.25, 0.25, 0.25), **ARGS)
    assert not loader.host_batches
    names, checked = loader.meta.member_names, Counter()
    for batch in take(loader, 8):
        assert batch[FRONT].shape[1:] == (2, 3, 96, 128)
        for s in _samples(batch):
            name = names[int(s["dataset_index"])]
            if name == "big":  # a member without the wrist camera: zeros after mean/std, and the mask
                assert s[f"{WRIST}_is_missing"] and not s[WRIST].any()
            else:
                assert not s[f"{WRIST}_is_missing"]
            front = s[FRONT] * 0.25 + 0.5  # undo mean/std to read the painted ids
            assert [e for e, _ in _ids(front)] == [int(s["episode_index"]) + OFFSET[name]] * 2
            checked[name] += 1
    assert set(checked) == {"arm6", "big"}
    assert loader.meta.features[FRONT]["shape"] == [96, 128, 3]


@pytest.mark.parametrize("samples_per_epoch", [None, 150])
def test_shares_follow_the_weights(embodiments, samples_per_epoch):
    weights = [1.0, 3.0]
    loader = StreamLoader(_mix(embodiments, "arm6", "arm7", weights=weights, samples_per_epoch=samples_per_epoch),
                          decode="cpu", **{**ARGS, "delta_timestamps": {}})
    counts = Counter()
    per_frame = Counter()
    for batch in loader:
        counts.update(batch["dataset_index"].tolist())
        per_frame.update(zip(batch["dataset_index"].tolist(), batch["index"].tolist()))
    frames = np.array([loader.catalog.members[m].frames for m in range(2)])
    total = samples_per_epoch or int(frames.sum())
    assert [counts[0], counts[1]] == member_targets(frames, tuple(weights), total).tolist()
    # arm7 is smaller than its share: its frames repeat (each the floor or ceiling of the ratio); arm6 is subsampled
    repeats = [per_frame[(1, i)] for i in range(frames[1])]
    assert min(repeats) >= 1 and max(repeats) - min(repeats) <= 1
    assert max(n for (m, _), n in per_frame.items() if m == 0) == 1


def _shared(embodiments, shares, **kwargs):
    return Mixture((Member(str(embodiments["arm6"]), name="arm6", share=shares[0]),
                    Member(str(embodiments["arm7"]), name="arm7", keys={TOP: FRONT}, share=shares[1])), **kwargs)


def test_shares_are_the_epochs_parts_whatever_the_frames(embodiments):
    """`Member(share=)`: a 50/50 mixture of members of different sizes draws half its samples from each; a state
    records the shares, and other shares refuse it."""
    mix = _shared(embodiments, (0.5, 0.5), samples_per_epoch=120)
    loader = StreamLoader(mix, decode="cpu", **{**ARGS, "delta_timestamps": {}, "drop_last": False})
    frames = [m.frames for m in loader.catalog.members]
    assert frames[0] != frames[1]
    assert epoch_shares(loader.catalog).tolist() == [0.5, 0.5]
    counts = Counter(i for batch in loader for i in batch["dataset_index"].tolist())
    assert [counts[0], counts[1]] == [60, 60]
    state = loader.state_dict()
    assert [m.get("share") for m in state["dataset"]["mixture"]] == [0.5, 0.5]
    other = StreamLoader(_shared(embodiments, (0.7, 0.3), samples_per_epoch=120), decode="cpu",
                         **{**ARGS, "delta_timestamps": {}, "drop_last": False})
    with pytest.raises(Exception, match="dataset"):
        other.load_state_dict(state)
    with pytest.raises(ConfigError, match=r"give `share` .* or `weight` .*, not both"):
        Member("x", weight=2.0, share=0.5)
    with pytest.raises(ConfigError, match=r"\['a'\] give a `share` and \['b'\] do not"):
        Mixture((Member("x", name="a", share=0.5), Member("y", name="b")))
    with pytest.raises(ConfigError, match="`share` must be a finite number > 0"):
        Member("x", share=0)


def test_a_mixture_loader_on_open_meta(embodiments):
    """`open_meta(mixture)`: the merged metadata before a loader, which the loader takes in place of the mixture
    (the same batches), refusing a setting a mixture takes per member."""
    from dali_stream import open_meta
    from dali_stream.meta.catalog import MixtureMeta

    mix = _mix(embodiments, "arm6", "arm7", weights=[1.0, 2.0])
    meta = open_meta(mix)
    assert isinstance(meta, MixtureMeta) and meta.member_names == ["arm6", "arm7"]
    with StreamLoader(mix, decode="cpu", **ARGS) as a, StreamLoader(meta, decode="cpu", **ARGS) as b:
        same_batches(take(a, 3), take(b, 3))
    with pytest.raises(ConfigError, match=r"\['episodes'\] apply to one dataset"):
        StreamLoader(meta, episodes=[0, 1], **ARGS)


def _flat(batches):
    return [(k, b[k]) for b in batches for k in sorted(b) if k != "task"]


@pytest.mark.parametrize("weights", [None, [1.0, 2.5]])
def test_resume_continues_pixel_for_pixel(embodiments, weights):
    mix = _mix(embodiments, "arm6", "arm7", weights=weights)
    whole = [b for b in StreamLoader(mix, decode="cpu", **ARGS)]
    first = StreamLoader(mix, decode="cpu", **ARGS)
    head = take(first, 5)
    state = json.loads(json.dumps(first.state_dict()))
    assert state["dataset"]["mixture"][1]["name"] == "arm7"
    again = StreamLoader(mix, decode="cpu", **{**ARGS, "num_workers": 0})
    again.load_state_dict(state)
    same_batches(head + [b for b in again], whole)
    other = StreamLoader(_mix(embodiments, "arm6", "arm7", weights=[1.0, 9.0]), decode="cpu", **ARGS)
    with pytest.raises(Exception, match="dataset"):
        other.load_state_dict(state)
    split = Mixture((Member(str(embodiments["arm6"]), name="arm6", episodes=[0, 1, 2]), mix.members[1]))
    with pytest.raises(Exception, match="selection"):  # a member's other episodes
        StreamLoader(split, decode="cpu", **ARGS).load_state_dict(state)


def test_elastic_resume_makes_every_draw_once(embodiments, refs):
    """Two ranks stop after 3 batches; three ranks finish the epoch: the draws add up to the epoch's."""
    mix = _mix(embodiments, "arm6", "arm7", weights=[1.0, 2.0])
    args = {**ARGS, "episode_pool_size": 2}
    drawn: Counter = Counter()
    state = None
    for rank in range(2):
        loader = StreamLoader(mix, decode="cpu", rank=rank, world_size=2, **args)
        for batch in take(loader, 3):
            drawn.update(zip(batch["dataset_index"].tolist(), batch["index"].tolist()))
        state = state or loader.state_dict()
    names = ["arm6", "arm7"]
    for rank in range(3):
        loader = StreamLoader(mix, decode="cpu", rank=rank, world_size=3, **args)
        loader.load_state_dict(state)
        n = loader.epoch_plan(0).num_frames  # this rank's own draws in the rest of the epoch (then padding)
        own = []
        for batch in loader:
            for s in _samples(batch):
                _check_sample(s, names, refs, OWN)
                own.append((int(s["dataset_index"]), int(s["index"])))
        drawn.update(own[:n])  # the rest pads with repeats of its own draws
    epoch = Counter()
    for batch in StreamLoader(mix, decode="cpu", **args):
        epoch.update(zip(batch["dataset_index"].tolist(), batch["index"].tolist()))
    assert drawn == epoch


def test_an_evaluation_pass_goes_member_by_member(embodiments):
    loader = StreamLoader(_mix(embodiments, "arm6", "arm7", weights=[1.0, 5.0]), decode="cpu", shuffle=False,
                          **{**ARGS, "drop_last": None})
    pairs = [(int(d), int(i)) for b in loader for d, i in zip(b["dataset_index"], b["index"])]
    frames = [m.frames for m in loader.catalog.members]
    assert pairs == [(0, i) for i in range(frames[0])] + [(1, i) for i in range(frames[1])]


def test_routes_per_member_and_one_per_key(embodiments, small_dataset):
    """With decode="dali-cpu", small's top camera is VP9 (DALI's CPU decoder) and arm6's wrist AV1 (torchcodec, which
    DALI's CPU decoder lacks): one key decodes one way, so the mixture takes torchcodec for it and says why; where
    every member agrees, DALI's decoder stays."""
    mixed = Mixture((Member(str(embodiments["arm6"]), name="arm6"),
                     Member(str(small_dataset), name="small", keys={TOP: WRIST})))
    loader = StreamLoader(mixed, **{**ARGS, "delta_timestamps": {}, "decode": "dali-cpu"})
    assert loader.member_routes == {"arm6": {FRONT: "torchcodec", WRIST: "torchcodec"},
                                    "small": {FRONT: "torchcodec", WRIST: "dali-cpu"}}
    assert loader.routes[WRIST] == "torchcodec" and "different routes" in loader.route_reasons[WRIST]
    assert len(take(loader, 2)) == 2
    # the same dataset twice (two splits): both members' VP9 camera stays on DALI's CPU decoder, one clip per sample
    splits = Mixture((Member(str(small_dataset), name="a", episodes=[0, 1, 2]),
                      Member(str(small_dataset), name="b", episodes=[3, 4, 5, 6], weight=2.0)))
    loader = StreamLoader(splits, **{**ARGS, "delta_timestamps": {TOP: [-1 / 30, 0.0]}, "decode": "dali-cpu"})
    assert loader.routes[TOP] == "dali-cpu" and loader.resolved.join_streams == 0
    for batch in take(loader, 3):
        for s in _samples(batch):
            ids = _ids(np.rint(s[TOP] * 255).astype(np.uint8))
            assert ids[-1] == (int(s["episode_index"]), int(s["frame_index"]))
            assert int(s["episode_index"]) in ([0, 1, 2] if s["dataset_index"] == 0 else [3, 4, 5, 6])
    # a VP9 camera one member lacks: DALI's decoder takes no empty sample, so torchcodec
    lacking = Mixture((Member(str(small_dataset), name="small"), Member(str(embodiments["arm6"]), name="arm6")))
    loader = StreamLoader(lacking, **{**ARGS, "delta_timestamps": {}})
    assert loader.routes[TOP] == "torchcodec" and "lack it" in loader.route_reasons[TOP]


def test_members_resolve_windows_at_their_own_fps(embodiments, refs):
    with pytest.raises(ConfigError, match=r"member 'arm7' \(10 fps\).*multiples of 1/fps"):
        StreamLoader(_mix(embodiments, "arm6", "arm7"), decode="cpu",
                     **{**ARGS, "delta_timestamps": {ACTION: [0.0, 1 / 30]}})
    own = Mixture((Member(str(embodiments["arm6"]), name="arm6"),
                   Member(str(embodiments["arm7"]), name="arm7", keys={TOP: FRONT},
                          delta_timestamps={ACTION: [0.0, 0.1]})))
    loader = StreamLoader(own, decode="cpu", **{**ARGS, "delta_timestamps": {ACTION: [0.0, 1 / 30]}})
    for batch in take(loader, 4):
        for s in _samples(batch):
            step = 1  # one frame later at either fps
            assert s["action_is_pad"].tolist() == [False, s["frame_index"] + step >= _length(refs, loader, s)]


def _length(refs, loader, s):
    name = loader.meta.member_names[int(s["dataset_index"])]
    return refs[name].episodes[int(s["episode_index"])]["length"]


def test_stats_merge_counts_in_the_mixtures_keys(embodiments):
    loader = StreamLoader(_mix(embodiments, "arm6", "arm7"), decode="cpu", **ARGS)
    a, b = (json.loads((embodiments[n] / "meta/stats.json").read_text()) for n in ("arm6", "arm7"))
    stats = loader.meta.stats
    na, nb = a[STATE]["count"][0], b[STATE]["count"][0]
    mean_a, mean_b = np.array(a[STATE]["mean"]), np.array(b[STATE]["mean"])
    np.testing.assert_allclose(stats[STATE]["mean"][:6], (na * mean_a + nb * mean_b[:6]) / (na + nb))
    np.testing.assert_allclose(stats[STATE]["mean"][6], mean_b[6])  # only arm7 has a 7th element
    var = (na * (np.array(a[STATE]["std"]) ** 2 + (mean_a - stats[STATE]["mean"][:6]) ** 2)
           + nb * (np.array(b[STATE]["std"][:6]) ** 2 + (mean_b[:6] - stats[STATE]["mean"][:6]) ** 2)) / (na + nb)
    np.testing.assert_allclose(stats[STATE]["std"][:6], np.sqrt(var))
    np.testing.assert_allclose(stats[STATE]["min"], np.minimum(np.r_[a[STATE]["min"], np.inf], b[STATE]["min"]))
    assert stats[STATE]["count"].tolist() == [na + nb]
    assert stats[FRONT]["mean"].shape == (3, 1, 1), "arm7's top camera's stats under the mixture's front"
    assert loader.meta.features[STATE]["shape"] == [7] and loader.meta.features[WRIST]["dtype"] == "video"
    assert set(loader.meta.member_stats) == {"arm6", "arm7"} and "quantiles" in loader.meta.stats_approximate


def test_mixture_errors_name_the_members_and_the_fix(embodiments):
    with pytest.raises(ConfigError, match=r"different lengths \(arm6: \[6\], arm7: \[7\]\).*vectors='pad'"):
        StreamLoader(_mix(embodiments, "arm6", "arm7", vectors="exact"), decode="cpu", **ARGS)
    with pytest.raises(ConfigError, match=r"\['episodes'\] apply to one dataset.*Member\(source, episodes="):
        StreamLoader(_mix(embodiments, "arm6", "arm7"), episodes=[0, 1], **ARGS)
    clash = Mixture((Member(str(embodiments["arm6"]), name="arm6"),
                     Member(str(embodiments["arm7"]), name="arm7", keys={TOP: STATE, STATE: "state7"})))
    with pytest.raises(ConfigError, match=r"'observation.state' is float32 and video.*arm7 \('observation.images.top'\)"):
        StreamLoader(clash, **ARGS)
    with pytest.raises(ConfigError, match=r"member 'arm7': keys renames \['observation.images.side'\]"):
        StreamLoader(Mixture((Member(str(embodiments["arm7"]), name="arm7", keys={"observation.images.side": FRONT}),)),
                     **ARGS)
    restated = Mixture((Member(str(embodiments["arm6"]), name="arm6", delta_timestamps={STATE: [0.0]}),))
    with pytest.raises(ConfigError, match=r"member 'arm6': delta_timestamps gives offsets for \['observation.state'\]"):
        StreamLoader(restated, **ARGS)
    with pytest.raises(ConfigError, match="weight"):
        Member("x", weight=0)
    with pytest.raises(ConfigError, match="index columns"):
        Member("x", keys={"frame_index": "step"})


def test_members_share_the_loaders_bounds(embodiments):
    loader = StreamLoader(_mix(embodiments, "arm6", "arm7", "big"), decode="cpu", resize=(96, 128), **ARGS)
    store = store_for(loader)  # a store as the loader's, over its members
    files = store.files
    assert len(files) == 3
    assert all(f.tables.files is files[0].tables.files for f in files), "one bound for every member's footers"
    assert all(f.indexes.files is files[0].indexes.files for f in files), "one bound for every member's indexes"
    assert all(f.indexes.unsupported is store.indexes.unsupported for f in files), "one list of unindexed files"
    store.close()
    take(loader, 6)
    budget = loader.memory_budget()
    assert budget["cache_peak"] <= budget["cache_bound"]
    # the loader's own indexes, every member's under the one bound
    assert budget["mp4_indexes_peak"] == loader.stats()["bounded"]["mp4_indexes"]["peak"] > 0


def test_a_mixture_file_and_plain_sources(embodiments, tmp_path):
    from dali_stream.mixture import load_mixture

    path = tmp_path / "mix.json"
    path.write_text(json.dumps({"members": [{"source": str(embodiments["arm6"]), "weight": 2, "name": "a"},
                                            str(embodiments["big"])], "samples_per_epoch": 99}))
    mix = load_mixture(str(path))
    assert mix.names == ["a", "big"] and mix.members[0].weight == 2.0 and mix.samples_per_epoch == 99
    loader = StreamLoader([str(embodiments["arm6"]), str(embodiments["arm6"])], decode="cpu", **ARGS)
    assert loader.meta.member_names == ["arm6", "arm6#2"]
    (tmp_path / "bad.json").write_text(json.dumps({"members": [{"source": "x", "wieght": 2}]}))
    with pytest.raises(ConfigError, match=r"unknown entries \['wieght'\]"):
        load_mixture(str(tmp_path / "bad.json"))


def test_remote_members_read_as_local_ones(embodiments, tmp_path):
    """A local member, one on the Hub (hf://, through huggingface_hub's HfFileSystem against the emulator) and one
    in S3 (moto's server) in one mixture: the same batches as the all-local mixture."""
    from tests.support.hubserver import Hub
    from tests.support.s3server import S3

    with S3() as s3:
        s3.upload(embodiments["big"], "robots/big")
        with Hub("hf_TESTtoken0123456789") as hub:
            hub.add_dataset("lab/arm7", {"main": embodiments["arm7"]})
            remote = Mixture((
                Member(str(embodiments["arm6"]), name="arm6"),
                Member("hf://datasets/lab/arm7", name="arm7", keys={TOP: FRONT}, weight=2.0,
                       storage_options={"endpoint": hub.endpoint, "token": "hf_TESTtoken0123456789"}),
                Member("s3://robots/big", name="big", storage_options=s3.options())))
            args = {**ARGS, "resize": (96, 128)}
            loader = StreamLoader(remote, decode="cpu", **args)
            got = [b for b in loader]
            assert loader.remote_stats["bytes"] > 0
        assert hub.unknown == [], "requests the emulator does not know"
        local = StreamLoader(_mix(embodiments, "arm6", "arm7", "big", weights=[1.0, 2.0, 1.0]), decode="cpu", **args)
        want = [b for b in local]
    same_batches(got, want)
    assert {int(d) for b in got for d in b["dataset_index"]} == {0, 1, 2}


def test_member_stats_come_under_the_mixtures_keys(embodiments):
    loader = StreamLoader(_mix(embodiments, "arm6", "arm7"), decode="cpu", **ARGS)
    own = json.loads((embodiments["arm7"] / "meta/stats.json").read_text())
    mine = loader.meta.member_stats["arm7"]
    assert FRONT in mine and TOP not in mine and WRIST not in mine
    np.testing.assert_allclose(mine[FRONT]["mean"], own[TOP]["mean"])


def test_the_open_decoder_engine_in_a_mixture(embodiments, refs):
    """decode='cpu-open' (the open-decoder engine on FFmpeg's decoders): each member's camera on decoders of its
    own, a member without the camera as zeros; every frame checked against its member."""
    loader = StreamLoader(_mix(embodiments, "arm6", "arm7"), decode="cpu-open", **ARGS)
    assert set(loader.routes.values()) == {"cpu-open"}
    names, seen = loader.meta.member_names, Counter()
    for batch in take(loader, 6):
        for s in _samples(batch):
            seen[_check_sample(s, names, refs, OWN)] += 1
    assert set(seen) == {"arm6", "arm7"}
    assert loader.stats()["engines"]["cpu-open"]["decoders_opened"] >= 3  # front per member, and arm6's wrist


def test_two_features_under_one_key_are_refused(embodiments):
    both = Mixture((Member(str(embodiments["arm6"]), name="arm6", keys={WRIST: FRONT}),))
    with pytest.raises(ConfigError, match=r"'observation.images.front' and 'observation.images.wrist' both come "
                                          r"under the mixture key 'observation.images.front'"):
        StreamLoader(both, **ARGS)
