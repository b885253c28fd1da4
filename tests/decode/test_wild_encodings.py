"""Streams as encoders write them in the wild, read right on every CPU route: each file one continuous
encode with the encoder's own defaults (`make-sample --recorder encoder-defaults`): libx264 B-frames, libx265
open GOPs (CRA keyframes with RASL pictures shown before them), libvpx-vp9's good deadline with alt-ref frames
(decoded, never shown), SVT-AV1 and libaom AV1 with hidden frames (shown later by show_existing_frame), GOP 60
so episodes start deep inside GOPs; and H.264 at 1920x1080 (coded as 1088 rows, cropped). Every frame of every
episode checked by its painted ids, alone and with windows past both ends. A layout test shows each file has
the property that makes it hard. `make gpu-check` runs the same datasets through NVDEC (tests/gpu/test_gpu.py)."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from dali_stream.fetch.pictures import av1_hidden_pictures, one_picture_per_packet, vp9_hidden_pictures
from tests.loader.test_boundaries import check_every_frame

WILD = {"front": "h264", "side": "hevc", "wrist": "av1", "top": "vp9", "aux": "av1/libaom-av1"}
HD = {"front": "h264"}


def have_libaom() -> bool:
    from dali_stream.tools.default_recorder import ffmpeg_encoders

    return shutil.which("ffmpeg") is not None and "libaom-av1" in ffmpeg_encoders()


def wild_dataset(root, cameras: dict[str, str], height: int, width: int, episodes: int = 5, min_length: int = 17,
                 max_length: int = 45):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    if "aux" in cameras and not have_libaom():  # the GPU node has no ffmpeg command: PyAV's encoders only
        cameras = {k: v for k, v in cameras.items() if k != "aux"}
    spec = SampleSpec(episodes=episodes, min_length=min_length, max_length=max_length, gop=60, episodes_per_file=3,
                      height=height, width=width, seed=5, recorder="encoder-defaults",
                      cameras=parse_cameras(",".join(f"{k}:{v}" for k, v in cameras.items())))
    return write_sample(root, spec), {k: v.split("/")[0] for k, v in cameras.items()}


@pytest.fixture(scope="module")
def wild(tmp_path_factory):
    if not have_libaom():
        pytest.fail("the ffmpeg command with libaom-av1 is needed (make sysdeps installs Debian's ffmpeg)")
    return wild_dataset(tmp_path_factory.mktemp("wild") / "wild", WILD, 96, 128)


@pytest.fixture(scope="module")
def hd(tmp_path_factory):
    return wild_dataset(tmp_path_factory.mktemp("wild") / "hd", HD, 1080, 1920, episodes=3, min_length=6,
                        max_length=11)


@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
# cpu (what `auto` takes here): torchcodec, no DALI graph; dali-cpu: VP9 on DALI's CPU decoder; cpu-open: the
# open-decoder engine fed packets
@pytest.mark.parametrize("decode", ["cpu", "dali-cpu", "cpu-open"])
def test_every_frame_of_streams_encoded_with_library_defaults(wild, decode, windowed):
    root, cameras = wild
    check_every_frame(root, 30, cameras, decode=decode, windowed=windowed)


@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
@pytest.mark.parametrize("decode", ["cpu", "dali-cpu", "cpu-open"])
def test_every_frame_of_wild_streams_read_in_pieces(wild, decode, windowed):
    """The same, every episode read as a long one (`segment_bytes`): one piece per sample, a batch's pieces of a
    camera joined into one stream (torchcodec: `graph.joined.join_pieces`; DALI: `join_group`)."""
    root, cameras = wild
    check_every_frame(root, 30, cameras, decode=decode, windowed=windowed, segment_bytes=1)


@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
@pytest.mark.parametrize("decode", ["cpu", "cpu-open"])
def test_every_frame_of_1080p_h264(hd, decode, windowed):
    root, cameras = hd
    check_every_frame(root, 30, cameras, decode=decode, windowed=windowed)


# ---- what makes each file hard ---------------------------------------------------------------------------------
def _packets(path):
    import av

    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        ctx = stream.codec_context
        packets = [(bytes(p), p.pts, p.dts, p.is_keyframe) for p in container.demux(stream) if p.size]
        return packets, bytes(ctx.extradata or b""), (ctx.width, ctx.height)


def _first_file(root, name):
    return sorted((root / "videos" / f"observation.images.{name}").glob("*/*.mp4"))[0]


def test_the_files_have_what_makes_them_hard(wild, hd):
    from dali_stream.fetch import nal

    root, _ = wild
    # libx264: B-frames (pts out of decode order)
    packets, _, _ = _packets(_first_file(root, "front"))
    assert any(b[1] < a[1] for a, b in zip(packets, packets[1:])), "no B-frames in the x264 file"
    # libx265: a CRA keyframe with RASL pictures after it in decode order but shown before it
    packets, extradata, _ = _packets(_first_file(root, "side"))
    types = [[(sample[pos] >> 1) & 0x3F for pos, _ in nal.nal_units(sample, 4)] for sample, *_ in packets]
    cras = [i for i, t in enumerate(types) if 21 in t]  # CRA_NUT
    assert cras, "no CRA keyframe in the x265 file"
    assert any(packets[j][1] < packets[i][1] for i in cras for j in range(i + 1, min(i + 8, len(packets)))
               if {8, 9} & set(types[j])), "no RASL picture shown before its CRA"
    # libvpx-vp9: alt-ref frames in superframes (index marker 0b110xxxxx at both ends of the index)
    packets, _, _ = _packets(_first_file(root, "top"))
    superframes = [s for s, *_ in packets if (s[-1] & 0xE0) == 0xC0]
    assert superframes, "no superframe (alt-ref + shown frame) in the VP9 file"
    assert all(vp9_hidden_pictures(s) >= 1 for s in superframes)
    assert not one_picture_per_packet("vp9", [s for s, *_ in packets])
    # SVT-AV1 and libaom: hidden frames
    for name in ("wrist", "aux"):
        packets, _, _ = _packets(_first_file(root, name))
        assert sum(av1_hidden_pictures(s) for s, *_ in packets) > 0, f"no hidden AV1 frame in {name}"
        assert not one_picture_per_packet("av1", [s for s, *_ in packets])
    # H.264 1080p: coded in 16-row macroblocks, 1088 rows cropped to 1080
    hd_root, _ = hd
    import av

    with av.open(str(_first_file(hd_root, "front"))) as container:
        stream = container.streams.video[0]
        frame = next(container.decode(stream))
        assert (frame.height, frame.width) == (1080, 1920)
        assert stream.codec_context.coded_height == 1088, stream.codec_context.coded_height
    assert np.asarray(frame.to_ndarray(format="rgb24")).shape == (1080, 1920, 3)


def test_joined_streams_are_refused_where_packets_hide_pictures(wild, tmp_path):
    """DALI's decoder labels pictures by a queue of packet times (fetch/pictures.py): two-pass VP9's superframes
    with hidden alt-ref frames are decoded one clip per sample (every frame right: the tests above), while the
    sample writer's one-pass VP9 (no superframes) joins a batch's clips."""
    from dali_stream import StreamLoader
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    top = "observation.images.top"
    plain = write_sample(tmp_path / "plain", SampleSpec(episodes=4, min_length=20, max_length=30, gop=30,
                                                        cameras=parse_cameras("top:vp9"), seed=1))
    counts = {}
    for name, root in (("wild", wild[0]), ("plain", plain)):
        with StreamLoader(str(root), batch_size=6, decode={top: "dali-cpu"} if name == "plain" else
                          {k: "cpu" if k != top else "dali-cpu" for k in (f"observation.images.{c}" for c in WILD)},
                          device="cpu", join_streams=2, episode_pool_size=3, episode_frames_bytes=0) as loader:
            assert loader.routes[top] == "dali-cpu"
            for _ in loader:
                pass
            counts[name] = list(loader.stats()["build"]["dali"][top].values())  # samples, streams, frames fed
    samples, streams, _ = counts["wild"]
    assert streams == samples, counts  # one clip per sample: never joined
    samples, streams, _ = counts["plain"]
    assert streams < samples, counts  # joined
