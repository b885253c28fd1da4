"""Current frames of every camera plus a chunk of future actions (ACT / diffusion-policy style).

    python pipelines/action_chunk.py [DATASET] [--batches 20 --batch-size 8 --decode auto]

`action` is (B, chunk, D) from now on; steps past the episode end repeat its last action and are flagged in
`action_is_pad`, which a policy's loss should mask.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines._common import run, video_keys  # noqa: E402

CHUNK = 16


def make_loader(source: str, chunk: int = CHUNK, **kwargs):
    from dali_stream import StreamLoader

    fps, _ = video_keys(source)
    return StreamLoader(source, delta_timestamps={"action": [i / fps for i in range(chunk)]}, **kwargs)


if __name__ == "__main__":
    run(__doc__, make_loader)
