"""The sample writer produces a real v3 layout with painted ids."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dali_stream.tools import paint
from dali_stream.tools.sample_data import SampleSpec, parse_cameras, state_row, write_sample


def test_paint_round_trip_all_layouts():
    img = paint.render(96, 128, 1234, 56789 % 65536, camera=2)
    assert paint.read_ids(img) == (1234, 56789 % 65536)
    assert paint.read_ids(np.moveaxis(img, -1, 0)) == (1234, 56789 % 65536)
    assert paint.read_ids(np.moveaxis(img, -1, 0).astype(np.float32) / 255) == (1234, 56789 % 65536)


def test_read_ids_refuses_rather_than_guesses():
    img = paint.render(96, 128, 7, 34)
    b = paint.block_size(128)
    flipped = img.copy()
    flipped[b:2 * b, 3 * b:4 * b] = paint.LIGHT  # frame bit 3 copied from another frame: 34 -> 42
    with pytest.raises(paint.UnreadableIds, match=r"\(episode 7, frame 42\) but their check value"):
        paint.read_ids(flipped)
    grey = img.copy()
    grey[b:2 * b, 5 * b:6 * b] = 128
    with pytest.raises(paint.UnreadableIds, match=r"row 1, bit 5\) has mean luma 128"):
        paint.read_ids(grey)
    with pytest.raises(paint.UnreadableIds):
        paint.read_ids(np.full((96, 128, 3), 16, np.uint8))  # an unpainted (black) frame


def test_ids_past_16_bits_take_a_fourth_row_and_survive_encoding():
    """An hour at 30 fps is 108,000 frames: ids of 2^16 and more are painted with a fourth row of high bits,
    checked by the CRC of the whole ids, and read back through a real AV1 and H.264 encode (lerobot's settings)."""
    import av

    ids = [(0, 65535), (0, 65536), (3, 107999), (70000, 12), (2**24 - 1, 2**24 - 1)]
    for e, f in ids:
        assert paint.read_ids(paint.render(96, 128, e, f)) == (e, f)
    with pytest.raises(ValueError, match=r"ids must fit in 24 bits: episode=0, frame=16777216"):
        paint.render(96, 128, 0, 2**24)
    with pytest.raises(ValueError, match=r"need a fourth row of 4-pixel blocks: the image is 12 pixels high"):
        paint.paint_ids(np.zeros((12, 64, 3), np.uint8), 0, 65536)
    damaged = paint.render(96, 128, 3, 107999)
    b = paint.block_size(128)
    damaged[3 * b:4 * b, 9 * b:10 * b] = paint.LIGHT  # the frame's bit 17 (dark: 107999 < 2^17) set
    with pytest.raises(paint.UnreadableIds, match=r"check value"):  # a high bit from another frame: refused
        paint.read_ids(damaged)
    for codec, options in (("libsvtav1", {"g": "2", "crf": "30"}), ("libx264", {"g": "2", "crf": "30"})):
        buf = __import__("io").BytesIO()
        with av.open(buf, "w", format="mp4") as out:
            stream = out.add_stream(codec, rate=30, options=options)
            stream.width, stream.height, stream.pix_fmt = 128, 96, "yuv420p"
            for e, f in ids:
                out.mux(stream.encode(av.VideoFrame.from_ndarray(paint.render(96, 128, e, f), format="rgb24")))
            out.mux(stream.encode())
        buf.seek(0)
        with av.open(buf) as back:
            got = [paint.read_ids(frame.to_ndarray(format="rgb24")) for frame in back.decode(video=0)]
        assert got == ids, codec


def _misread_frames(root) -> dict[str, int]:
    """Decode every frame of every camera file with PyAV; count frames whose ids are not the expected ones."""
    import av

    from dali_stream.meta.dataset import DatasetMeta

    meta = DatasetMeta.open(str(root))
    bad = {}
    for key, cam in meta.cameras.items():
        expect = {}
        for p in range(meta.num_episodes):
            for f in range(int(meta.lengths[p])):
                tick = round((float(cam.from_timestamp[p]) + f / meta.fps) * meta.fps)
                expect[(meta.video_file(p, key), tick)] = (meta.episode_index(p), f)
        count = seen = 0
        for path in sorted({path for path, _ in expect}):
            with av.open(path) as container:
                for frame in container.decode(video=0):
                    seen += 1
                    try:
                        ok = paint.read_ids(frame.to_ndarray(format="rgb24")) == \
                            expect[(path, round(frame.time * meta.fps))]
                    except paint.UnreadableIds:
                        ok = False
                    count += not ok
        assert seen == len(expect), key
        bad[cam.codec] = count
    return bad


@pytest.mark.parametrize("height,width,episodes", [(96, 128, 12), (16, 64, 6), (54, 100, 6), (160, 192, 4)])
def test_every_frame_of_every_codec_carries_its_ids(tmp_path, height, width, episodes):
    """At the default size, the smallest size the writer allows, an odd block size and a larger one: every frame
    of every codec, decoded straight from the MP4s, shows its own ids."""
    from dali_stream.tools.sample_data import write_sample

    spec = SampleSpec(height=height, width=width, cameras=parse_cameras("a:h264,b:hevc,c:av1,d:vp9"),
                      episodes=episodes)
    assert _misread_frames(write_sample(tmp_path / "s", spec)) == {"h264": 0, "hevc": 0, "av1": 0, "vp9": 0}


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
    with pytest.raises(ValueError, match=r"height >= 16 .*at least 16 for the encoders"):
        SampleSpec(height=12, width=64)


@pytest.mark.parametrize("kwargs,match", [({"recorder": "ffmpeg"}, r"recorder must be one of \('dali_stream', "
                                                                   r"'lerobot', 'encoder-defaults'\). Found: 'ffmpeg'"),
                                          ({"pix_fmt": "nv12"}, r"pix_fmt must be one of .*Found: 'nv12'")])
def test_bad_recorder_or_pixel_format_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        SampleSpec(**kwargs)


def test_the_writer_checks_what_it_encoded(tmp_path):
    """`misread_frames`, the writer's own check after each file, sees frames that show other ids."""
    from dali_stream.tools.sample_encode import encode_video, misread_frames

    ids = [(3, f) for f in range(12)]
    path = tmp_path / "v.mp4"
    encode_video(path, (paint.render(64, 96, e, f) for e, f in ids), "av1", 30, 4, 64, 96)
    assert misread_frames(path, ids) == []
    assert misread_frames(path, ids[:6] + [(3, 99)] + ids[7:]) == [6]
    assert misread_frames(path, ids + [(3, 99)]) == [len(ids)]  # a frame the file lacks


def _files(root):
    """Every file of a written dataset: tables and metadata as bytes; videos as (pts, keyframe, painted ids) per
    frame, which is what the writer promises (an encoder's bytes may vary with its threads' timing)."""
    import av

    out = {}
    for p in sorted(root.rglob("*")):
        if p.suffix == ".mp4":
            with av.open(str(p)) as c:
                out[p.relative_to(root)] = [(f.pts, f.key_frame, paint.read_ids(f.to_ndarray(format="rgb24")))
                                            for f in c.decode(video=0)]
        elif p.is_file():
            out[p.relative_to(root)] = p.read_bytes()
    return out


def test_encoder_processes_write_the_same_dataset(tmp_path):
    """Encoded in two worker processes, the dataset is the one a single process writes: the same tables and
    metadata byte for byte, and every video frame at the same time, keyframe or not, with the same ids."""
    from dali_stream.tools.sample_data import write_sample

    spec = SampleSpec(episodes=4, min_length=8, max_length=14, height=64, width=96, gop=5, episodes_per_file=2,
                      cameras=parse_cameras("a:h264,b:vp9"))
    done = []
    one = write_sample(tmp_path / "one", spec, workers=1)
    two = write_sample(tmp_path / "two", spec, workers=2, progress=lambda d, t: done.append((d, t)))
    assert _files(one) == _files(two)
    total = done[-1][1]
    assert [d for d, _ in done] == list(range(1, total + 1)) and total == len(list((two / "videos").rglob("*.mp4"))) + 2


def test_encoder_processes_by_sample_size():
    from dali_stream.tools.sample_encode import PARALLEL_PIXELS, encode_workers

    small = SampleSpec(episodes=4, min_length=8, max_length=14, height=64, width=96, cameras=parse_cameras("a:h264"))
    big = SampleSpec(episodes=20, min_length=300, max_length=600, height=480, width=640,
                     cameras=parse_cameras("a:h264,b:h264"))
    assert int(big.lengths().sum()) * 2 * 480 * 640 >= PARALLEL_PIXELS
    assert encode_workers(small, 6) == 1
    assert encode_workers(big, 6) == min(os.cpu_count() or 1, 6)
    assert encode_workers(small, 6, workers=3) == 3 and encode_workers(big, 2, workers=8) == 2


def test_zero_workers_is_refused_before_anything_is_touched(tmp_path):
    from dali_stream.tools.sample_data import write_sample

    keep = tmp_path / "existing"
    keep.mkdir()
    (keep / "file").write_text("mine")
    with pytest.raises(ValueError, match=r"workers .* must be at least 1\. Found: 0"):
        write_sample(keep, SampleSpec(episodes=2), overwrite=True, workers=0)
    assert (keep / "file").read_text() == "mine"


def _run(*args):
    from tests.support.console import dali_stream

    proc = dali_stream(*args)
    assert proc.returncode == 0, f"dali-stream {args} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def test_make_sample_records_as_lerobot_with_a_pixel_format(tmp_path):
    """`dali-stream make-sample --recorder lerobot --pix-fmt yuv444p` in a real process: every episode starts on a
    keyframe at its from_timestamp, H.264 is 4:4:4 and HEVC stays 4:2:0 (as lerobot keeps it), in the files and in
    info.json; `verify --decode --tolerance-s` reads every episode as the loader does and finds nothing. Not in the
    floors' smoke set: the floor PyAV (14.2) cannot remux as lerobot does, and make-sample says so."""
    import av
    import pyarrow.parquet as pq

    out = tmp_path / "lr"
    _run("make-sample", out, "--recorder", "lerobot", "--pix-fmt", "yuv444p", "--gop", 2, "--crf", 30, "--episodes",
         3, "--min-length", 9, "--max-length", 13, "--cameras", "front:h264,side:hevc", "--episodes-per-file", 3)
    info = json.loads((out / "meta/info.json").read_text())
    episodes = pq.read_table(out / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    for name, pix_fmt in (("front", "yuv444p"), ("side", "yuv420p")):
        key = f"observation.images.{name}"
        assert info["features"][key]["info"]["video.pix_fmt"] == pix_fmt
        with av.open(str(out / "videos" / key / "chunk-000/file-000.mp4")) as container:
            stream = container.streams.video[0]
            assert stream.codec_context.pix_fmt == pix_fmt
            keys = [float(p.pts * stream.time_base) for p in container.demux(stream) if p.size and p.is_keyframe]
        assert all(any(abs(k - e[f"videos/{key}/from_timestamp"]) < 1e-3 for k in keys) for e in episodes)
    assert info["dali_stream_sample"]["recorder"] == "lerobot"
    report = json.loads(_run("verify", out, "--decode", "--tolerance-s", "1e-3", "--json").stdout)
    assert report["damaged"] == [] and report["exit_code"] == 0


def test_the_writer_leaves_the_callers_scheduling_alone(tmp_path):
    """libsvtav1 run as root switches its calling thread to SCHED_FIFO 99 and leaves it there, and threads created
    afterwards inherit it: the writer encodes in child processes, so the caller and its later threads keep their
    policy."""
    import os
    import threading

    before = os.sched_getscheduler(0)
    spec = SampleSpec(episodes=2, min_length=6, max_length=8, cameras=parse_cameras("wrist:av1"), seed=1)
    write_sample(tmp_path / "av1", spec, workers=1)
    seen = {}
    thread = threading.Thread(target=lambda: seen.update(policy=os.sched_getscheduler(threading.get_native_id())))
    thread.start()
    thread.join()
    assert os.sched_getscheduler(0) == before and seen["policy"] == before


def _encoding_children() -> list[Path]:
    """/proc/<pid> of this process's encoding children (`sample_encode.encode_child`) alive now."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if (int(stat.read_text().rsplit(")", 1)[1].split()[1]) == os.getpid()
                    and b"encode_child" in (stat.parent / "cmdline").read_bytes()):
                found.append(stat.parent)
        except (OSError, ValueError, IndexError):
            continue
    return found


def test_encoding_children_do_not_keep_real_time_threads(tmp_path):
    """The child's SVT-AV1 threads are put back to SCHED_OTHER within half a second (as root SVT makes them
    SCHED_FIFO 99, and three encodes then starved a pip install on 2 cores): no thread of an encoding child is
    seen in SCHED_FIFO for more than 1.5 s. Real encodes; the parent watches the children's threads."""
    import threading
    import time

    from dali_stream.tools.sample_encode import DEMOTER_NAME

    if os.geteuid() != 0:
        pytest.skip("SVT-AV1 raises its threads to real-time priority only when run as root")
    fifo_since: dict[int, float] = {}
    longest = [0.0]
    threads: set[int] = set()  # the encoding child's threads seen (SVT-AV1 starts dozens)
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            now = time.monotonic()
            for child in _encoding_children():
                try:
                    for task in (child / "task").iterdir():
                        tid = int(task.name)
                        threads.add(tid)
                        if (task / "comm").read_bytes().strip() == DEMOTER_NAME:
                            continue  # the demoting thread itself runs real-time, asleep but for its rounds
                        if os.sched_getscheduler(tid) == os.SCHED_FIFO:
                            longest[0] = max(longest[0], now - fifo_since.setdefault(tid, now))
                        else:
                            fifo_since.pop(tid, None)
                except (OSError, ValueError, IndexError):
                    continue
            time.sleep(0.05)

    thread = threading.Thread(target=watch)
    thread.start()
    try:
        write_sample(tmp_path / "av1", SampleSpec(episodes=3, min_length=200, max_length=200, height=240, width=320,
                                                  cameras=parse_cameras("wrist:av1"), seed=1), workers=1)
    finally:
        done.set()
        thread.join()
    assert len(threads) >= 8, f"the watch saw {len(threads)} threads of the encoding child: not its encode"
    assert longest[0] < 1.5, f"a thread stayed SCHED_FIFO for {longest[0]:.1f} s"


def test_an_encode_that_uses_no_cpu_is_found_hung_within_the_stall_limit(tmp_path, monkeypatch):
    """SVT-AV1's hang is a deadlock: every thread waits on a futex at 0 % CPU (seen again 2026-11-24: a 640x480
    lerobot-recorder sample sat 25 minutes, its whole-file budget being an hour). Each encoding child is stopped
    (SIGSTOP: a real process using no CPU) as it starts; with a 2 s stall limit the writer kills it, retries
    once, then names the file and both limits, long before the whole-file budget."""
    import signal
    import threading
    import time

    from dali_stream.tools.sample_data import partial_path
    from dali_stream.tools.sample_encode import ENV_ENCODE_STALL_S

    monkeypatch.setenv(ENV_ENCODE_STALL_S, "2")
    stopped: set[int] = set()
    done = threading.Event()

    def stop_children() -> None:
        while not done.is_set():
            for child in _encoding_children():
                pid = int(child.name)
                if pid not in stopped:
                    os.kill(pid, signal.SIGSTOP)
                    stopped.add(pid)
            time.sleep(0.02)

    thread = threading.Thread(target=stop_children)
    thread.start()
    spec = SampleSpec(episodes=2, min_length=30, max_length=30, height=192, width=256, cameras=parse_cameras("wrist:av1"),
                      seed=1)
    out = tmp_path / "stalled"
    t0 = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match=r"used no CPU for 2 s \(hung\), twice .*DALI_STREAM_ENCODE_STALL_S"):
            write_sample(out, spec, workers=1)
    finally:
        done.set()
        thread.join()
    assert len(stopped) == 2 and time.monotonic() - t0 < 60  # the whole-file budget would be minutes
    assert not out.exists() and not partial_path(out).exists()


def test_a_hung_encode_is_killed_retried_and_reported_and_nothing_half_written_remains(tmp_path, monkeypatch):
    """The budget per video file (here 1 ms, which no encode meets) stands in for SVT-AV1's hang: the child is
    killed, the file retried once, then a clear error; `out` never appears and the partial folder is removed."""
    from dali_stream.tools.sample_data import partial_path
    from dali_stream.tools.sample_encode import ENV_ENCODE_TIMEOUT_S

    monkeypatch.setenv(ENV_ENCODE_TIMEOUT_S, "0.001")
    # large enough that no child process imports, encodes and checks it between two polls of the parent
    spec = SampleSpec(episodes=3, min_length=60, max_length=60, height=192, width=256, cameras=parse_cameras("wrist:av1"),
                      seed=1)
    out = tmp_path / "hung"
    with pytest.raises(RuntimeError, match=r"did not finish within 0 s, twice .* DALI_STREAM_ENCODE_TIMEOUT_S"):
        write_sample(out, spec, workers=1)
    assert not out.exists() and not partial_path(out).exists()
    monkeypatch.delenv(ENV_ENCODE_TIMEOUT_S)
    partial_path(out).mkdir()  # as a killed write leaves it
    write_sample(out, SampleSpec(episodes=2, min_length=6, max_length=8, cameras=parse_cameras("wrist:av1")), workers=1)
    assert (out / "meta" / "info.json").exists() and not partial_path(out).exists()
