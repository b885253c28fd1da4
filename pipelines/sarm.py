"""SARM-style progress window: 8 steps spaced 1 s (the last 7 seconds and now) on every camera and the state.

    python pipelines/sarm.py [DATASET] [--batches 20 --batch-size 8 --decode auto]

Steps before the episode start are clamped to its first frame and flagged in `<key>_is_pad`.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines._common import run, video_keys  # noqa: E402

STEPS = 8
SPACING_S = 1.0


def delta_timestamps(source: str, steps: int = STEPS, spacing_s: float = SPACING_S) -> dict[str, list[float]]:
    _, cameras = video_keys(source)
    offsets = [-(steps - 1 - i) * spacing_s for i in range(steps)]
    return {**{key: offsets for key in cameras}, "observation.state": offsets}


def make_loader(source: str, steps: int = STEPS, spacing_s: float = SPACING_S, **kwargs):
    """Every camera (B, steps, C, H, W) and observation.state (B, steps, D), with `*_is_pad` (B, steps)."""
    from dali_stream import StreamLoader

    return StreamLoader(source, delta_timestamps=delta_timestamps(source, steps, spacing_s), **kwargs)


if __name__ == "__main__":
    run(__doc__, make_loader)
