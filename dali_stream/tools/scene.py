"""Camera-like frames for the benchmark samples: what a codec sees in a robot's camera, with painted ids.

`paint.render`'s smooth pattern compresses to under half of what real robot footage does (AV1 at lerobot's
settings, crf 30 and g=2, 640x480: 2.9 KB a frame), so it decodes faster than real data and flatters every
cost the loader adds per frame. A `Scene` is a textured room seen by a moving camera: a background of
several octaves of value noise under a soft light, six textured objects, two textured "arms" crossing it,
the view panning slowly (camera 0, a fixed camera that shakes) or fast (other cameras, wrist-like). At the
same settings it takes 5.8-6.9 KB a frame (one 300-frame episode: 5.8 camera 0, 6.6 camera 1; the AV1 bench
sample's files: 6.4-6.9), where lerobot's aloha datasets (4 cameras 640x480, AV1 crf 30, g=2) take 5.5-6.6
(lerobot's benchmarks/video/README.md: aloha_static_battery 770.5 MB for 29,400 frames x 4 cameras,
aloha_static_vinh_cup_left 1.1 GB for 50,000 x 4), and a random frame costs 1.08-1.17 ms to decode against
the pattern's 0.83 (torchcodec, one thread, 2-core VM; H.264 at crf 30: 3.1-3.3 KB, 1.4 ms).

Everything is a pure function of (seed, episode, camera, frame): the same sample is written on every
machine. `paint.paint_ids` draws the ids on top, so tests and `verify` read them as on any sample frame.
"""

from __future__ import annotations

import numpy as np

from . import paint

MARGIN = 64  # pixels of background around the view, for the camera to pan over
ARM = (90, 60)  # height, width of an arm in pixels at 640x480 (scaled with the frame)


def _upsample_matrix(n_out: int, n_in: int) -> np.ndarray:
    """(n_out, n_in) linear interpolation weights: M @ grid resamples a grid's rows to n_out."""
    pos = np.linspace(0.0, n_in - 1.0, n_out)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, n_in - 1)
    w = (pos - lo).astype(np.float32)
    m = np.zeros((n_out, n_in), np.float32)
    np.add.at(m, (np.arange(n_out), lo), 1.0 - w)
    np.add.at(m, (np.arange(n_out), hi), w)
    return m


def value_noise(rng: np.random.Generator, height: int, width: int, cells: tuple[int, ...],
                amplitudes: tuple[float, ...]) -> np.ndarray:
    """(height, width) float32 texture: for each octave a grid of normal values every `cells[i]` pixels,
    interpolated bilinearly and scaled by `amplitudes[i]`, summed."""
    out = np.zeros((height, width), np.float32)
    for cell, amplitude in zip(cells, amplitudes):
        grid = rng.standard_normal((height // cell + 2, width // cell + 2)).astype(np.float32)
        out += amplitude * (_upsample_matrix(height, grid.shape[0]) @ grid @ _upsample_matrix(width, grid.shape[1]).T)
    return out


class Scene:
    """One camera's view during one episode; `frame(k)` is frame k, with (episode, k) painted."""

    def __init__(self, height: int, width: int, episode: int, camera: int, seed: int = 0):
        paint.check_size(height, width)
        rng = np.random.default_rng([seed, episode, camera])
        scale = min(height / 480, width / 640)
        self.height, self.width, self.episode = height, width, episode
        self.margin = max(2, int(MARGIN * scale))
        H, W = height + 2 * self.margin, width + 2 * self.margin
        cells = tuple(max(2, int(c * scale)) for c in (96, 32, 8, 3))
        texture = value_noise(rng, H, W, cells, (30.0, 18.0, 8.0, 4.0))
        y = np.linspace(-1.0, 1.0, H, dtype=np.float32)[:, None]
        x = np.linspace(-1.0, 1.0, W, dtype=np.float32)[None, :]
        light = 40.0 * (1.0 - 0.5 * (x * x + y * y))
        tint = rng.uniform(0.7, 1.2, 3).astype(np.float32)
        canvas = np.empty((H, W, 3), np.float32)
        for c in range(3):
            canvas[..., c] = (110.0 + light + texture + value_noise(rng, H, W, cells[1:3], (12.0, 6.0))) * tint[c]
        for _ in range(6):  # objects on the table: coloured, with a texture of their own
            oh, ow = (int(v) for v in rng.integers(max(2, int(30 * scale)), max(3, int(120 * scale)), 2))
            oy, ox = int(rng.integers(0, H - oh)), int(rng.integers(0, W - ow))
            colour = rng.uniform(30.0, 220.0, 3).astype(np.float32)
            canvas[oy:oy + oh, ox:ox + ow] = colour + value_noise(rng, oh, ow, cells[2:], (8.0, 3.0))[..., None]
        self.canvas = np.clip(canvas, 0, 255).astype(np.uint8)
        ah, aw = max(2, int(ARM[0] * scale)), max(2, int(ARM[1] * scale))
        self.arms = [np.clip(rng.uniform(60.0, 200.0, 3).astype(np.float32)
                             + value_noise(rng, ah, aw, cells[2:], (12.0, 6.0))[..., None], 0, 255).astype(np.uint8)
                     for _ in range(2)]
        self.phase = rng.uniform(0.0, 2 * np.pi, 6)
        self.speed = 0.03 if camera == 0 else 0.08  # radians of the pan's path a frame

    def frame(self, k: int) -> np.ndarray:
        """(H, W, 3) uint8 RGB: the view at frame k, the arms in place, (episode, k) painted."""
        p, s, m = self.phase, self.speed, self.margin
        dy = int(m + 0.8 * m * np.sin(s * k + p[0]))
        dx = int(m + 0.8 * m * np.sin(0.7 * s * k + p[1]))
        img = self.canvas[dy:dy + self.height, dx:dx + self.width].copy()
        for a, arm in enumerate(self.arms):
            ah, aw = arm.shape[:2]
            ay = int((self.height - ah) * (0.5 + 0.45 * np.sin(0.05 * k + p[2 + 2 * a])))
            ax = int((self.width - aw) * (0.5 + 0.45 * np.sin(0.04 * k + p[3 + 2 * a])))
            img[ay:ay + ah, ax:ax + aw] = arm
        return paint.paint_ids(img, self.episode, k)
