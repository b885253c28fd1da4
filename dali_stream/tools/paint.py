"""Frame ids painted into pixels, so a test can tell exactly which frame a decoder returned.

The top three rows of blocks carry 16 bits each: row 0 the episode index, row 1 the frame index inside the
episode, row 2 a check value of both (CRC-32 of the pair, low 16 bits); least significant bit leftmost. A
block is `block_size(width)` pixels square, light for 1 and dark for 0, aligned to the 4:2:0 chroma grid.
Ids of 2^16 and more (the frames of an episode past 36 minutes at 30 fps) add a fourth row, the high bits (the
episode's bits 16-23 in its first 8 blocks, the frame's in the last 8), and their check value is the CRC-32 of
the whole ids (`check_value`): a reader takes the four rows only when that check holds, else the three.
The rest of the image is a smooth pattern that moves from frame to frame (`render`), which gives the encoder
real work, or any image of the caller's (`paint_ids`; the benchmark samples paint `scene`'s camera-like frames).

`read_ids` refuses rather than guesses: a block that is neither clearly light nor clearly dark, or ids that
do not match their check value (an encoder that copied a block from another frame, a corrupt stream, an
image that is not a painted frame), raise `UnreadableIds`.
"""

from __future__ import annotations

import struct
import zlib

import numpy as np

BITS = 16
ROWS = 3  # episode, frame, check
HIGH_BITS = 8  # the episode's and the frame's bits above BITS, in a fourth row when needed
LIGHT, DARK = 235, 16
MARGIN = 50  # a block's mean luma must be within this of LIGHT or DARK to count as a bit
MIN_HEIGHT = 16  # the smallest frame height every encoder of the sample writer accepts (x265 refuses 12)


class UnreadableIds(ValueError):
    """An image whose painted ids cannot be read with certainty."""


def check_value(episode: int, frame: int) -> int:
    if episode < 2**BITS and frame < 2**BITS:
        return zlib.crc32(struct.pack("<HH", episode, frame)) & 0xFFFF
    return zlib.crc32(struct.pack("<II", episode, frame)) & 0xFFFF


def block_size(width: int) -> int:
    return max(4, (width // BITS) & ~1)


def check_size(height: int, width: int) -> None:
    b = block_size(width)
    low = max(MIN_HEIGHT, ROWS * b)
    if width < BITS * 4 or height < low or height % 2 or width % 2:
        raise ValueError(
            f"resolution {height}x{width} cannot carry painted ids: need even sizes, width >= {BITS * 4} and "
            f"height >= {low} (three rows of {b}-pixel blocks, and at least {MIN_HEIGHT} for the encoders)"
        )


def render(height: int, width: int, episode: int, frame: int, camera: int = 0) -> np.ndarray:
    """An (H, W, 3) uint8 RGB image carrying (episode, frame) on a smooth moving pattern."""
    y = np.arange(height, dtype=np.float32)[:, None]
    x = np.arange(width, dtype=np.float32)[None, :]
    phase = 0.15 * frame + 0.9 * episode + 1.7 * camera
    base = 128 + 60 * np.sin(x / 11.0 + phase) * np.cos(y / 13.0 - 0.5 * phase)
    img = np.empty((height, width, 3), dtype=np.uint8)
    for c, shift in enumerate((0.0, 2.1, 4.2)):
        img[..., c] = np.clip(base + 40 * np.sin(shift + phase + x / 29.0), 0, 255).astype(np.uint8)
    return paint_ids(img, episode, frame)


def paint_ids(img: np.ndarray, episode: int, frame: int) -> np.ndarray:
    """Paint (episode, frame) into the top rows of blocks of an (H, W, 3) uint8 image, in place; returns it."""
    top = BITS + HIGH_BITS
    if not (0 <= episode < 2**top and 0 <= frame < 2**top):
        raise ValueError(f"ids must fit in {top} bits: episode={episode}, frame={frame}")
    b = block_size(img.shape[1])
    rows = [episode % 2**BITS, frame % 2**BITS, check_value(episode, frame)]
    if episode >= 2**BITS or frame >= 2**BITS:
        if img.shape[0] < (ROWS + 1) * b:
            raise ValueError(f"ids of {BITS} bits and more (episode={episode}, frame={frame}) need a fourth row of "
                             f"{b}-pixel blocks: the image is {img.shape[0]} pixels high; use a taller resolution")
        rows.append((episode >> BITS) | (frame >> BITS) << HIGH_BITS)
    for row, value in enumerate(rows):
        for bit in range(BITS):
            img[row * b:(row + 1) * b, bit * b:(bit + 1) * b] = LIGHT if (value >> bit) & 1 else DARK
    return img


def shows(image, ids) -> bool:
    """Whether the image's painted ids are `ids` (False too when they cannot be read with certainty)."""
    try:
        return read_ids(image) == ids
    except UnreadableIds:
        return False


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
    rows = ROWS + 1 if luma.shape[0] >= (ROWS + 1) * block_size(luma.shape[1]) else ROWS
    return ids_of(block_cells(luma, rows))


def block_cells(luma: np.ndarray, rows: int = ROWS) -> np.ndarray:
    """The mean luma inside each painted block of the top `rows` rows, (..., rows, 16), of images (..., H, W):
    one image's for `read_ids`, a batch's at once for a checker that reads many (`ids_of` each)."""
    b = block_size(luma.shape[-1])
    inset = max(1, b // 4)
    cells = luma[..., :rows * b, :BITS * b].reshape(*luma.shape[:-2], rows, b, BITS, b)
    return cells[..., inset:b - inset, :, inset:b - inset].mean(axis=(-3, -1))


def ids_of(cells) -> tuple[int, int]:
    """(episode, frame) from the mean luma of each painted block, (rows, 16): three rows, or four where the image
    is tall enough for the high bits' row. What `read_ids` reads an image through; a batch of frames on a GPU can
    average its blocks there and hand only these numbers over (benchmarks/gpu_first.py)."""
    cells = np.asarray(cells, dtype=np.float64)

    def row_value(row: int) -> int:
        v = 0
        for bit in range(BITS):
            cell = float(cells[row, bit])
            if DARK + MARGIN < cell < LIGHT - MARGIN:
                raise UnreadableIds(f"painted id block (row {row}, bit {bit}) has mean luma {cell:.0f}, neither "
                                    f"light ({LIGHT}) nor dark ({DARK}): the image is not a painted frame, or "
                                    "decoding damaged it")
            if cell > (LIGHT + DARK) / 2:
                v |= 1 << bit
        return v

    episode, frame, check = (row_value(row) for row in range(ROWS))
    if len(cells) > ROWS:  # a fourth row of high bits, taken only when the check value says so
        try:
            high = row_value(ROWS)
        except UnreadableIds:  # three rows: the picture goes on below them
            high = 0
        low_mask = 2**HIGH_BITS - 1
        wide = (episode | (high & low_mask) << BITS, frame | (high >> HIGH_BITS) << BITS)
        if high and check == check_value(*wide):
            return wide
    if check != check_value(episode, frame):
        raise UnreadableIds(f"painted ids read as (episode {episode}, frame {frame}) but their check value is "
                            f"{check}, not {check_value(episode, frame)}: a block came from another frame or the "
                            "stream is damaged")
    return episode, frame


# Depth cameras (`meta.depth`): their frames are 12-bit codes, encoded losslessly as lerobot's depth encoder does, so
# ids are carried as code values: the top half of a frame shows DEPTH_BASE + episode, the bottom half DEPTH_BASE +
# frame (each modulo DEPTH_SPAN), every pixel of a half the same.
DEPTH_BASE, DEPTH_SPAN = 64, 4000


def depth_codes(height: int, width: int, episode: int, frame: int) -> np.ndarray:
    """A depth camera's frame (episode, frame) as (H, W) uint16 codes."""
    out = np.empty((height, width), np.uint16)
    out[:height // 2] = DEPTH_BASE + episode % DEPTH_SPAN
    out[height // 2:] = DEPTH_BASE + frame % DEPTH_SPAN
    return out


def depth_ids(codes) -> tuple[int, int]:
    """(episode, frame) of a depth frame's codes, (H, W) or (1, H, W) (modulo DEPTH_SPAN); UnreadableIds where a
    half is not one value."""
    arr = np.asarray(codes).reshape(np.shape(codes)[-2:])
    top, bottom = arr[:len(arr) // 2], arr[len(arr) // 2:]
    if top.min() != top.max() or bottom.min() != bottom.max():
        raise UnreadableIds(f"a depth frame's halves are not one code each: top {top.min()}..{top.max()}, bottom "
                            f"{bottom.min()}..{bottom.max()}")
    return int(top.flat[0]) - DEPTH_BASE, int(bottom.flat[0]) - DEPTH_BASE


def depth_shows(codes, ids) -> bool:
    """Whether a depth frame's codes show `ids` (modulo DEPTH_SPAN; False where they cannot be read)."""
    try:
        return ids is not None and depth_ids(codes) == tuple(i % DEPTH_SPAN for i in ids)
    except UnreadableIds:
        return False


def frame_shows(frame, ids, depth: bool = False) -> bool:
    """Whether a frame PyAV decoded shows `ids`: an RGB camera's painted blocks, or a depth camera's codes."""
    if depth:
        from ..decode.depth import codes_of

        return depth_shows(codes_of(frame), ids)
    return shows(frame.to_ndarray(format="rgb24"), ids)
