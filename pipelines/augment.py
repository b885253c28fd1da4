"""Augmentation inside the DALI graph, deterministic under resume: a random resized crop and colour jitter.

    python pipelines/augment.py [DATASET] [--batches 20 --batch-size 8 --decode auto --tolerance-s 1e-4]

`random_resized_crop_and_jitter` (installed with the package: `dali_stream.augment`) is a StreamLoader
`augment=` hook: on each camera's decoded frames inside the DALI graph, every random parameter drawn from the
plan, so a resumed run augments exactly as the uninterrupted one did.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dali_stream.augment import random_resized_crop_and_jitter  # noqa: E402 - the installed recipe
from pipelines._common import run  # noqa: E402


def make_loader(source: str, **kwargs):
    """StreamLoader with `random_resized_crop_and_jitter` on every camera."""
    from dali_stream import StreamLoader

    return StreamLoader(source, augment=random_resized_crop_and_jitter, **kwargs)


if __name__ == "__main__":
    run(__doc__, make_loader)
