"""Pieces the benchmark scripts share (each runs as `python benchmarks/NAME.py`, which puts this folder on
`sys.path`)."""

from __future__ import annotations

import json
import os
from pathlib import Path


def write_result(out: str | Path, result: dict) -> str:
    """`result` as indented JSON into the file `out` (its folder made if missing); returns the JSON text."""
    text = json.dumps(result, indent=2)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text)
    return text


def gpu_test_dataset() -> Path:
    """The dataset of tests/test_gpu.py's `gpu_dataset` fixture (192x160, GOP 16, h264/hevc/av1/vp9 cameras,
    8 episodes of 20-60 frames), written on first use at $GPU_TEST_DATA (default .demo/four-codecs-192x160)."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    path = Path(os.environ.get("GPU_TEST_DATA", ".demo/four-codecs-192x160"))
    if not (path / "meta/info.json").exists():
        write_sample(path, SampleSpec(episodes=8, min_length=20, max_length=60, height=160, width=192, gop=16,
                                      episodes_per_file=3, seed=3,
                                      cameras=parse_cameras("front:h264,side:hevc,wrist:av1,top:vp9")))
    return path
