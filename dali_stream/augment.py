"""A ready augmentation for `StreamLoader(augment=...)`: a random resized crop and colour jitter inside the DALI
graph, deterministic under resume.

    from dali_stream import StreamLoader
    from dali_stream.augment import random_resized_crop_and_jitter
    loader = StreamLoader("lerobot/pusht", augment=random_resized_crop_and_jitter)

It runs on each camera's decoded frames inside the DALI graph (on the GPU where the camera is), and draws every
random parameter from `rand`, the plan-seeded uniform numbers dali_stream feeds per sample and camera, never from
DALI's own random operators: a run resumed from a state augments exactly as the uninterrupted run did. A window of
frames (a camera with `delta_timestamps`) gets one crop and one jitter for all its steps. Write your own hook the
same way (docs/sampling.md, "Augmentation").
"""

from __future__ import annotations

AREA = (0.6, 1.0)  # fraction of the image the crop keeps
RATIO = (3 / 4, 4 / 3)  # crop aspect ratio, relative to the image's
JITTER = 0.2  # brightness, contrast and saturation in [1 - JITTER, 1 + JITTER]
HUE_DEGREES = 10.0


def random_resized_crop_and_jitter(video, key: str, rand):
    """`augment=` hook: crop a random window (AREA, RATIO) resized back to the frame's size, then jitter colour."""
    from nvidia.dali import fn, types
    from nvidia.dali import math as dmath

    area = AREA[0] + (AREA[1] - AREA[0]) * rand[0]
    ratio = RATIO[0] + (RATIO[1] - RATIO[0]) * rand[1]
    h = dmath.min(dmath.sqrt(area / ratio), 1.0)  # relative height and width of the crop
    w = dmath.min(dmath.sqrt(area * ratio), 1.0)
    y0, x0 = (1.0 - h) * rand[2], (1.0 - w) * rand[3]
    shape = video.shape(dtype=types.FLOAT)  # (F, H, W, C): resize back to the frame's own size
    video = fn.resize(video, roi_start=fn.stack(y0, x0), roi_end=fn.stack(y0 + h, x0 + w), roi_relative=True,
                      size=shape[1:3])
    jitter = [1.0 - JITTER + 2 * JITTER * rand[i] for i in (4, 5, 6)]
    return fn.color_twist(video, brightness=jitter[0], contrast=jitter[1], saturation=jitter[2],
                          hue=(rand[7] - 0.5) * 2 * HUE_DEGREES)
