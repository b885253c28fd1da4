"""Defaults of the sample-data writer, standard library only: `sample_data.SampleSpec` and the
`dali-stream make-sample` parser share them (the CLI builds its parser without importing numpy)."""

from typing import Any

SAMPLE_DEFAULTS: dict[str, Any] = {
    "episodes": 36,
    "min_length": 40,
    "max_length": 90,
    "cameras": "front:h264,wrist:av1,top:vp9",
    "height": 96,
    "width": 128,
    "fps": 30,
    "gop": 30,
    "episodes_per_file": 8,
    "chunks_size": 1000,
    "tasks": 3,
    "seed": 0,
    "content": "pattern",
    "crf": None,
    "recorder": "dali_stream",
    "pix_fmt": "yuv420p",
    "state_dim": 6,
    "id_offset": 0,
}
# What the frames show: "pattern", `paint.render`'s smooth moving pattern (fast to write, ids readable at every
# size the tests use); "scene", `scene.Scene`'s camera-like room, which compresses and decodes like real robot
# footage (the benchmark samples).
CONTENTS = ("pattern", "scene")
# How the video files are written: "dali_stream", one continuously encoded stream per file (episodes start
# anywhere in a GOP); "lerobot", as lerobot 0.6.1's recorder writes them (`lerobot_recorder`: an encode per
# episode with lerobot's PyAV options, appended through FFmpeg's concat demuxer); "encoder-defaults", one
# continuous encode per file with each encoder's own defaults (`default_recorder`: open GOPs, alt-ref and hidden
# frames, as recordings made outside lerobot come).
RECORDERS = ("dali_stream", "lerobot", "encoder-defaults")
PIX_FMTS = ("yuv420p", "yuv444p")


def painted_offset(info: dict) -> int:
    """What a sample dataset adds to the episode ids it paints (`SampleSpec.id_offset`, recorded in its info.json
    under "dali_stream_sample"): 0 for other datasets and older samples."""
    record = info.get("dali_stream_sample") or {}
    return int(record.get("id_offset", 0)) if isinstance(record, dict) else 0
