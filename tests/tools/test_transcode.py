"""`dali-stream transcode`: an AV1 dataset written as lerobot writes it made NVDEC-ready, H.264 and HEVC: tables and
metadata byte for byte, every frame at its time, PSNR reported and bounded, resumable after SIGKILL, refusals."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from dali_stream import StreamLoader
from dali_stream.tools.paint import read_ids

TRANSCODE = [sys.executable, "-m", "dali_stream", "transcode"]
COPIED = "observation.images.top"  # recorded in H.264: NVDEC decodes it as it is


@pytest.fixture(scope="module")
def av1_dataset(tmp_path_factory):
    """Two AV1 cameras and an H.264 one, lerobot's recorder (each episode encoded alone, g=2, appended), three
    episodes a file."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=6, min_length=12, max_length=30, gop=2, episodes_per_file=3, recorder="lerobot",
                      cameras=parse_cameras("front:av1,wrist:av1,top:h264"), seed=4)
    return write_sample(tmp_path_factory.mktemp("ds") / "av1", spec)


def run(*args, check=True, **kw):
    proc = subprocess.run([*TRANSCODE, *map(str, args)], capture_output=True, text=True, timeout=600, **kw)
    if check:
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def digests(root: Path, under: str = "") -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted((root / under).rglob("*")) if p.is_file()}


def frames_of(root: Path) -> dict:
    """Every sample's index -> its timestamp, each camera's painted ids, and each camera's frame (uint8)."""
    out = {}
    with StreamLoader(str(root), batch_size=8, shuffle=False, device="cpu", decode="cpu",
                      image_dtype="uint8") as loader:
        for batch in loader:
            for j, i in enumerate(batch["index"].tolist()):
                out[i] = (float(batch["timestamp"][j]), {k: read_ids(batch[k][j]) for k in loader.meta.video_keys},
                          {k: batch[k][j].numpy() for k in loader.meta.video_keys})
    return out


@pytest.fixture(scope="module")
def source_frames(av1_dataset):
    return frames_of(av1_dataset)


@pytest.mark.parametrize("codec", ["h264", "hevc"])
def test_an_av1_dataset_becomes_nvdec_ready(av1_dataset, source_frames, tmp_path, codec):
    """Tables and metadata byte for byte (info.json's codec aside), the H.264 camera copied as it is, every frame at
    its time with its painted ids, a keyframe every --gop frames and no B-frame, PSNR reported above the floor."""
    import av

    dest = tmp_path / codec
    proc = run(av1_dataset, dest, "--codec", codec, "--gop", "4")
    assert "PSNR mean" in proc.stderr and "observation.images.front" in proc.stderr, proc.stderr
    before, after = digests(av1_dataset), digests(dest)
    for rel, digest in before.items():
        if rel == "meta/info.json" or rel.startswith("videos/observation.images.front") \
                or rel.startswith("videos/observation.images.wrist"):
            continue
        assert after.get(rel) == digest, rel  # data/, meta/ and the H.264 camera
    assert not [p for p in dest.rglob("*.partial")]
    info_then = json.loads((av1_dataset / "meta/info.json").read_text())
    info_now = json.loads((dest / "meta/info.json").read_text())
    for key in ("observation.images.front", "observation.images.wrist"):
        assert info_now["features"][key]["info"]["video.codec"] == codec
        info_now["features"][key]["info"]["video.codec"] = info_then["features"][key]["info"]["video.codec"]
    assert info_now == info_then
    report = json.loads((dest / "transcode_report.json").read_text())
    assert set(report["cameras"]) == {"observation.images.front", "observation.images.wrist"}
    for cam in report["cameras"].values():
        assert cam["psnr_mean"] >= 40 and cam["psnr_worst"] > 30 and len(cam["episodes"]) == 6, cam
    from dali_stream.tools.transcode_video import psnr

    got = frames_of(dest)  # the loader's samples: the same indexes, times and ids, pixels within the floor
    assert sorted(got) == sorted(source_frames)
    for i, (t, ids, pixels) in got.items():
        assert (t, ids) == source_frames[i][:2], i
        assert np.array_equal(pixels[COPIED], source_frames[i][2][COPIED])
        for key in ("observation.images.front", "observation.images.wrist"):
            assert psnr(pixels[key], source_frames[i][2][key]) >= 40, (i, key)
    for path in (dest / "videos/observation.images.front").rglob("*.mp4"):
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            assert stream.codec_context.name == codec
            kinds = [(f.key_frame, int(f.pict_type)) for f in container.decode(stream)]
        assert all(k == (n % 4 == 0) for n, (k, _) in enumerate(kinds)), kinds
        assert all(t != int(av.video.frame.PictureType.B) for _, t in kinds), kinds
    assert "complete: nothing to do" in " ".join(run(av1_dataset, dest, "--codec", codec, "--gop", "4").stderr.split())
    hints = [json.loads(subprocess.run([sys.executable, "-m", "dali_stream", "inspect", "--json", str(root)],
                                       capture_output=True, text=True, timeout=300).stdout)["nvdec_hint"]
             for root in (av1_dataset, dest)]
    assert "observation.images.wrist (av1)" in hints[0] and "dali-stream transcode" in hints[0], hints
    assert hints[1] is None  # inspect sends the user here, and not again


@pytest.fixture(scope="module")
def many_files(tmp_path_factory):
    """Two AV1 cameras of one episode a file, eight files each: after the first file is done, enough is left that
    the kill lands mid-run even on a loaded machine (with four files the run ended before it, once)."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=8, min_length=12, max_length=20, gop=2, episodes_per_file=1, recorder="lerobot",
                      cameras=parse_cameras("front:av1,wrist:av1"), seed=5)
    return write_sample(tmp_path_factory.mktemp("ds") / "many", spec)


def test_a_run_killed_midway_continues_to_the_same_dataset(many_files, tmp_path):
    """SIGKILL after the first camera file; the same command again ends with the files of an uninterrupted run, and
    no file ever held a final name before it was complete."""
    import av

    av1_dataset = many_files
    whole = tmp_path / "whole"
    run(av1_dataset, whole, "--workers", "1")
    dest = tmp_path / "killed"
    proc = subprocess.Popen([*TRANSCODE, str(av1_dataset), str(dest), "--workers", "1"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    manifest = dest / ".transcode.json"
    while time.monotonic() < deadline and proc.poll() is None:
        if manifest.exists() and json.loads(manifest.read_text())["done"]:
            break
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 5  # its encoding processes end with it, writing nothing more
    while time.monotonic() < deadline and _writing(dest):
        time.sleep(0.1)
    assert not _writing(dest), "an encoding process outlived the command"
    assert not (dest / "meta/info.json").exists(), "killed after the end: the test did not test a resume"
    for path in dest.rglob("*.mp4"):  # every final name a whole file
        with av.open(str(path)) as container:
            assert sum(1 for _ in container.decode(video=0)) > 0, path
    run(av1_dataset, dest, "--workers", "1")
    assert digests(dest, "videos") == digests(whole, "videos")
    assert digests(dest, "meta") == digests(whole, "meta") and digests(dest, "data") == digests(whole, "data")


def test_a_remote_source_transcodes_as_the_local_one(av1_dataset, tmp_path):
    """SRC over HTTP (a real server on loopback): the same files as from the folder."""
    from tests.support.httpserver import Server

    run(av1_dataset, tmp_path / "local", "--workers", "1")
    with Server(av1_dataset) as url:
        run(url, tmp_path / "remote", "--workers", "1")
    for part in ("videos", "data", "meta"):
        assert digests(tmp_path / "remote", part) == digests(tmp_path / "local", part), part


def _writing(dest: Path) -> list[int]:
    """Processes whose command line names `dest` (the command and its encoding processes)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and str(dest).encode() in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
        except OSError:
            pass
    return found


def test_refusals_name_what_is_wrong(av1_dataset, tmp_path):
    """A DST holding something else, a DST transcoded with other settings, a quality below the floor, an unknown
    camera: one error line each, naming the value and the fix."""
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    proc = run(av1_dataset, other, check=False)
    assert proc.returncode == 2 and "not a transcode" in proc.stderr and "new or empty folder" in proc.stderr
    dest = tmp_path / "low"
    proc = run(av1_dataset, dest, "--quality", "51", "--psnr-floor", "45", check=False)
    assert proc.returncode == 2 and "below --psnr-floor 45" in proc.stderr and "camera 'observation.images" in proc.stderr
    assert "episode" in proc.stderr and not (dest / "meta/info.json").exists()
    proc = run(av1_dataset, dest, "--codec", "hevc", check=False)
    assert proc.returncode == 2 and "other settings (codec, quality" in proc.stderr, proc.stderr
    proc = run(av1_dataset, tmp_path / "x", "--cameras", "observation.images.nope", check=False)
    assert proc.returncode == 2 and "not cameras of" in proc.stderr
    proc = run(av1_dataset, tmp_path / "y", "--gop", "0", check=False)
    assert proc.returncode == 2 and "--gop must be at least 1" in proc.stderr


def test_a_drive_too_small_is_refused_before_any_work(av1_dataset, tmp_path):
    """DST on a drive with less room than the copies and the new cameras may need: refused up front, naming the
    free and the needed space and the fix, nothing written. The small drive is a real 64 KiB tmpfs, mounted in a
    user and mount namespace of the command's own (`unshare`), so no privilege is needed."""
    import shlex
    import shutil

    unshare = shutil.which("unshare")
    small = tmp_path / "small"
    small.mkdir()
    probe = subprocess.run([unshare or "unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k none {small}"],
                           capture_output=True, text=True) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("no unprivileged mount namespaces here (unshare -rm): "
                    f"{probe.stderr.strip() if probe is not None else 'unshare not found'}")
    command = " ".join(shlex.quote(str(a)) for a in [*TRANSCODE, av1_dataset, small / "out"])
    proc = subprocess.run([unshare, "-rm", "sh", "-c", f"mount -t tmpfs -o size=64k none {small} && {command}; "
                           f"code=$?; find {small} -type f; exit $code"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])})
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "GiB free" in proc.stderr and "may write up to" in proc.stderr and "pass another DST" in proc.stderr
    assert proc.stdout.strip() == "", f"files written on the small drive:\n{proc.stdout}"


def test_diagnose_names_the_command_on_a_gpu_without_av1_nvdec(av1_dataset):
    """diagnose's dataset probe on an H100 (a node as the probe would find it; the routing rules real): the AV1
    cameras named with the command; on an L40S, whose NVDEC decodes AV1, nothing to say."""
    from dali_stream.decode.gpus import lookup
    from dali_stream.decode.node import Node
    from dali_stream.tools.diagnose import probe_software
    from dali_stream.tools.diagnose_dataset import probe_dataset

    software = probe_software()
    h100 = probe_dataset(str(av1_dataset), software, Node(1, gpu=lookup("NVIDIA H100 80GB HBM3", (9, 0))), False)
    hint = h100["nvdec_hint"]
    assert "H100" in hint and "observation.images.front (av1)" in hint and "observation.images.top" not in hint
    assert f"dali-stream transcode {av1_dataset} DST" in hint
    l40s = probe_dataset(str(av1_dataset), software, Node(1, gpu=lookup("NVIDIA L40S", (8, 9))), False)
    assert l40s["nvdec_hint"] is None


def test_the_psnr_of_identical_and_different_pictures():
    from dali_stream.tools.transcode_video import psnr

    a = np.full((4, 4, 3), 100, np.uint8)
    assert psnr(a, a) == 100.0
    assert abs(psnr(a, a + 1) - 48.13) < 0.01  # an error of one level everywhere
