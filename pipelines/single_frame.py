"""One frame from every camera plus the current state and action: the plain behaviour-cloning sample.

    python pipelines/single_frame.py [DATASET] [--batches 20 --batch-size 8 --decode auto]
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines._common import run  # noqa: E402


def make_loader(source: str, **kwargs):
    """StreamLoader with no windows: images (B, C, H, W), tabular features (B, ...)."""
    from dali_stream import StreamLoader

    return StreamLoader(source, **kwargs)


if __name__ == "__main__":
    run(__doc__, make_loader)
