"""bench with the decoded-frame cache on (`frame_cache_bytes`, `frame_cache_dir`): what epoch 1 (decoding, filling
the cache) and epoch 2 (reading it) each deliver, whole epochs of a fresh loader on the configuration measured,
and how much of the decoded dataset the bound holds."""

from __future__ import annotations

import time
from typing import Any

VIDEO_COUNTERS = ("segment_bytes", "piece_bytes")  # the fetch counters of video bytes read


def decoded_bytes(meta, image_ops=None) -> int:
    """What every frame of every camera (video, or images stored in the tables) takes decoded, as the cache keeps it
    (`decode.frame_cache.frame_bytes`: at the size `image_ops` gives where the workers resize and crop them first,
    `Resolved.shaped_on_workers`, else (None) as decoded)."""
    from ..decode.frame_cache import frame_bytes

    video = sum(frame_bytes(c.height, c.width, image_ops, c.depth is not None) for c in meta.cameras.values())
    stored = sum(frame_bytes(h, w, image_ops)
                 for h, w in (meta.image_size(k) for k in meta.image_keys if k not in meta.depth_keys))
    return (video + stored) * meta.total_frames


def cache_epochs(cfg, meta, deltas, decode, progress=None) -> dict[str, Any]:
    """Epochs 1 and 2 of a new loader of `cfg` (its cache on): samples/s, frames decoded and video bytes read in
    each; the cache's counters after them."""
    from ..loader import StreamLoader

    loader = StreamLoader(cfg.dataset, config=cfg.loader, delta_timestamps=deltas, decode=decode, drop_last=True)
    whole = decoded_bytes(meta, loader.image_ops if loader.resolved.shaped_on_workers else None)
    epochs = []
    try:
        for epoch in (1, 2):
            if progress:
                progress(f"frame cache, epoch {epoch}")
            decoded, video = loader.stats()["build"]["decoded_frames"], _video_bytes(loader)
            t0, samples = time.perf_counter(), 0
            for batch in loader:
                samples += len(batch["task"])
            seconds = time.perf_counter() - t0
            epochs.append({"epoch": epoch, "samples": samples, "seconds": seconds,
                           "samples_per_s": samples / seconds if seconds > 0 else 0.0,
                           "frames_decoded": loader.stats()["build"]["decoded_frames"] - decoded,
                           "video_bytes_read": _video_bytes(loader) - video})
        frames = loader.stats()["frames"]
    finally:
        loader.close()
    first, second = epochs[0]["samples_per_s"], epochs[1]["samples_per_s"]
    return {"epochs": epochs, "epoch2_over_epoch1": second / first if first else None, "cache": frames,
            "decoded_bytes": whole, "frame_cache_bytes": cfg.loader.frame_cache_bytes,
            "frame_cache_dir": cfg.loader.frame_cache_dir,
            "fits_in_memory": min(1.0, cfg.loader.frame_cache_bytes / whole) if whole else None}


def _video_bytes(loader) -> int:
    fetched = loader.stats()["fetch"]
    return sum(int(fetched[k]) for k in VIDEO_COUNTERS)


def cache_text(got: dict[str, Any]) -> str:
    """One line for the console: the two epochs and what the bound holds."""
    one, two = got["epochs"]
    ratio = got["epoch2_over_epoch1"]
    held = got["fits_in_memory"]
    return (f"decoded-frame cache: epoch 1 {one['samples_per_s']:.1f} samples/s ({one['frames_decoded']} frames "
            f"decoded), epoch 2 {two['samples_per_s']:.1f} samples/s ({two['frames_decoded']} decoded, "
            f"{two['video_bytes_read'] / 2**20:.1f} MiB of video read)"
            + (f": {ratio:.1f}x" if ratio else "")
            + f"; the decoded dataset takes {got['decoded_bytes'] / 2**30:.2f} GiB"
            + (f", {held:.0%} of it fits frame_cache_bytes" if held is not None else "")
            + (f" (the rest spills to {got['frame_cache_dir']})" if got["frame_cache_dir"] and (held or 0) < 1 else ""))
