"""Camera-like sample frames (`scene`): deterministic, carrying their ids, compressing like footage; the settings
that wrote a sample are recorded, and `bench` tells a stale default sample from a current one."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from dali_stream.tools import paint
from dali_stream.tools.bench_samples import bench_sample_spec, stale_sample
from dali_stream.tools.sample_data import SAMPLE_KEY, SampleSpec, parse_cameras, write_sample
from dali_stream.tools.sample_encode import encode_video
from dali_stream.tools.scene import Scene
from tests.support.console import dali_stream
from tests.tools.test_sample_data import _misread_frames


def test_a_scene_is_a_pure_function_of_its_ids_and_carries_them():
    a, b = Scene(96, 128, 5, 1, seed=3), Scene(96, 128, 5, 1, seed=3)
    for k in (0, 1, 17, 400):
        frame = a.frame(k)
        assert frame.shape == (96, 128, 3) and frame.dtype == np.uint8
        assert np.array_equal(frame, b.frame(k))
        assert paint.read_ids(frame) == (5, k)
    assert not np.array_equal(a.frame(3), a.frame(4))  # the view and the arms move
    for other in (Scene(96, 128, 5, 0, seed=3), Scene(96, 128, 6, 1, seed=3), Scene(96, 128, 5, 1, seed=4)):
        below_ids = slice(3 * paint.block_size(128), None)
        assert not np.array_equal(a.frame(3)[below_ids], other.frame(3)[below_ids])


def test_scene_frames_cost_the_encoder_about_what_robot_footage_does(tmp_path):
    """At lerobot's settings (AV1, crf 30, g=2) and 640x480 the smooth test pattern takes under 3.5 KB a frame
    and a scene over 5 (lerobot's aloha datasets: 5.5-6.6): the benchmark samples decode like real data."""
    ids = [(2, f) for f in range(24)]
    sizes = {}
    for content in ("pattern", "scene"):
        spec = SampleSpec(height=480, width=640, content=content, crf=30, gop=2)
        path = tmp_path / f"{content}.mp4"
        encode_video(path, spec.frames(ids, 1), "av1", 30, 2, 480, 640, crf=30)
        sizes[content] = path.stat().st_size / len(ids) / 1024
    assert sizes["pattern"] < 3.5 < 5.0 < sizes["scene"] < 9.0, sizes


def test_every_codec_of_a_scene_sample_carries_its_ids(tmp_path):
    spec = SampleSpec(episodes=4, height=96, width=128, cameras=parse_cameras("a:h264,b:hevc,c:av1,d:vp9"),
                      content="scene", crf=30)
    assert _misread_frames(write_sample(tmp_path / "s", spec)) == {"h264": 0, "hevc": 0, "av1": 0, "vp9": 0}


@pytest.mark.parametrize("field, value, message", [
    ("content", "noise", r"content must be one of \('pattern', 'scene'\)\. Found: 'noise'"),
    ("crf", 60, r"crf must be in \[0, 51\].*Found: 60"),
])
def test_bad_content_or_crf_is_refused(field, value, message):
    with pytest.raises(ValueError, match=message):
        SampleSpec(**{field: value})


def test_the_writer_records_its_settings_and_bench_tells_a_stale_sample(tmp_path):
    root = tmp_path / "s"
    assert stale_sample(root, SampleSpec()) == "not written yet"
    proc = dali_stream("make-sample", root, "--episodes", 2, "--min-length", 6, "--max-length", 8,
                       "--cameras", "front:av1", "--content", "scene", "--crf", 30)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    spec = SampleSpec(episodes=2, min_length=6, max_length=8, cameras=parse_cameras("front:av1"), content="scene",
                      crf=30)
    record = json.loads((root / "meta/info.json").read_text())[SAMPLE_KEY]
    assert record == spec.record() | {"careful_files": []}
    assert record["content"] == "scene" and record["cameras"] == "front:av1"
    assert stale_sample(root, spec) is None
    why = stale_sample(root, dataclasses.replace(spec, crf=None, content="pattern"))
    assert why == "it was written with other settings (content, crf differ from this version's)"
    info = json.loads((root / "meta/info.json").read_text())
    del info[SAMPLE_KEY]  # a sample from before the record existed
    (root / "meta/info.json").write_text(json.dumps(info))
    assert stale_sample(root, spec) == "it was written by an older dali_stream, which did not record its settings"


def test_the_benchmark_samples_are_scenes_at_lerobots_settings():
    for variant, codec in (("av1", "av1"), ("h264", "h264"), ("av1-quick", "av1")):
        spec = bench_sample_spec(variant)
        assert (spec.content, spec.crf, spec.gop, spec.height, spec.width) == ("scene", 30, 2, 480, 640)
        assert {c.codec for c in spec.cameras} == {codec} and len(spec.cameras) == 2
    quick = bench_sample_spec("av1-quick")  # the default: a first number within 2 minutes on 2 cores
    assert quick.episodes * quick.max_length * len(quick.cameras) <= 2000


def test_files_that_needed_careful_settings_are_recorded_and_bench_notes_them(tmp_path):
    """At crf 51 and 16x64 H.264 loses the painted ids (AV1 keeps them): the writer re-encodes those files
    with careful settings, which makes them unlike the rest, so it records them and bench says so."""
    spec = SampleSpec(episodes=3, min_length=6, max_length=9, height=16, width=64, gop=2, episodes_per_file=2,
                      cameras=parse_cameras("a:h264,b:av1"), content="scene", crf=51)
    root = write_sample(tmp_path / "s", spec)
    assert _misread_frames(root) == {"h264": 0, "av1": 0}
    record = json.loads((root / "meta/info.json").read_text())[SAMPLE_KEY]
    h264_files = sorted(str(p.relative_to(root)) for p in (root / "videos/observation.images.a").rglob("*.mp4"))
    assert record["careful_files"] == h264_files and len(h264_files) == 2
    assert stale_sample(root, spec) is None  # what the writing found is not a setting
    out = tmp_path / "bench"
    proc = dali_stream("bench", root, "--batch-size", 2, "--pool", 2, "--duration-s", 0.2, "--warmup-batches", 1,
                       "--no-baseline", "--no-limit", "--out-dir", out, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result,) = [json.loads(p.read_text()) for p in out.glob("bench-*.json")]
    assert result["sample"]["careful_files"] == h264_files
    assert any(n.startswith("2 video file(s) of this sample were encoded with careful settings") and h264_files[0] in n
               for n in result["notes"]), result["notes"]
