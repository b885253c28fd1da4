"""The decoded-frame cache (`frame_cache_bytes`, `frame_cache_dir`, `decode/frame_cache.py`): later epochs read the
frames torchcodec decoded before, and every batch is the uncached batch of the same plan, bit for bit."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch

from dali_stream import ConfigError, StreamLoader
from dali_stream.augment import random_resized_crop_and_jitter
from dali_stream.decode.frame_cache import FrameCache
from dali_stream.tools.paint import read_ids
from tests.support.parts import built
from tests.support.take import epochs

ARGS = dict(batch_size=4, device="cpu", decode="cpu", image_dtype="uint8", seed=11)


def assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            if isinstance(a[key], torch.Tensor):
                assert torch.equal(a[key], b[key]), key
            else:
                assert a[key] == b[key], key


WINDOWS = {"observation.images.front": [-0.1, 0.0], "observation.images.wrist": [-0.1, 0.0]}
TOP_WINDOWS = {"observation.images.top": [-0.2, -0.1, 0.0], "observation.images.front": [-0.1, 0.0]}


@pytest.mark.parametrize("setup", [
    dict(),  # host frames: laid out by the workers
    dict(memory_format="channels_last"),  # host frames as decoded (HWC): a held batch is one copy
    dict(image_dtype="float32", mean=(0.4, 0.5, 0.6), std=(0.2, 0.25, 0.3)),  # host frames scaled and normalized
    dict(resize=(40, 48), crop=(30, 41)),  # through the DALI graph, resized and cropped by the workers first
    dict(crop=(64, 90)),  # cropped by the workers first
    dict(episode_pool_size="all", segment_bytes=1),  # a global shuffle of long episodes' pieces, joined per batch
    dict(delta_timestamps=WINDOWS),
    dict(decode="cpu-open", delta_timestamps=WINDOWS),  # the open engine's FFmpeg decoders, into the graph
    # VP9 through DALI's CPU decoder (on the workers with the cache, in the graph without), the rest torchcodec:
    # (host frames: test_an_epoch_whose_frames_are_all_held_fetches_and_decodes_nothing)
    dict(decode="dali-cpu", resize=(40, 48), crop=(30, 41)),  # through the graph, resized and cropped by the workers
    dict(decode="dali-cpu", delta_timestamps=TOP_WINDOWS),  # windows: in the graph, joined into streams per batch
    dict(decode="dali-cpu", episode_pool_size="all", segment_bytes=1),  # long episodes' pieces
    # augment= in the graph on the kept frames (kept as decoded: the hook runs before resize), seeded per sample
    dict(decode="dali-cpu", augment=random_resized_crop_and_jitter, resize=(40, 48)),
], ids=["host", "host-channels-last", "host-float-mean-std", "graph-resize-crop", "graph-crop", "global-pieces", "windows", "cpu-open-windows",
        "dali-resize-crop", "dali-windows", "dali-global-pieces", "dali-augment"])
def test_cached_epochs_are_the_uncached_ones(four_codec_dataset, setup):
    """Two epochs with the cache equal two without, every key and pixel, on H.264 (B-frames), HEVC, AV1 and VP9
    through torchcodec, through the open engine's FFmpeg decoders and (VP9) through DALI's CPU decoder; the second
    epoch decodes (almost) nothing: each frame the first one decoded is read. Windows whose frames overlap reuse
    them within the first epoch too (torchcodec decodes a frame once per batch; the engine once per sample). Six of
    the ten episodes: two files of each camera, episodes starting mid-GOP."""
    args = {**ARGS, "max_episodes": 6, **setup}
    plain = StreamLoader(str(four_codec_dataset), **args)
    want = epochs(plain)
    # frames the graph's DALI decoder was asked for in the first epoch (the cache's count includes them)
    steps = len(args.get("delta_timestamps", {}).get("observation.images.top", [0]))
    in_graph = sum(c["samples"] for c in plain.stats()["build"]["dali"].values()) // 2 * steps
    plain.close()
    cached = StreamLoader(str(four_codec_dataset), **args, frame_cache_bytes=1 << 30)
    routes = {"cpu-open"} if setup.get("decode") == "cpu-open" else {"torchcodec"}
    assert set(cached.routes.values()) == (routes | {"dali-cpu"} if setup.get("decode") == "dali-cpu" else routes)
    assert cached.resolved.dali_on_workers == tuple(k for k, r in cached.routes.items() if r == "dali-cpu")
    got = epochs(cached)
    for (g, _), (w, _) in zip(got, want):
        assert_same(g, w)
    first, second = got[0][1], got[1][1]
    assert 0 < first <= want[0][1] + in_graph  # fewer where windows overlap: a frame two samples show is decoded once
    stats = cached.stats()["frames"]
    assert stats["hits"] > 0 and second <= 0.1 * first, (first, second, stats)
    if "crop" in setup:  # kept resized and cropped by the workers, neither done again by the graph
        assert cached.resolved.shaped_on_workers == tuple(cached.routes)
        assert stats["held"] == stats["frames"] * setup["crop"][0] * setup["crop"][1] * 3, stats
    assert cached.stats()["bounded"]["decoded_frames"]["held"] == stats["held"] <= 1 << 30
    cached.close()


def test_frames_past_the_bound_spill_to_the_folder_and_come_back(four_codec_dataset, tmp_path):
    """With room for almost nothing in memory, the frames go to `frame_cache_dir`; a later run (a new loader, as a
    restarted job or another rank of the node) reads them from there: the same batches, nothing decoded."""
    want = epochs(StreamLoader(str(four_codec_dataset), **ARGS), 1)[0][0]
    args = dict(ARGS, frame_cache_bytes=1, frame_cache_dir=str(tmp_path / "frames"))
    first = StreamLoader(str(four_codec_dataset), **args)
    (got, decoded), = epochs(first, 1)
    assert_same(got, want)
    assert decoded > 0 and first.stats()["frames"]["spilled"] == decoded
    first.close()
    later = StreamLoader(str(four_codec_dataset), **args)
    (again, decoded), = epochs(later, 1)
    assert_same(again, want)
    assert decoded == 0 and later.stats()["frames"]["disk_hits"] > 0
    later.close()


def test_a_remote_datasets_frames_are_kept_and_spilled_by_the_stores_version_tag(small_dataset, tmp_path):
    """Over HTTP the cache names a video file by the size and ETag the server reports (it raised AttributeError on
    the remote file system): epoch 2 decodes nothing, a later run reads the spill folder, the batches are the
    local dataset's."""
    from tests.support.httpserver import Server

    with StreamLoader(str(small_dataset), **ARGS, frame_cache_bytes=1 << 28) as local:
        want = epochs(local, 2)  # epoch 2 decodes only the few frames epoch 1 never asked for
    assert want[0][1] > 0 and want[1][1] < want[0][1] // 20
    args = dict(ARGS, frame_cache_bytes=1, frame_cache_dir=str(tmp_path / "frames"))
    with Server(small_dataset) as url:
        with StreamLoader(url, **args) as loader:
            got = epochs(loader, 2)
            assert loader.stats()["frames"]["spilled"] > 0
        with StreamLoader(url, **args) as later:
            (again, decoded), = epochs(later, 1)
            assert decoded == 0 and later.stats()["frames"]["disk_hits"] > 0
    assert [n for _, n in got] == [n for _, n in want]
    for (batches, _), (expected, _) in zip([*got, (again, 0)], [*want, want[0]]):
        assert_same(batches, expected)


def test_a_video_file_changed_under_a_warm_folder_is_decoded_again(tmp_path):
    """A spill folder never serves a stale frame: a camera's video file replaced by one painting other ids (same
    episodes, same times) under a warm folder gives the new file's frames."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=4, min_length=10, max_length=16, gop=4, episodes_per_file=4,
                      cameras=parse_cameras("front:h264"), seed=3)
    root = write_sample(tmp_path / "ds", spec)
    other = write_sample(tmp_path / "other", SampleSpec(**{**vars(spec), "id_offset": 50}))
    args = dict(ARGS, shuffle=False, frame_cache_bytes=1, frame_cache_dir=str(tmp_path / "frames"))

    def ids(loader):
        return [(read_ids(b["observation.images.front"][i])[0], int(b["episode_index"][i]))
                for b in loader for i in range(len(b["index"]))]

    warm = StreamLoader(str(root), **args)
    assert all(painted == episode for painted, episode in ids(warm))
    warm.close()
    video = next(root.glob("videos/*/*/*.mp4"))
    shutil.copyfile(next(other.glob("videos/*/*/*.mp4")), video)
    changed = StreamLoader(str(root), **args)
    got = ids(changed)
    assert got and all(painted == episode + 50 for painted, episode in got)
    assert changed.stats()["frames"]["disk_hits"] == 0
    changed.close()


def test_an_unwritable_folder_warns_once_and_the_epoch_goes_on(small_dataset, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    with pytest.warns(UserWarning, match="frame_cache_dir: could not write decoded frames") as caught:
        loader = StreamLoader(str(small_dataset), **ARGS, frame_cache_bytes=1,
                              frame_cache_dir=str(blocker / "frames"))
        batches = list(loader)
    assert len(batches) == len(loader) and loader.stats()["frames"]["spilled"] == 0
    assert sum("frame_cache_dir" in str(w.message) for w in caught) == 1
    loader.close()


def test_the_spill_stops_at_the_drives_free_space_floor_and_still_reads_what_it_wrote(small_dataset, tmp_path,
                                                                                       monkeypatch):
    """The spill leaves its drive's last bytes free (`DALI_STREAM_SPILL_KEEP_FREE_BYTES`, else 5 % of the drive):
    past that floor (here set above the drive's free space) nothing more is written, one warning says so, and the
    frames written before are still read."""
    want = list(StreamLoader(str(small_dataset), **ARGS))
    args = dict(ARGS, frame_cache_bytes=1, frame_cache_dir=str(tmp_path / "frames"))
    first = StreamLoader(str(small_dataset), **args)
    it = iter(first)
    for _ in range(2):
        next(it)
    it.close()
    assert first.stats()["frames"]["spilled"] > 0
    first.close()
    monkeypatch.setenv("DALI_STREAM_SPILL_KEEP_FREE_BYTES", str(shutil.disk_usage(tmp_path).total + 1))
    with pytest.warns(UserWarning, match="frame_cache_dir: its drive has .* GiB free, and the cache leaves .* "
                                         "GiB free \\(DALI_STREAM_SPILL_KEEP_FREE_BYTES=") as caught:
        later = StreamLoader(str(small_dataset), **args)
        got = list(later)
    assert_same(got, want)
    stats = later.stats()["frames"]
    assert stats["spilled"] == 0 and not stats["spilling"] and stats["disk_hits"] > 0 and stats["misses"] > 0
    assert sum("frame_cache_dir" in str(w.message) for w in caught) == 1
    later.close()


def test_the_spill_floor_is_a_share_of_the_drive_unless_set_and_a_malformed_one_is_said_at_construction(
        small_dataset, tmp_path, monkeypatch):
    """Unset, the floor is 5 % of the drive and at least 1 GiB; `DALI_STREAM_SPILL_KEEP_FREE_BYTES` replaces it
    (0 on a drive kept for the cache); a value that is not a byte count is refused by the constructor, named."""
    from dali_stream.source.local_disk import spill_floor

    monkeypatch.delenv("DALI_STREAM_SPILL_KEEP_FREE_BYTES")
    assert spill_floor(100 << 30)[0] == 5 << 30 and spill_floor(4 << 30)[0] == 1 << 30
    assert "DALI_STREAM_SPILL_KEEP_FREE_BYTES sets it" in spill_floor(100 << 30)[1]
    monkeypatch.setenv("DALI_STREAM_SPILL_KEEP_FREE_BYTES", "0")
    assert spill_floor(100 << 30)[0] == 0
    for bad in ("2G", "-1"):
        monkeypatch.setenv("DALI_STREAM_SPILL_KEEP_FREE_BYTES", bad)
        with pytest.raises(ConfigError, match=f"DALI_STREAM_SPILL_KEEP_FREE_BYTES='{bad}' is not a number of bytes"):
            StreamLoader(str(small_dataset), **ARGS, frame_cache_dir=str(tmp_path / "frames"))


def test_resume_with_the_cache_on_gives_the_uninterrupted_batches(small_dataset):
    """The cache is a speed-up, not state: a loader resumed mid-epoch 2, its cache cold, gives what the warm one
    gave."""
    args = dict(ARGS, frame_cache_bytes=1 << 28)
    warm = StreamLoader(str(small_dataset), **args)
    list(warm)
    it = iter(warm)
    for _ in range(2):
        next(it)
    state = warm.state_dict()
    want = [dict(b) for b in it]
    cold = StreamLoader(str(small_dataset), **args)
    cold.load_state_dict(state)
    assert_same([dict(b) for b in cold], want)
    warm.close()
    cold.close()


@pytest.mark.parametrize("value", [-1, 1.5, "1G"])
def test_the_bound_is_a_byte_count(small_dataset, value):
    with pytest.raises(ConfigError, match=r"`frame_cache_bytes` must be an integer >= 0"):
        StreamLoader(str(small_dataset), frame_cache_bytes=value)


def test_a_bound_the_nodes_memory_cannot_hold_is_said_at_construction(small_dataset, monkeypatch):
    """The bound times the node's ranks against the memory available: where the decoded frames would not fit, the
    loader says so before the cache fills (here 10^6 ranks of a node); where they fit, nothing is said."""
    import warnings

    from dali_stream.decode.frame_cache import room_warning
    from dali_stream.loader.memory import available_bytes

    free = available_bytes()
    assert free is not None and 0 < free
    assert room_warning(1 << 40, 10 << 20, 8, 1 << 30) is None  # the dataset's 10 MiB is what a rank keeps
    assert room_warning(1 << 40, 10 << 20, 8, None) is None  # memory not known: nothing to say
    why = room_warning(4 << 30, 64 << 30, 8, 16 << 30)
    assert why is not None and "x 8 rank(s) on this node = 32.00 GiB" in why and "at most 1717986918 " in why
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        StreamLoader(str(small_dataset), **ARGS, frame_cache_bytes=1 << 40).close()
    assert not [w for w in caught if "frame_cache_bytes=" in str(w.message)]
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1000000")
    with pytest.warns(UserWarning, match=r"frame_cache_bytes=1099511627776: this rank may keep .* GiB of decoded "
                                         r"frames .* x 1000000 rank\(s\) on this node .* available now"):
        StreamLoader(str(small_dataset), **ARGS, frame_cache_bytes=1 << 40).close()


@pytest.mark.parametrize("value", ["s3://bucket/frames", "hf://datasets/x/frames", "", 3])
def test_the_spill_folder_is_a_local_path(small_dataset, value):
    """A URL would be written as a local folder named after its scheme: refused, with what to give instead."""
    with pytest.raises(ConfigError, match=r"`frame_cache_dir` must be a local folder's path.*Found: .*local drive"):
        StreamLoader(str(small_dataset), frame_cache_dir=value)


def test_dali_cpu_cameras_decode_in_the_graph_without_the_cache(small_dataset):
    """small_dataset's VP9 camera goes through DALI's CPU decoder under decode='dali-cpu': in the graph without the
    cache (decoded per sample), on the workers with it (kept, no warning)."""
    import warnings

    plain = StreamLoader(str(small_dataset), batch_size=4, device="cpu", episode_frames_bytes=0, decode="dali-cpu")
    assert plain.routes["observation.images.top"] == "dali-cpu" and plain.resolved.dali_on_workers == ()
    assert list(plain.stats()["build"]["dali"]) == ["observation.images.top"]
    plain.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cached = StreamLoader(str(small_dataset), batch_size=4, device="cpu", frame_cache_bytes=1 << 20,
                              episode_frames_bytes=0, decode="dali-cpu")
    assert cached.resolved.dali_on_workers == ("observation.images.top",) and cached.stats()["build"]["dali"] == {}
    assert "observation.images.top" in cached.stats()["frames"]["cameras"]
    cached.close()


def test_two_ranks_fill_one_folder_at_once_and_a_later_run_reads_it(small_dataset, tmp_path):
    """Ranks of a node share `frame_cache_dir`: two rank processes writing into it at the same time leave only
    whole frames (each written to a temporary file, then renamed), and a later single-rank run reads the epoch
    from it: its batches are the uncached ones, (almost) nothing decoded."""
    import json
    import subprocess
    import sys

    folder = tmp_path / "frames"
    code = ("import sys; from dali_stream import StreamLoader; "
            "l = StreamLoader(sys.argv[1], batch_size=4, device='cpu', decode='cpu', image_dtype='uint8', seed=11, "
            "frame_cache_bytes=1, frame_cache_dir=sys.argv[2], rank=int(sys.argv[3]), world_size=2); "
            "n = sum(1 for _ in l); print(l.stats()['frames']['spilled'])")
    ranks = [subprocess.Popen([sys.executable, "-c", code, str(small_dataset), str(folder), str(r)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    outs = [p.communicate(timeout=300) for p in ranks]
    assert all(p.returncode == 0 for p in ranks), [err[-2000:] for _, err in outs]
    assert all(int(out.split()[-1]) > 0 for out, _ in outs)
    assert not list(folder.rglob("*.tmp")), "a temporary file left behind"
    want = epochs(StreamLoader(str(small_dataset), **ARGS), 1)[0][0]
    later = StreamLoader(str(small_dataset), **ARGS, frame_cache_bytes=1, frame_cache_dir=str(folder))
    (got, decoded), = epochs(later, 1)
    assert_same(got, want)
    stats = later.stats()["frames"]
    assert stats["disk_hits"] > 0 and decoded <= 0.2 * (stats["disk_hits"] + decoded), json.dumps(stats)
    later.close()


@pytest.mark.parametrize("setup", [
    dict(),  # pool 16, episodes fetched whole
    dict(episode_pool_size="all", segment_bytes=1),  # a global shuffle of long episodes' pieces, cut ahead
    dict(decode="cpu-open"),  # the open engine's FFmpeg decoders
    dict(decode="dali-cpu"),  # VP9 through DALI's CPU decoder on the workers
], ids=["whole", "global-pieces", "cpu-open", "dali-cpu"])
def test_an_epoch_whose_frames_are_all_held_fetches_and_decodes_nothing(four_codec_dataset, tmp_path, setup):
    """Frames are named by the file times samples ask for, known from the plan and the table rows: a sample whose
    frames are all held needs no segment, and the store fetches no camera of an episode whose frames are all held.
    A later run on a warm folder reads the tables and nothing of the videos: no segment, no piece, no decode, and
    the batches of a loader without the cache."""
    args = dict(ARGS, **setup, drop_last=False)  # every frame drawn in epoch 1
    want = epochs(StreamLoader(str(four_codec_dataset), **args), 1)[0][0]
    cached = dict(args, frame_cache_bytes=1, frame_cache_dir=str(tmp_path / "frames"))
    first = StreamLoader(str(four_codec_dataset), **cached)
    epochs(first, 1)
    video = ("segments_cut", "segment_bytes", "pieces_cut", "piece_bytes")
    assert sum(first.stats()["fetch"][k] for k in video) > 0
    first.close()
    later = StreamLoader(str(four_codec_dataset), **cached)
    (got, decoded), = epochs(later, 1)
    assert_same(got, want)
    fetched = later.stats()["fetch"]
    assert decoded == 0 and {k: fetched[k] for k in video} == dict.fromkeys(video, 0), fetched
    assert fetched["table_reads"] > 0
    later.close()


@pytest.mark.parametrize("decode,resize", [("cpu", None), ("cpu", (40, 48)), ("cpu-open", (40, 48))])
def test_a_mixture_with_the_cache_gives_the_uncached_batches(embodiments, decode, resize):
    """A mixture whose members differ in cameras (arm7 lacks the wrist camera: zeros there) and in fps: two epochs
    with the cache equal two without, the second decoding nothing, on torchcodec and the open engine, and with
    frames resized by the workers before they are kept (with a third member whose front camera is larger: resized,
    the members' frames are one size)."""
    from dali_stream import Member, Mixture

    front, top = "observation.images.front", "observation.images.top"
    larger = (Member(str(embodiments["big"]), name="big"),) if resize else ()
    mixture = Mixture((Member(str(embodiments["arm6"]), name="arm6"),
                       Member(str(embodiments["arm7"]), name="arm7", keys={top: front}), *larger))
    args = dict(ARGS, decode=decode, episode_pool_size=3, drop_last=False, resize=resize,
                delta_timestamps={front: [-0.1, 0.0]})
    want = epochs(StreamLoader(mixture, **args))
    cached = StreamLoader(mixture, **args, frame_cache_bytes=1 << 30)
    got = epochs(cached)
    for (g, _), (w, _) in zip(got, want):
        assert_same(g, w)
    assert got[0][1] > 0 and got[1][1] == 0, [n for _, n in got]
    cached.close()


def test_a_spilled_frame_is_read_into_memory_of_its_own_and_a_torn_one_is_none(tmp_path):
    """Frames read back from the folder are arrays of their own, not mappings whose pages would count in the
    process's RSS while they lived; a file shorter than its header says (a torn write) is no frame."""
    from dali_stream.decode.frame_cache import read_frame

    frame = np.arange(6 * 8 * 3, dtype=np.uint8).reshape(6, 8, 3)
    np.save(tmp_path / "f.npy", frame)
    got = read_frame(str(tmp_path / "f.npy"))
    assert type(got) is np.ndarray and got.base is None and np.array_equal(got, frame)
    data = (tmp_path / "f.npy").read_bytes()
    (tmp_path / "torn.npy").write_bytes(data[:-5])
    assert read_frame(str(tmp_path / "torn.npy")) is None and read_frame(str(tmp_path / "absent.npy")) is None


def test_frames_are_kept_in_the_batchs_order_and_each_order_has_its_own_names(small_dataset, tmp_path):
    """A host camera laid out channels-first is kept (3, H, W), the batch's own order (a later epoch copies instead
    of transposing); with `memory_format="channels_last"` it is kept (H, W, 3) as decoded. The order is part of a
    frame's name: a folder one layout filled is no hit for the other, which decodes and gives its own batches."""
    folder = str(tmp_path / "frames")
    for memory_format, order in (("channels_last", "hwc"), ("contiguous", "chw")):
        args = dict(ARGS, memory_format=memory_format)
        want = epochs(StreamLoader(str(small_dataset), **args), 1)[0][0]
        with built(FrameCache) as caches:  # the loader's decoded-frame cache, as the loader builds it
            loader = StreamLoader(str(small_dataset), **args, frame_cache_bytes=1 << 30)
        (got, _), = epochs(loader, 1)
        assert_same(got, want)
        (cache,) = caches
        kept = list(cache._frames.values())
        assert all(f.flags.c_contiguous for f in kept)  # a later epoch's copy of each is a plain one
        shapes = {f.shape for f in kept}
        h, w = next(iter(got[0][k] for k in got[0] if k.startswith("observation.images."))).shape[-2:]
        assert shapes == {(3, h, w) if order == "chw" else (h, w, 3)}, shapes
        assert loader.resolved.host_cameras and loader.resolved.kept_chw == (
            () if order == "hwc" else loader.resolved.host_cameras)
        loader.close()
        spill = StreamLoader(str(small_dataset), **args, frame_cache_bytes=1, frame_cache_dir=folder)
        (got, decoded), = epochs(spill, 1)
        assert_same(got, want)
        assert decoded > 0 and spill.stats()["frames"]["disk_hits"] == 0  # the other order's files are not read
        spill.close()
