"""The bundled benchmark datasets `bench --sample` writes (and checks stale): realistic two-camera samples as lerobot
records them, and mixtures of embodiments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from .sample_data import SAMPLE_KEY

# ---- the bundled benchmark datasets ----------------------------------------------------------------------
# Realistic samples (the default): two 640x480 cameras, 20 episodes of 10-20 s at 30 fps, as lerobot records
# them: lerobot's encoder settings (crf 30, g=2: a keyframe every other frame) on camera-like frames
# (`scene.Scene`, 6.4-6.9 KB a frame in AV1 where lerobot's aloha datasets take 5.5-6.6). "av1" is lerobot's
# default codec, "h264" the other common choice (H.264 with B-frames). "toy" is the old small sample: 200
# episodes of 20-40 frames, three cameras (h264, hevc, av1), GOP 30, the smooth test pattern.
BENCH_SAMPLES = {
    # the default: a first number within two minutes of a fresh 2-core machine (written in ~40 s there)
    "av1-quick": dict(episodes=5, min_length=120, max_length=200, cameras="front:av1,wrist:av1", gop=2,
                      episodes_per_file=5, content="scene", crf=30),
    "av1": dict(episodes=20, min_length=300, max_length=600, cameras="front:av1,wrist:av1", gop=2,
                episodes_per_file=10, content="scene", crf=30),
    "h264": dict(episodes=20, min_length=300, max_length=600, cameras="front:h264,wrist:h264", gop=2,
                 episodes_per_file=10, content="scene", crf=30),
    "toy": dict(episodes=200, min_length=20, max_length=40, cameras="front:h264,side:hevc,wrist:av1", gop=30,
                episodes_per_file=50),
}
DEFAULT_SAMPLE = "av1-quick"
# Mixtures of samples of different embodiments, for `bench` on a mixture (`bench_mixture`): members written as
# their own samples under one folder with a mixture file beside them. "mixture-quick": av1-quick's two-camera
# AV1 arm at 30 fps, 6-dof, and a one-camera H.264 arm at 10 fps, 7-dof (its episodes painted from 100).
# "mixture" (the results' mixture, benchmarks/mixture.py): the same embodiments with 20 episodes each, more than a
# pool holds, so a batch draws each sample from another episode, alone as in the mixture.
BENCH_MIXTURES = {
    "mixture-quick": {"arm-av1": BENCH_SAMPLES["av1-quick"],
                      "arm-h264": dict(episodes=6, min_length=40, max_length=70, cameras="front:h264", gop=2,
                                       episodes_per_file=6, content="scene", crf=30, fps=10, state_dim=7,
                                       id_offset=100)},
    "mixture": {"arm-av1": dict(episodes=20, min_length=60, max_length=100, cameras="front:av1,wrist:av1", gop=2,
                                episodes_per_file=10, content="scene", crf=30),
                "arm-h264": dict(episodes=20, min_length=30, max_length=50, cameras="front:h264", gop=2,
                                 episodes_per_file=10, content="scene", crf=30, fps=10, state_dim=7, id_offset=100)},
}


def bench_sample_spec(variant: str, settings: Mapping[str, Any] | None = None):
    """The SampleSpec of benchmark sample `variant` (or of the given `settings`: a mixture's member)."""
    from .sample_data import SampleSpec, parse_cameras

    if settings is None and variant not in BENCH_SAMPLES:
        from ..errors import ConfigError

        raise ConfigError(f"--sample must be one of {sorted([*BENCH_SAMPLES, *BENCH_MIXTURES])}. Found: {variant!r}")
    spec: dict[str, Any] = dict(settings if settings is not None else BENCH_SAMPLES[variant])
    return SampleSpec(height=480, width=640, seed=7, **{**spec, "cameras": parse_cameras(spec["cameras"])})


def mixture_sample(variant: str, write) -> str:
    """The mixture file of benchmark mixture `variant` (`BENCH_MIXTURES`), its members written first where missing or
    stale (`write(path, spec, why)`); returns the file's path."""
    root = Path(default_dataset(variant))
    members = BENCH_MIXTURES[variant]
    for name, settings in members.items():
        spec = bench_sample_spec(variant, settings)
        why = stale_sample(root / name, spec)
        if why is not None:
            write(root / name, spec, why)
    path = root / "mixture.json"
    path.write_text(json.dumps({"members": [{"source": name, "name": name} for name in members]}, indent=2))
    return str(path)


def default_dataset(variant: str) -> str:
    return f".demo/bench-{variant}"


def stale_sample(path: str | Path, spec) -> str | None:
    """Why the sample at `path` must be written (again) for `spec` (a `SampleSpec`, e.g. `bench_sample_spec`'s):
    missing, or written with other settings (an older dali_stream's, which a run would otherwise measure
    silently); None when it is current."""
    info_path = Path(path) / "meta/info.json"
    if not info_path.exists():
        return "not written yet"
    try:
        written = json.loads(info_path.read_text()).get(SAMPLE_KEY)
    except (OSError, ValueError) as err:
        return f"its meta/info.json cannot be read ({err})"
    wanted = spec.record()
    if not isinstance(written, dict):
        return "it was written by an older dali_stream, which did not record its settings"
    changed = sorted(k for k in wanted if written.get(k) != wanted[k])  # the record's other keys are outcomes
    if changed:
        return f"it was written with other settings ({', '.join(changed)} differ from this version's)"
    return None
