"""Frame ids painted into pixels, so a test can tell exactly which frame a decoder returned.

The top two rows of blocks carry 16 bits each: row 0 the episode index, row 1 the frame index inside the
episode (least significant bit leftmost). A block is `block_size(width)` pixels square, light for 1 and
dark for 0, aligned to the 4:2:0 chroma grid, so ids survive lossy coding at any sane quality. The rest
of the image is a smooth pattern that moves from frame to frame, which gives the encoder real work.
"""

from __future__ import annotations

import numpy as np

BITS = 16
LIGHT, DARK = 235, 16


def block_size(width: int) -> int:
    return max(4, (width // BITS) & ~1)


def check_size(height: int, width: int) -> None:
    b = block_size(width)
    if width < BITS * 4 or height < 3 * b or height % 2 or width % 2:
        raise ValueError(
            f"resolution {height}x{width} cannot carry painted ids: need even sizes, width >= {BITS * 4} and "
            f"height >= {3 * b} (three rows of {b}-pixel blocks)"
        )


def render(height: int, width: int, episode: int, frame: int, camera: int = 0) -> np.ndarray:
    """An (H, W, 3) uint8 RGB image carrying (episode, frame)."""
    if not (0 <= episode < 2**BITS and 0 <= frame < 2**BITS):
        raise ValueError(f"ids must fit in {BITS} bits: episode={episode}, frame={frame}")
    y = np.arange(height, dtype=np.float32)[:, None]
    x = np.arange(width, dtype=np.float32)[None, :]
    phase = 0.15 * frame + 0.9 * episode + 1.7 * camera
    base = 128 + 60 * np.sin(x / 11.0 + phase) * np.cos(y / 13.0 - 0.5 * phase)
    img = np.empty((height, width, 3), dtype=np.uint8)
    for c, shift in enumerate((0.0, 2.1, 4.2)):
        img[..., c] = np.clip(base + 40 * np.sin(shift + phase + x / 29.0), 0, 255).astype(np.uint8)
    b = block_size(width)
    for row, value in enumerate((episode, frame)):
        for bit in range(BITS):
            img[row * b:(row + 1) * b, bit * b:(bit + 1) * b] = LIGHT if (value >> bit) & 1 else DARK
    return img


def read_ids(image) -> tuple[int, int]:
    """(episode, frame) painted in an image: HWC or CHW, uint8 or float in [0, 1], numpy or torch."""
    arr = image.detach().cpu().numpy() if hasattr(image, "detach") else np.asarray(image)
    if arr.ndim != 3:
        raise ValueError(f"expected one image (3 dims), got shape {arr.shape}")
    if arr.shape[0] in (1, 3) and arr.shape[-1] not in (1, 3):
        arr = np.moveaxis(arr, 0, -1)
    arr = arr.astype(np.float32)
    if arr.max() <= 1.0:
        arr = arr * 255.0
    luma = arr.mean(axis=-1)
    b = block_size(luma.shape[1])
    inset = max(1, b // 4)
    values = []
    for row in range(2):
        v = 0
        for bit in range(BITS):
            cell = luma[row * b + inset:(row + 1) * b - inset, bit * b + inset:(bit + 1) * b - inset]
            if cell.mean() > (LIGHT + DARK) / 2:
                v |= 1 << bit
        values.append(v)
    return values[0], values[1]
