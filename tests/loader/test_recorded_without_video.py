"""lerobot's datasets recorded without videos (`use_videos=False`): their cameras are PNG images inside the frame
tables (dtype "image", a struct<bytes, path> column before `index`) and info.json's `video_path` is null. Such a
camera takes the route `table-images`: each row's image decoded on the workers and laid out as lerobot's dataset
gives it ((..., 3, H, W) float32 in [0, 1], or as the loader's image settings say), windows and padding included."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dali_stream import ConfigError, DatasetError, DeviceError, Member, Mixture, StreamLoader
from dali_stream.pairing import dali_present
from dali_stream.tools.sample_data import SampleSpec, parse_cameras, state_row, write_sample
from tests.support.columns import add_columns
from tests.support.parts import store_of
from tests.support.take import epochs, same_batches

KEY = "observation.image"


def _png(value: int) -> bytes:
    import av

    frame = av.VideoFrame.from_ndarray(np.full((8, 8, 3), value, np.uint8), format="rgb24")
    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = 8, 8, "rgb24"
    return b"".join(bytes(p) for p in codec.encode(frame))


def _without_video(folder, size: int, png, episodes: int = 4, episodes_per_file: int = 2, **where):
    """A sample turned into what lerobot writes without videos: the camera's feature becomes dtype "image" (`size`
    square), its PNGs (`png(index)` for the row whose `index` is that) a column of the frame tables (one row group
    per episode, as written; `where`: `add_columns`' `first` or `after`), no videos/, video_path null."""
    spec = SampleSpec(episodes=episodes, min_length=6, max_length=9, gop=4, episodes_per_file=episodes_per_file,
                      cameras=parse_cameras("front:h264"), seed=5)
    root = write_sample(folder, spec)
    shutil.rmtree(root / "videos")
    info = json.loads((root / "meta/info.json").read_text())
    del info["features"]["observation.images.front"]
    info["video_path"] = None
    (root / "meta/info.json").write_text(json.dumps(info))
    image = {"dtype": "image", "shape": [size, size, 3], "names": ["height", "width", "channels"]}
    add_columns(root, {KEY: image}, lambda rows: {KEY: pa.array(
        [{"bytes": png(int(i)), "path": f"frame_{int(i):06d}.png"} for i in rows.column("index").to_pylist()],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]))}, **where)
    return root


@pytest.fixture(scope="module")
def image_dataset(tmp_path_factory):
    """8 x 8 grey images, their column first (as lerobot's v2.1 converter and LIBERO's pi0 layout have it)."""
    return _without_video(tmp_path_factory.mktemp("ds") / "images", 8, lambda index: _png(index % 255), first=True)


def value(index: int) -> int:
    """The grey level of the image on the row whose `index` is `index`."""
    return index % 255


STEPS = (-2, 0, 1)  # frames, at the sample's 30 fps


@pytest.mark.parametrize("settings", [{}, {"image_dtype": "uint8", "memory_format": "channels_last"},
                                      {"episode_pool_size": "all", "num_workers": 0}, {"mean": 0.5, "std": 0.25}])
def test_each_sample_shows_its_rows_images(image_dataset, settings):
    """And the frame tables' row groups are found by their `index` column's statistics: the struct column before it
    puts its leaf column at another position than its field (read by field position, every episode's rows came from
    the first row group of its file: 'holds 0 rows with index in [...]')."""
    with StreamLoader(str(image_dataset), batch_size=4, device="cpu", drop_last=False,
                      delta_timestamps={KEY: [k / 30 for k in STEPS]}, **settings) as loader:
        assert loader.routes == {KEY: "table-images"} and loader.meta.camera_keys == [KEY]
        seen = []
        for batch in loader:
            images, pads = batch[KEY].numpy(), batch[f"{KEY}_is_pad"].numpy()
            assert images.shape[1:] == (3, 3, 8, 8)
            for j, (episode, frame) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
                task = int(batch["task_index"][j])
                np.testing.assert_array_equal(batch["observation.state"][j].numpy(), state_row(episode, frame, task))
                index = int(batch["index"][j])
                for t, step in enumerate(STEPS):
                    shown = index + step if not pads[j, t] else index - frame if step < 0 else None
                    if shown is None:  # past the episode's end: its last frame, whatever that is
                        continue
                    want = np.full((3, 8, 8), value(shown), np.float32)
                    if settings.get("image_dtype") == "uint8":
                        np.testing.assert_array_equal(images[j, t], want.astype(np.uint8))
                    elif "mean" in settings:
                        np.testing.assert_allclose(images[j, t], (want / 255 - 0.5) / 0.25, rtol=0, atol=2e-6)
                    else:  # lerobot's dataset[i]: the PNG's pixels as float32, divided by 255
                        np.testing.assert_array_equal(images[j, t], want / np.float32(255))
            seen += batch["index"].tolist()
    assert sorted(seen) == list(range(loader.meta.total_frames))
    sample = loader.dataset[3]
    assert sample[KEY].shape == (3, 3, 8, 8)


@pytest.mark.skipif(not dali_present(), reason="resize= needs NVIDIA DALI's operators")
def test_resize_brings_them_to_the_batchs_size(image_dataset):
    with StreamLoader(str(image_dataset), batch_size=4, device="cpu", resize=(4, 6), image_dtype="uint8") as loader:
        batch = next(iter(loader))
        assert batch[KEY].shape == (4, 3, 4, 6)
        for j, index in enumerate(batch["index"].tolist()):  # a flat image stays flat
            assert (batch[KEY][j] == value(index)).all()
        assert loader.meta.features[KEY]["shape"] == [8, 8, 3]


def test_what_they_cannot_do_is_said(image_dataset, small_dataset, tmp_path):
    with pytest.raises(DeviceError, match=r"stores as images \(PNG\) in its frame tables"):
        StreamLoader(str(image_dataset), device="cpu", decode={KEY: "gpu"})
    if dali_present():
        with pytest.raises(ConfigError, match=r"augment= runs in the DALI graph"):
            StreamLoader(str(image_dataset), device="cpu", augment=lambda video, key, rand: video)
    with pytest.raises(ConfigError, match=r"is image and video in different members|is video and image"):
        StreamLoader(Mixture([Member(str(image_dataset), name="images"),
                              Member(str(small_dataset), name="video", keys={"observation.images.front": KEY})]),
                     device="cpu")
    depth = tmp_path / "depth"
    shutil.copytree(image_dataset, depth)
    info = json.loads((depth / "meta/info.json").read_text())
    info["features"][KEY]["info"] = {"is_depth_map": True}
    (depth / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError) as err:
        StreamLoader(str(depth), device="cpu")
    said = str(err.value)
    assert "stores the depth maps ['observation.image'] as images" in said
    assert f"--root {depth}" in said and "--operation.type convert_image_to_video" in said


def test_a_member_without_the_camera_gives_zeros(image_dataset, tmp_path):
    plain = tmp_path / "plain"
    shutil.copytree(image_dataset, plain)
    info = json.loads((plain / "meta/info.json").read_text())
    del info["features"][KEY]
    (plain / "meta/info.json").write_text(json.dumps(info))
    mix = Mixture([Member(str(image_dataset), name="images"), Member(str(plain), name="plain")])
    with StreamLoader(mix, batch_size=6, device="cpu", drop_last=False, mean=0.5, std=0.25) as loader:
        for batch in loader:
            missing = batch[f"{KEY}_is_missing"]
            assert not batch[KEY][missing].any()
            for j in (~missing).nonzero().flatten().tolist():
                want = (value(int(batch["index"][j])) / 255 - 0.5) / 0.25
                np.testing.assert_allclose(batch[KEY][j].numpy(), want, rtol=0, atol=2e-6)


def test_over_http_the_images_come_with_the_rows_range_reads(image_dataset):
    """A remote dataset reads an episode's row groups by byte ranges of the columns asked: the image column's leaves
    (`<key>.bytes`, `<key>.path`) are among them."""
    from tests.support.httpserver import Server

    with Server(image_dataset.parent) as base:
        with StreamLoader(f"{base}/{image_dataset.name}", batch_size=4, device="cpu", image_dtype="uint8",
                          drop_last=False) as loader:
            seen = 0
            for batch in loader:
                for j, index in enumerate(batch["index"].tolist()):
                    assert (batch[KEY][j] == value(index)).all()
                seen += len(batch["index"])
    assert seen == loader.meta.total_frames


def test_sizes_are_checked_and_the_buffers_counted_as_a_video_cameras_are(image_dataset, tmp_path):
    """Members whose stored images differ in size need resize= (a batch is dense), a crop must fit them, and
    memory_budget() counts the buffers they are laid out in."""
    small = tmp_path / "small"
    shutil.copytree(image_dataset, small)
    info = json.loads((small / "meta/info.json").read_text())
    info["features"][KEY]["shape"] = [4, 4, 3]
    (small / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(ConfigError, match=r"camera 'observation.image' has different sizes in the mixture's members"):
        StreamLoader(Mixture([Member(str(image_dataset), name="a"), Member(str(small), name="b")]), device="cpu")
    if dali_present():
        with pytest.raises(ConfigError, match=r"crop"):
            StreamLoader(str(image_dataset), device="cpu", crop=(16, 16))
    with StreamLoader(str(image_dataset), batch_size=4, device="cpu") as loader:
        next(iter(loader))
        assert loader.memory_budget()["host_buffers_peak"] >= 4 * 3 * 8 * 8 * 4


def test_a_rows_image_decodes_from_png_or_jpeg_and_anything_else_is_named():
    import av

    from dali_stream import DecodeError
    from dali_stream.decode.images import decode_image

    np.testing.assert_array_equal(decode_image(_png(77), "here"), np.full((8, 8, 3), 77, np.uint8))
    codec = av.CodecContext.create("mjpeg", "w")
    codec.width, codec.height, codec.pix_fmt = 16, 16, "yuvj444p"
    frame = av.VideoFrame.from_ndarray(np.full((16, 16, 3), 120, np.uint8), format="rgb24").reformat(format="yuvj444p")
    jpeg = b"".join(bytes(p) for p in codec.encode(frame))
    assert np.abs(decode_image(jpeg, "here").astype(int) - 120).max() <= 2
    with pytest.raises(DecodeError, match=r"camera 'x', episode 3, frame 4: the row's image is neither PNG nor JPEG"):
        decode_image(b"GIF89a....", "camera 'x', episode 3, frame 4")
    with pytest.raises(DecodeError, match=r"here: its png image does not decode"):
        decode_image(_png(1)[:30], "here")


CACHE_SETUPS = [{}, {"memory_format": "channels_last", "image_dtype": "uint8"}, {"mean": 0.5, "std": 0.25}]
if dali_present():
    CACHE_SETUPS.append({"resize": (4, 6), "image_dtype": "uint8"})


@pytest.mark.parametrize("settings", CACHE_SETUPS, ids=["chw", "channels-last", "mean-std", "resize"][:len(CACHE_SETUPS)])
def test_the_decoded_frame_cache_keeps_them_and_later_epochs_decode_none(image_dataset, settings):
    """Two epochs with the cache equal two without, every key and pixel (windows, padding); the second decodes no
    image (the first fewer: windows overlap): the cache holds each once, as the batch takes it (resized, in the
    batch's channels-first order where small)."""
    args = dict(batch_size=4, device="cpu", drop_last=False, seed=2, delta_timestamps={KEY: [k / 30 for k in STEPS]},
                **settings)
    with StreamLoader(str(image_dataset), **args) as plain:
        want = epochs(plain)
    with StreamLoader(str(image_dataset), frame_cache_bytes=1 << 30, **args) as cached:
        got = epochs(cached)
        stats = cached.stats()["frames"]
        kept_chw = cached.resolved.kept_chw
        shaped = cached.resolved.shaped_on_workers
    for (g, _), (w, _) in zip(got, want):
        same_batches(g, w)
    (_, first), (_, second) = got
    assert 0 < first <= want[0][1] and second == 0 and stats["hits"] > 0, (first, second, stats)
    assert kept_chw == ((KEY,) if settings.get("memory_format") != "channels_last" else ())
    h, w = settings.get("resize", (8, 8))
    assert stats["held"] == stats["frames"] * h * w * 3 and stats["frames"] == loader_frames(image_dataset)
    assert shaped == ((KEY,) if "resize" in settings else ())


def loader_frames(root) -> int:
    return json.loads((root / "meta/info.json").read_text())["total_frames"]


def test_kept_images_spill_to_the_folder_a_later_run_reads_and_a_rewritten_data_file_is_decoded_again(
        image_dataset, tmp_path):
    """Past the bound the images go to `frame_cache_dir`, named by their data file's identity: a later run reads
    them (nothing decoded); after the data file is rewritten with other images, it decodes the new ones."""
    root = tmp_path / "ds"
    shutil.copytree(image_dataset, root)
    args = dict(batch_size=4, device="cpu", drop_last=False, shuffle=False, image_dtype="uint8",
                frame_cache_bytes=1, frame_cache_dir=str(tmp_path / "frames"))

    def shown(loader) -> tuple[list, int]:
        before = loader.stats()["build"]["decoded_frames"]
        out = [(int(b["index"][j]), int(b[KEY][j].max())) for b in loader for j in range(len(b["index"]))]
        return out, loader.stats()["build"]["decoded_frames"] - before

    with StreamLoader(str(root), **args) as first:
        want, decoded = shown(first)
        assert decoded > 0 and first.stats()["frames"]["spilled"] == decoded
    assert all(grey == value(index) for index, grey in want)
    with StreamLoader(str(root), **args) as later:
        again, decoded = shown(later)
        assert again == want and decoded == 0 and later.stats()["frames"]["disk_hits"] == decoded + len(want)
    data = _images_rewritten(root, lambda n, index, image: _png((value(index) + 100) % 255), row_group_size=10_000)
    with StreamLoader(str(root), **args) as changed:
        got, decoded = shown(changed)
    rewritten = set(pq.read_table(data, columns=["index"]).column("index").to_pylist())
    assert decoded == len(rewritten) and rewritten
    assert all(grey == ((value(i) + 100) % 255 if i in rewritten else value(i)) for i, grey in got)


def test_inspect_lists_them_and_counts_them_in_what_the_cache_would_hold(image_dataset):
    from tests.support.console import dali_stream

    proc = dali_stream("inspect", image_dataset, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["decoded_bytes"] == 8 * 8 * 3 * loader_frames(image_dataset) > 0
    camera = report["cameras"][KEY]
    assert (camera["codec"], camera["height"], camera["width"], camera["route_auto"]) == ("image", 8, 8, "table-images")
    assert "use_videos=False" in camera["reason"]
    human = dali_stream("inspect", image_dataset)
    assert KEY in human.stdout and "table-images" in human.stdout and "every frame of every camera takes" in human.stdout


def _images_rewritten(root, image, row_group_size: int):
    """`root`'s first data file written again (`row_group_size` rows a group), each row's image replaced by
    `image(n, index, its bytes)` (`n`: the row's place in the file); its path."""
    path = sorted(root.glob("data/*/*.parquet"))[0]
    table = pq.read_table(path)
    column = table.column(KEY).combine_chunks()
    rows = [{**row, "bytes": image(n, index, row["bytes"])}
            for n, (index, row) in enumerate(zip(table.column("index").to_pylist(), column.to_pylist()))]
    pq.write_table(table.set_column(table.schema.get_field_index(KEY), KEY, pa.array(rows, column.type)), path,
                   row_group_size=row_group_size)
    return path


def _first_image_replaced(root, data: bytes) -> None:
    """The first row's image of the first data file (the first episode's first frame) replaced by `data`."""
    _images_rewritten(root, lambda n, index, image: data if n == 0 else image, row_group_size=9)


def test_diagnose_decodes_their_first_image_and_names_what_is_wrong(image_dataset, tmp_path):
    """`dali-stream diagnose` lists a camera stored in the tables with its route, decodes the first episode's first
    image (timed with --decode-test), and names a damaged image, an image of another size than info.json's and depth
    maps stored as images (exit 1; on an untested set of versions, the floors', the install's exit 3 comes first)."""
    from tests.support.console import dali_stream

    def diagnose(root, *more) -> tuple[dict, dict]:
        proc = dali_stream("diagnose", root, "--json", *more)
        report = json.loads(proc.stdout)
        untested = bool(report["install"]["untested"])
        ok = all(c["decodable"] for c in report["dataset"]["cameras"].values())
        assert proc.returncode == (3 if untested else 0 if ok else 1), report["verdict"]
        assert untested or ok or KEY in report["verdict"]
        return report, report["dataset"]["cameras"][KEY]

    report, camera = diagnose(image_dataset, "--decode-test")
    assert (camera["codec"], camera["width"], camera["height"], camera["route"]) == ("png", 8, 8, "table-images")
    assert camera["decodable"] and camera["decode_test"]["table-images"]["shape"] == [8, 8, 3]
    assert report["install"]["untested"] or "image: table-images" in report["verdict"]
    damaged = tmp_path / "damaged"
    shutil.copytree(image_dataset, damaged)
    _first_image_replaced(damaged, _png(3)[:30])
    _, camera = diagnose(damaged)
    assert camera["layer"] == "bitstream" and "png image does not decode" in camera["error"]
    assert "episode 0, frame 0" in camera["error"] and "re-download" in camera["fix"]
    larger = tmp_path / "larger"
    shutil.copytree(image_dataset, larger)
    info = json.loads((larger / "meta/info.json").read_text())
    info["features"][KEY]["shape"] = [16, 16, 3]
    (larger / "meta/info.json").write_text(json.dumps(info))
    _, camera = diagnose(larger)
    assert camera["layer"] == "size" and "the image is 8x8, meta/info.json declares 16x16" in camera["error"]
    info["features"][KEY] = {**info["features"][KEY], "shape": [8, 8, 3], "info": {"is_depth_map": True}}
    (larger / "meta/info.json").write_text(json.dumps(info))
    _, camera = diagnose(larger)
    assert camera["layer"] == "depth-images" and "convert_image_to_video" in camera["fix"]


def _image_chunks(root) -> dict[str, list[tuple[int, int]]]:
    """Per data file (its name under `root`), the byte ranges of the image column's chunks."""
    out: dict[str, list[tuple[int, int]]] = {}
    for path in root.glob("data/*/*.parquet"):
        md = pq.ParquetFile(path).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            for c in range(rg.num_columns):
                col = rg.column(c)
                if col.path_in_schema.startswith(KEY + "."):
                    first = col.dictionary_page_offset if col.has_dictionary_page else col.data_page_offset
                    out.setdefault(path.relative_to(root).as_posix(), []).append(
                        (first, first + col.total_compressed_size))
    return out


def test_rows_are_read_without_the_images_the_cache_holds_and_one_it_lost_is_read_again(image_dataset, tmp_path):
    """Where the decoded-frame cache holds every image of an episode, its rows are read without the image column (none
    of its bytes read: exactly the column's chunks fewer); where the cache loses them after that (its folder deleted
    mid-epoch), the column is read alone and the images decoded again: the same batches every time."""
    args = dict(batch_size=4, device="cpu", drop_last=False, shuffle=False, image_dtype="uint8", num_workers=0,
                fetch_workers=0, frame_cache_bytes=1, frame_cache_dir=str(tmp_path / "frames"))

    def shown(batch) -> list:
        return [(int(batch["index"][j]), int(batch[KEY][j].min()), int(batch[KEY][j].max()))
                for j in range(len(batch["index"]))]

    with StreamLoader(str(image_dataset), **args) as first:
        want = [s for b in first for s in shown(b)]
        cold = first.stats()["fetch"]
    assert len(want) == loader_frames(image_dataset) and all(lo == hi == value(i) for i, lo, hi in want)
    assert cold["columns_left_out"] == 0
    with StreamLoader(str(image_dataset), **args) as warm:
        assert [s for b in warm for s in shown(b)] == want and warm.stats()["build"]["decoded_frames"] == 0
        read = warm.stats()["fetch"]
    assert read["columns_left_out"] == read["episodes"] == 4 and read["columns_read_again"] == 0
    images = sum(end - start for ranges in _image_chunks(image_dataset).values() for start, end in ranges)
    assert cold["table_bytes_read"] - read["table_bytes_read"] == images > 0
    with StreamLoader(str(image_dataset), **args) as lost:
        batches = iter(lost)
        got = shown(next(batches))  # episode 0's rows read without the images, some of them shown
        shutil.rmtree(tmp_path / "frames")
        got += [s for b in batches for s in shown(b)]
        again = lost.stats()["fetch"]
        decoded = lost.stats()["build"]["decoded_frames"]
    assert got == want
    assert again["columns_left_out"] >= 1 and again["columns_read_again"] == again["columns_left_out"]
    assert decoded == len(want) - 4


def _noise(index: int) -> bytes:
    """A 64 x 64 PNG of noise seeded by `index` (~12 KB)."""
    import av

    codec = av.CodecContext.create("png", "w")
    codec.width, codec.height, codec.pix_fmt = 64, 64, "rgb24"
    rgb = np.random.default_rng(index).integers(0, 256, (64, 64, 3), np.uint8)
    return b"".join(bytes(p) for p in codec.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))


@pytest.fixture(scope="module")
def noisy_dataset(tmp_path_factory):
    """64 x 64 noise for images (~12 KB a PNG: more than a row's other columns, ~100 bytes, and a row group's image
    column past `fetch.tables.RANGE_GAP`), its column where lerobot's recorder writes a camera's: after the robot's
    action and state, before `timestamp`."""
    return _without_video(tmp_path_factory.mktemp("ds") / "noisy", 64, _noise, after="action")


def test_the_fetched_rows_count_their_images_bytes_against_cache_bytes(noisy_dataset):
    """An episode's rows hold its encoded images: the fetched episodes' bytes (`cache_bytes`' count) include them."""
    images = sum(len(b) for path in noisy_dataset.glob("data/*/*.parquet")
                 for b in pq.read_table(path, columns=[KEY]).column(KEY).combine_chunks().field("bytes").to_pylist())
    with StreamLoader(str(noisy_dataset), batch_size=4, device="cpu", drop_last=False,
                      episode_pool_size="all") as loader:
        for _ in loader:
            pass
        held = loader.stats()["bounded"]["fetched_episodes"]["held"]
    assert images <= held < images + 200 * loader_frames(noisy_dataset), (held, images)


def test_over_http_a_warm_cache_fetches_none_of_the_images(noisy_dataset, tmp_path):
    """Over HTTP, every image held (a first run spilled them to the folder): an episode's rows come in requests that
    leave the image column's bytes out (between the robot's columns and `timestamp`: two stretches a row group), and
    the batches are the first run's."""
    from tests.support.httpserver import Server

    args = dict(batch_size=4, device="cpu", drop_last=False, shuffle=False, image_dtype="uint8",
                frame_cache_bytes=1, frame_cache_dir=str(tmp_path / "frames"))
    chunks = _image_chunks(noisy_dataset)
    sizes = {name: (noisy_dataset / name).stat().st_size for name in chunks}
    server = Server(noisy_dataset.parent)
    with server as base:
        url = f"{base}/{noisy_dataset.name}"
        with StreamLoader(url, **args) as first:
            want = [b[KEY].sum(dim=(1, 2, 3)).tolist() for b in first]
        cold = len(server.counts["ranges"])
        with StreamLoader(url, **args) as warm:
            got = [b[KEY].sum(dim=(1, 2, 3)).tolist() for b in warm]
            fetch = warm.stats()["fetch"]
        ranges = server.counts["ranges"][cold:]
    assert got == want and fetch["columns_left_out"] == fetch["episodes"] == 4
    data = [(path.split(f"/{noisy_dataset.name}/", 1)[1], start, end) for path, start, end in ranges
            if "/data/" in path]
    rows = [(name, start, end) for name, start, end in data if end < sizes[name]]  # the footers' reads end the file
    assert rows, data
    assert not [(name, start, end) for name, start, end in rows
                if any(start < e and s < end for s, e in chunks[name])], (rows, chunks)


def test_verify_decodes_every_image_in_the_tables(image_dataset, tmp_path):
    """`dali-stream verify --decode` decodes each row's image: a damaged one is named with its data file, camera,
    episode and frame."""
    from tests.support.console import dali_stream

    clean = dali_stream("verify", image_dataset, "--decode", "--json")
    assert clean.returncode == 0 and json.loads(clean.stdout)["damaged"] == [], clean.stdout
    damaged = tmp_path / "damaged"
    shutil.copytree(image_dataset, damaged)
    _first_image_replaced(damaged, _png(3)[:30])
    proc = dali_stream("verify", damaged, "--decode", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and [f["file"] for f in report["damaged"]] == ["data/chunk-000/file-000.parquet"]
    rows = pq.ParquetFile(damaged / "data/chunk-000/file-000.parquet").metadata.num_rows
    assert f"decode: 1 of {rows} images of {KEY} do not decode at 8x8 (first: episode 0, frame 0)" in \
        report["damaged"][0]["problems"], report
    assert 0 in report["damaged"][0]["episodes"]


def _data_bytes(root) -> int:
    """The bytes of `root`'s data files (its images nearly all of them)."""
    return sum(f.stat().st_size for f in root.glob("data/*/*.parquet"))


def test_a_global_shuffle_past_cache_bytes_says_the_images_are_what_it_holds(noisy_dataset):
    """A global shuffle holds each episode it has begun until its last frame is drawn: over an image dataset, the
    rank's share of its encoded images. Past cache_bytes the warning says so, how much, and the three ways out."""
    images = _data_bytes(noisy_dataset)
    with pytest.warns(UserWarning, match=r"pinned episodes") as said:
        with StreamLoader(str(noisy_dataset), batch_size=4, device="cpu", episode_pool_size="all",
                          cache_bytes=images // 4, table_cache_dir="off") as loader:
            for _ in loader:
                pass
    text = next(str(w.message) for w in said if "pinned episodes" in str(w.message))
    assert f"of it are the encoded images of cameras ['{KEY}'] stored in the frame tables" in text
    assert "under a global shuffle" in text and "episode_pool_size=16" in text and "frame_cache_bytes" in text
    assert "convert_image_to_video" in text and "table_cache_dir" in text


def _global_shuffle(dataset, **settings):
    """Two epochs of a global shuffle over `dataset` (uint8 images): the batches, the fetch counters and the
    fetched episodes' bound entry after epoch 2."""
    with StreamLoader(str(dataset), batch_size=4, device="cpu", episode_pool_size="all", image_dtype="uint8",
                      seed=3, **settings) as loader:
        batches = [b for epoch, _ in epochs(loader, 2) for b in epoch]
        stats = loader.stats()
    return batches, stats["fetch"], stats["bounded"]["fetched_episodes"]


def test_a_global_shuffle_keeps_images_past_cache_bytes_on_the_drive(noisy_dataset, tmp_path, recwarn):
    """Past cache_bytes, the images of episodes fetched next are written to `table_cache_dir` and read back per
    sample (`fetch.image_spill`): memory holds about cache_bytes, the batches are those of a loader holding all of
    them, no file is left in the folder (each is unlinked once made), and no warning."""
    images = _data_bytes(noisy_dataset)
    want, _, everything = _global_shuffle(noisy_dataset, table_cache_dir="off")
    got, fetch, bounded = _global_shuffle(noisy_dataset, cache_bytes=images // 4, table_cache_dir=str(tmp_path))
    same_batches(got, want)
    assert everything["peak"] >= images * 0.9  # without the drive: every image in memory
    assert fetch["image_columns_spilled"] >= 2 and fetch["image_bytes_spilled"] >= images // 3, fetch
    # the images in memory never pass the bound (fetches ending together reserve their room); the episodes whose
    # images went to the drive still hold their other columns (~100 bytes a row), which may
    assert bounded["peak"] <= images // 4 + 200 * loader_frames(noisy_dataset), bounded
    assert not [w for w in recwarn if "pinned episodes" in str(w.message) or "image" in str(w.message)], [str(w.message) for w in recwarn]
    assert [p for p in (tmp_path / "image-spill").iterdir()] == []


def test_over_http_images_past_cache_bytes_go_to_the_drive_too(noisy_dataset, tmp_path):
    """Rows read together from a remote store (one request batch for many episodes): each episode's rows kept in
    memory hold their room before they are counted, so the bound holds there too; the batches are the local ones."""
    from tests.support.httpserver import Server

    images = _data_bytes(noisy_dataset)
    want, _, _ = _global_shuffle(noisy_dataset, table_cache_dir="off")
    with Server(noisy_dataset.parent) as base:
        got, fetch, bounded = _global_shuffle(f"{base}/{noisy_dataset.name}", cache_bytes=images // 4,
                                              table_cache_dir=str(tmp_path))
    same_batches(got, want)
    assert fetch["image_columns_spilled"] >= 2, fetch
    assert bounded["peak"] <= images // 4 + 200 * loader_frames(noisy_dataset), bounded  # as above


def test_images_of_a_group_in_the_table_cache_are_read_from_its_mapping(tmp_path):
    """Data files written as one row group for many episodes (lerobot's dataset tools) are decoded once into
    `table_cache_dir` and read memory-mapped: their images are read from the mapping per sample, neither copied into
    the fetched episodes (which hold little beyond the other columns) nor written again to the image spill; the
    batches are those of a loader holding the images in memory (fails where the rows copy the images: the fetched
    episodes then hold `cache_bytes` and the rest is spilled)."""
    from dali_stream.fetch.mapped_images import MappedImages

    root = _without_video(tmp_path / "one-group", 64, _noise, episodes=6, episodes_per_file=6, after="action")
    (path,) = root.glob("data/*/*.parquet")
    pq.write_table(pq.read_table(path), path, row_group_size=1 << 20)  # one group: each episode's rows a slice of it
    images = _data_bytes(root)
    with pytest.warns(UserWarning, match=r"row group 0 holds 47 rows, many episodes' worth .* table_cache_dir"):
        want, _, everything = _global_shuffle(root, table_cache_dir="off")
    got, fetch, bounded = _global_shuffle(root, cache_bytes=images // 4, table_cache_dir=str(tmp_path / "cache"))
    same_batches(got, want)
    assert everything["peak"] >= images * 0.9  # the groups kept in memory: every image copied into the rows
    assert fetch["image_columns_spilled"] == 0 and bounded["peak"] < images // 20, (fetch, bounded, images)
    with StreamLoader(str(root), batch_size=4, device="cpu", table_cache_dir=str(tmp_path / "cache")) as loader:
        folder, length = loader.resolved.table_cache_dir, int(loader.meta.lengths[0])
    store = store_of(root, table_cache_dir=folder)  # a store as the loader's, on its folder
    try:
        column = store.rows(0)[KEY]
        assert isinstance(column, MappedImages) and len(column) == length
        with pytest.raises(IndexError):
            column[len(column)]
    finally:
        store.close()


def test_rows_read_at_once_cannot_both_take_the_room_left_for_images(noisy_dataset, tmp_path):
    """Two episodes' rows read at the same time, each fitting cache_bytes alone and not both: one keeps its images in
    memory, the other's go to the drive, and the fetched episodes never hold more than cache_bytes (the choice is
    made under the store's lock, rows kept in memory holding their room until counted; fails where both choose
    before either is counted)."""
    import threading

    from dali_stream.decode.cpu import DecoderCache
    from dali_stream.fetch.store import EpisodeStore
    from dali_stream.fetch.tables import rows_nbytes
    from dali_stream.meta.catalog import Catalog
    from dali_stream.meta.dataset import DatasetMeta

    catalog = Catalog.whole(DatasetMeta.open(str(noisy_dataset)))
    whole = EpisodeStore(catalog, 1e-4, 1 << 30, DecoderCache(1), 0)
    sizes = [rows_nbytes(whole.rows(pos)) for pos in (0, 1)]
    whole.close()
    capacity = max(sizes) + min(sizes) // 2
    store = EpisodeStore(catalog, 1e-4, capacity, DecoderCache(1), 0, table_cache_dir=str(tmp_path))
    both_chose = threading.Barrier(2, timeout=60)
    count = store.fetcher._ended

    def ended(*args):
        both_chose.wait()  # each fetch is counted only once both have read their rows and chosen where images go
        count(*args)

    store.fetcher._ended = ended
    threads = [threading.Thread(target=store.rows, args=(pos,)) for pos in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    try:
        assert store.spill is not None and store.spill.columns == 1, (store.spill.columns, store.stats.peak_bytes)
        assert store.stats.peak_bytes <= capacity, (store.stats.peak_bytes, capacity, sizes)
        assert [KEY in store.rows(pos) for pos in (0, 1)] == [True, True]  # both read their images back
    finally:
        store.close()


def test_where_images_cannot_go_to_the_drive_they_stay_in_memory_with_a_warning(noisy_dataset, tmp_path,
                                                                               monkeypatch):
    """A folder that cannot be made, or a drive that would keep less than the floor free: the same batches, the
    images in memory, one warning naming why and the fix."""
    images = _data_bytes(noisy_dataset)
    want, _, _ = _global_shuffle(noisy_dataset, table_cache_dir="off")
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    with pytest.warns(UserWarning, match=r"cannot be kept on the drive: could not write under .*a-file"):
        got, fetch, _ = _global_shuffle(noisy_dataset, cache_bytes=images // 4, table_cache_dir=str(blocked))
    same_batches(got, want)
    assert fetch["image_bytes_spilled"] == 0
    monkeypatch.setenv("DALI_STREAM_SPILL_KEEP_FREE_BYTES", str(1 << 62))
    with pytest.warns(UserWarning, match=r"cannot be kept on the drive: its drive .* GiB free.*table_cache_dir"):
        got, fetch, _ = _global_shuffle(noisy_dataset, cache_bytes=images // 4, table_cache_dir=str(tmp_path))
    same_batches(got, want)
    assert fetch["image_bytes_spilled"] == 0


def test_demo_streams_a_dataset_that_is_not_its_sample(image_dataset, tmp_path):
    """`dali-stream demo DATASET` on a dataset of one's own (no sample settings in its info.json), cameras stored as
    images: streamed and summarised, no painted ids looked for."""
    from dali_stream.tools.sample_data import SAMPLE_KEY
    from tests.support.console import dali_stream

    root = tmp_path / "mine"
    shutil.copytree(image_dataset, root)
    info = json.loads((root / "meta/info.json").read_text())
    del info[SAMPLE_KEY]
    (root / "meta/info.json").write_text(json.dumps(info))
    proc = dali_stream("demo", root, "--batches", "3", "--batch-size", "4")
    assert proc.returncode == 0, proc.stderr
    out = " ".join(proc.stdout.split())
    assert "not a dali-stream sample" in out and "images in the tables -> table-images" in out
    assert "last sample check" not in out and "3 x 4 on cpu" in out


def test_two_cameras_in_one_data_file_are_kept_apart_by_the_cache(image_dataset, tmp_path):
    """Two cameras stored in the same data file (LIBERO's image and wrist_image): the cache names each one's images by
    its column too, so two epochs with it equal two without and each camera shows its own images."""
    second = "observation.wrist_image"
    root = tmp_path / "two"
    shutil.copytree(image_dataset, root)
    image = {"dtype": "image", "shape": [8, 8, 3], "names": ["height", "width", "channels"]}
    add_columns(root, {second: image}, lambda rows: {second: pa.array(
        [{"bytes": _png((int(i) + 100) % 255), "path": f"wrist_{int(i):06d}.png"}
         for i in rows.column("index").to_pylist()],
        pa.struct([("bytes", pa.binary()), ("path", pa.string())]))}, first=True)
    args = dict(batch_size=4, device="cpu", drop_last=False, seed=2, image_dtype="uint8")
    with StreamLoader(str(root), **args) as plain:
        want = epochs(plain)
    with StreamLoader(str(root), frame_cache_bytes=1 << 30, **args) as cached:
        got = epochs(cached)
    for (g, _), (w, _) in zip(got, want):
        same_batches(g, w)
        for batch in g:
            for j, index in enumerate(batch["index"].tolist()):
                assert int(batch[KEY][j].max()) == value(index) and int(batch[second][j].max()) == (index + 100) % 255
    assert got[1][1] == 0  # the second epoch decodes nothing
