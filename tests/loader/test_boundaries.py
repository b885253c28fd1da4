"""The boundary matrix: every frame of every episode (first and last included), with and without windows that
cross both ends, on every CPU route, for files written the way lerobot's recorder writes them (an encode per
episode, appended: B-frames across the joins, HEVC open GOP) and the way one continuous encode does (episodes
starting mid-GOP, HEVC closed GOP), at GOP 2 and 30. Once, the last frame of an episode came back as the
next episode's first on lerobot-recorded H.264/HEVC. The same matrix runs on NVDEC in tests/gpu/test_gpu.py."""

from __future__ import annotations

import pytest

from dali_stream import StreamLoader
from dali_stream.tools.paint import read_ids

CAMERAS = {"front": "h264", "side": "hevc", "wrist": "av1", "top": "vp9"}

# (recorder, gop, fps, pix_fmt, cameras): lerobot's defaults (g=2, crf 30), its g=30, the continuous writer at
# both GOPs; 50 fps with 4:4:4 H.264 as the last lerobot variants.
MATRIX = {
    "lerobot-g2": ("lerobot", 2, 30, "yuv420p", CAMERAS),
    "lerobot-g30": ("lerobot", 30, 30, "yuv420p", CAMERAS),
    "continuous-g2": ("dali_stream", 2, 30, "yuv420p", CAMERAS),
    "continuous-g30": ("dali_stream", 30, 30, "yuv420p", CAMERAS),
    "lerobot-g2-50fps-444": ("lerobot", 2, 50, "yuv444p", {"front": "h264", "side": "hevc"}),
}


def boundary_dataset(root, recorder: str, gop: int, fps: int, pix_fmt: str, cameras: dict[str, str],
                     height: int = 96, width: int = 128):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=5, min_length=17, max_length=45, gop=gop, fps=fps, episodes_per_file=3,
                      height=height, width=width,
                      cameras=parse_cameras(",".join(f"{k}:{v}" for k, v in cameras.items())), seed=3,
                      recorder=recorder, pix_fmt=pix_fmt, crf=30 if recorder == "lerobot" else None)
    return write_sample(root, spec)


@pytest.fixture(scope="module", params=sorted(MATRIX))
def matrix_dataset(request, tmp_path_factory):
    recorder, gop, fps, pix_fmt, cameras = MATRIX[request.param]
    root = boundary_dataset(tmp_path_factory.mktemp("bounds") / request.param, recorder, gop, fps, pix_fmt, cameras)
    return root, fps, cameras


def check_every_frame(root, fps: int, cameras, *, decode, windowed: bool, device="cpu", **settings) -> dict[str, int]:
    """Stream one epoch (every frame once) and compare each image's painted ids with the frame it stands for;
    windows of [-2, -1, 0, 1, 2] frames reach past both ends of every episode (clamped). Returns the frames
    checked per camera."""
    steps = [-2, -1, 0, 1, 2] if windowed else [0]
    keys = [f"observation.images.{c}" for c in cameras]
    deltas = {k: [s / fps for s in steps] for k in keys} if windowed else {}
    settings.setdefault("episode_pool_size", 3)
    with StreamLoader(str(root), batch_size=6, delta_timestamps=deltas, seed=0,
                      decode=decode, device=device, num_workers=2, drop_last=False, image_dtype="uint8",
                      **settings) as loader:
        lengths = {int(e): int(n) for e, n in zip(loader.meta.episodes["episode_index"], loader.meta.lengths)}
        checked = dict.fromkeys(keys, 0)
        wrong = []
        for batch in loader:
            for i in range(len(batch["task"])):
                ep, fr = int(batch["episode_index"][i]), int(batch["frame_index"][i])
                want = [(ep, min(max(fr + s, 0), lengths[ep] - 1)) for s in steps]
                for key in keys:
                    images = batch[key][i].cpu().numpy()
                    got = [read_ids(f) for f in (images if windowed else images[None])]
                    if got != want:
                        wrong.append((key, loader.routes[key], want, got))
                    checked[key] += len(want)
        total = int(loader.meta.total_frames)
    assert not wrong, f"{len(wrong)} wrong images, first: {wrong[:3]}"
    assert checked == dict.fromkeys(keys, len(steps) * total)
    return checked


@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
# cpu (what `auto` takes here): torchcodec, no DALI graph; dali-cpu: VP9 on DALI's CPU decoder; cpu-open: the
# open-decoder engine fed packets
@pytest.mark.parametrize("decode", ["cpu", "dali-cpu", "cpu-open"])
def test_every_frame_at_every_episode_boundary(matrix_dataset, decode, windowed):
    root, fps, cameras = matrix_dataset
    check_every_frame(root, fps, cameras, decode=decode, windowed=windowed)


@pytest.mark.parametrize("held", ["whole", "pieces"])
@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
@pytest.mark.parametrize("decode", ["cpu", "dali-cpu", "cpu-open"])
def test_every_frame_under_a_global_shuffle(matrix_dataset, decode, windowed, held):
    """episode_pool_size='all' on every route: the episodes fetched whole and a batch's clips joined (the share fits
    in the cache), or every sample's frames read alone from the file's index (`segment_bytes=1`: it does not)."""
    root, fps, cameras = matrix_dataset
    check_every_frame(root, fps, cameras, decode=decode, windowed=windowed, episode_pool_size="all",
                      **({"segment_bytes": 1} if held == "pieces" else {}))


def test_the_files_have_the_layout_each_recorder_promises(matrix_dataset):
    """What makes each kind the hard case. lerobot's: every episode starts on a keyframe at the file time the
    episodes table says, and (B-frames) the next episode's first packet is decoded before this one's last frame
    is shown. The continuous writer's: some episodes start between keyframes (the cut starts before them)."""
    import av
    import pyarrow.parquet as pq

    root, fps, cameras = matrix_dataset
    episodes = [e for path in sorted((root / "meta/episodes").glob("*/*.parquet")) for e in pq.read_table(path).to_pylist()]
    key = "observation.images.front"  # H.264 with B-frames
    starts, keys_at, joins_early = [], [], []
    for path in sorted((root / "videos" / key).glob("*/*.mp4")):
        chunk, file = int(path.parent.name.split("-")[1]), int(path.stem.split("-")[1])
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            packets = [(float(p.pts * stream.time_base), float(p.dts * stream.time_base), p.is_keyframe)
                       for p in container.demux(stream) if p.size]
        keys = {round(pts * fps) for pts, _, key_ in packets if key_}
        in_file = [e[f"videos/{key}/from_timestamp"] for e in episodes
                   if (e[f"videos/{key}/chunk_index"], e[f"videos/{key}/file_index"]) == (chunk, file)]
        starts += in_file
        keys_at += [round(start * fps) in keys for start in in_file]
        joins_early += [any(dts < start - 1e-6 and abs(pts - start) < 1e-6 for pts, dts, _ in packets)
                        for start in in_file[1:]]
    assert len(starts) == len(episodes)
    if "lerobot" in root.name:
        assert all(keys_at) and any(joins_early)
    else:
        assert not all(keys_at)
