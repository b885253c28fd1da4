"""Images stored in the frame tables (lerobot's `dtype: image` features, recorded with `use_videos=False`): each row
holds one PNG (or JPEG) of the camera. `decode_image` turns its bytes into an (H, W, 3) uint8 picture through FFmpeg's
decoders (PyAV), as lerobot's dataset turns them into its tensors (PIL, RGB)."""

from __future__ import annotations

import numpy as np

from ..errors import DecodeError
from .colour import rgb24

_CODECS = ((b"\x89PNG\r\n\x1a\n", "png"), (b"\xff\xd8\xff", "mjpeg"))


def image_codec(data: bytes | memoryview) -> str | None:
    """FFmpeg's decoder of an encoded image by its first bytes: "png", "mjpeg" (JPEG), or None (neither)."""
    return next((name for magic, name in _CODECS if data[:len(magic)] == magic), None)


def decode_image(data: bytes | memoryview, where: str) -> np.ndarray:
    """(H, W, 3) uint8 RGB of one encoded image (bytes-like); `where` names it in an error (episode, frame, camera)."""
    import av

    codec = image_codec(data)
    if codec is None:
        raise DecodeError(f"{where}: the row's image is neither PNG nor JPEG (first bytes {bytes(data[:8])!r}); "
                          "re-download the data file, or convert the dataset to videos with lerobot-edit-dataset")
    try:
        frames = av.CodecContext.create(codec, "r").decode(av.Packet(data))
        return rgb24(frames[0])
    except (av.error.FFmpegError, IndexError) as exc:
        raise DecodeError(f"{where}: its {codec} image does not decode ({exc}); the data file is damaged: "
                          "re-download it") from exc
