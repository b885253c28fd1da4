"""bench with the node-local disk tier on (`disk_cache_dir`): epoch 1 of a fresh loader (fetching from the remote,
writing the tier) against epoch 2 (reading it), in a new folder under the one given (removed after), with the bytes
each epoch read from the remote and from the disk (docs/remote.md#the-node-local-disk-tier)."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from typing import Any


def disk_epochs(cfg, deltas, decode, progress=None) -> dict[str, Any]:
    """Epochs 1 and 2 of a new loader of `cfg` whose disk tier starts empty: samples/s, remote and disk bytes."""
    from ..loader import StreamLoader

    folder = tempfile.mkdtemp(prefix="bench-", dir=cfg.loader.disk_cache_dir)
    settings = dataclasses.replace(cfg.loader, disk_cache_dir=folder)
    epochs = []
    try:
        with StreamLoader(cfg.dataset, config=settings, delta_timestamps=deltas, decode=decode,
                          drop_last=True) as loader:
            if loader.remote_stats is None:
                return {"error": "the dataset is local: the disk tier keeps remote datasets' bytes"}
            for epoch in (1, 2):
                if progress:
                    progress(f"disk tier, epoch {epoch}")
                before = dict(loader.remote_stats)
                t0, samples = time.perf_counter(), 0
                for batch in loader:
                    samples += len(batch["task"])
                seconds = time.perf_counter() - t0
                after = loader.remote_stats
                epochs.append({"epoch": epoch, "samples": samples, "seconds": seconds,
                               "samples_per_s": samples / seconds if seconds > 0 else 0.0,
                               "remote_bytes": after["bytes"] - before["bytes"],
                               "remote_requests": after["requests"] - before["requests"],
                               "disk_bytes_read": after["disk_bytes_read"] - before["disk_bytes_read"],
                               "disk_bytes_written": after["disk_bytes_written"] - before["disk_bytes_written"]})
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    first, second = epochs[0]["samples_per_s"], epochs[1]["samples_per_s"]
    return {"epochs": epochs, "epoch2_over_epoch1": second / first if first else None,
            "disk_cache_dir": cfg.loader.disk_cache_dir}


def disk_text(got: dict[str, Any]) -> str:
    """One line for the console."""
    if got.get("error"):
        return f"disk tier: {got['error']}"
    one, two = got["epochs"]
    ratio = got["epoch2_over_epoch1"]
    return (f"disk tier: epoch 1 {one['samples_per_s']:.1f} samples/s ({one['remote_bytes'] / 2**20:.1f} MiB from "
            f"the remote), epoch 2 {two['samples_per_s']:.1f} samples/s ({two['remote_bytes'] / 2**20:.1f} MiB from "
            f"the remote, {two['disk_bytes_read'] / 2**20:.1f} MiB from the disk)"
            + (f": {ratio:.2f}x" if ratio else ""))
