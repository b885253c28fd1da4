"""`StreamLoader.stats()`: what each bounded structure holds now, its peak, its bound and the setting that sets
it (docs/memory.md), beside the fetch and decode counters. Read from the stages' own counters, but for the
fetched episodes' rows (a walk of the episodes held, under the store's lock: as many as `cache_bytes` holds), so it is
cheap enough to log every step."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..fetch.store_stats import ahead_now, held_now


def _part(held: int, peak: int | None, bound: int | None, setting: str, unit: str = "bytes", **more: Any) -> dict:
    return {"held": int(held), "peak": None if peak is None else int(peak),
            "bound": None if bound is None else int(bound),
            "setting": setting, "unit": unit, **more}


def loader_stats(st: Any) -> dict[str, Any]:
    """`StreamLoader.stats()` of the loader's stages `st` (`loader.assemble.Stages`).

    `bounded`: one entry per structure kept across batches (`held`, `peak` where it is tracked, `bound` (None:
    bounded through the setting named, not counted against a number), `setting`, `unit`; `fetched_episodes` also
    the `episodes` held, those `pinned` by batches in flight and the bytes of their table rows, `row_bytes`);
    `fetch`: the store's counters (`fetch.store_stats.StoreStats`, the episodes fetched counted, the table bytes
    read and row groups decoded, the image columns and bytes kept on the drive, the video files read without an MP4
    index and why, `unindexed`); `decoders`: CPU decoders opened and closed;
    `frames`: the decoded-frame cache's hits, misses and frames spilled to its folder, and the cameras it keeps with
    how (`cameras`; None: off);
    `episode_frames`: the open episodes' frames (`decode.open_episodes`: segments and frames decoded whole, asks
    refused for room; None: off); `engines`: each open-decoder engine's counters by route (`decode.engine`,
    `decode.process_engine`: threads or processes and their ids, samples, pictures, seconds by phase);
    `build`: what the batch builders did (`graph.batches`): frames the workers decoded (`decoded_frames`) and the
    seconds they took (`decode_s`, summed over threads), and per camera DALI decodes in the graph the samples it
    served, the streams it opened (one per joined stream, or per sample) and the frames its decoder worked through
    (`dali`); `transforms`: where `image_transforms` run (`in_processes`, `processes`, the running processes'
    `pids`; None: no transforms)."""
    store, decoders, frames, episodes, builder = st.store, st.decoders, st.frames, st.episodes, st.builder
    held = episodes.stats() if episodes is not None else None
    indexes, footers = store.indexes.files, store.tables.files
    groups = store.tables.groups
    counters = dataclasses.asdict(store.stats)
    counters["episodes"] = len(store.stats.episodes)
    counters["table_bytes_read"] = store.table_bytes_read
    counters["table_groups_read"] = store.tables.groups_read
    # images stored in the tables kept on the drive once the episode cache was full (`fetch.image_spill`)
    counters["image_columns_spilled"] = store.spill.columns if store.spill is not None else 0
    counters["image_bytes_spilled"] = store.spill.written_bytes if store.spill is not None else 0
    counters["unindexed"] = dict(store.indexes.unsupported)
    buffers, now = builder.buffers, held_now(store)
    return {
        "bounded": {
            "fetched_episodes": _part(store.bytes, store.stats.peak_bytes, store.capacity_bytes, "cache_bytes",
                                      evictions=store.stats.evictions, **now),
            "pieces_ahead": _part(store.pieces.ahead_bytes, store.stats.pieces_ahead_peak, None, "prefetch_batches",
                                  piece_limit=st.resolved.segment_bytes, **ahead_now(store.pieces)),
            "mp4_indexes": _part(indexes.nbytes, indexes.peak_bytes, indexes.capacity_bytes, "index_bytes",
                                 files=len(indexes), evictions=indexes.evictions),
            "table_footers": _part(footers.nbytes, footers.peak_bytes, footers.capacity_bytes, "footer_bytes",
                                   files=len(footers), evictions=footers.evictions),
            "shared_row_groups": _part(len(groups.memory), None, groups.memory.capacity, "table_cache_dir",
                                       "row groups", **{k: v for k, v in groups.stats().items() if k != "in_memory"}),
            "cpu_decoders": _part(decoders.alive, decoders.peak, decoders.capacity, "max_decoders", "decoders",
                                  idle=decoders.idle),
            "host_buffers": _part(buffers.nbytes, None, None, "prefetch_batches", allocated=buffers.allocated,
                                  reused=buffers.reused, keep=buffers.keep),
            "decoded_frames": _part(frames.bytes if frames else 0, None, frames.memory_bytes if frames else 0,
                                    "frame_cache_bytes", frames=frames.stats()["frames"] if frames else 0),
            "open_episode_frames": _part(held["held"] if held else 0, held["peak"] if held else 0,
                                         held["bound"] if held else 0, "episode_frames_bytes",
                                         segments=held["segments"] if held else 0),
        },
        "frames": {**frames.stats(), "cameras": dict(frames.labels)} if frames is not None else None,
        "episode_frames": held,
        "fetch": counters,
        "decoders": {"opened": decoders.opened, "closed": decoders.closed},
        "engines": {route.name: engine.stats() for route, engine in st.engines.items()},
        "build": {"decoded_frames": builder.decoded_frames, "decode_s": builder.decode_s,
                  "dali": {k: dict(zip(("samples", "streams", "frames_fed"), c)) for k, c in builder.dali_counts.items()}},
        "transforms": None if st.transforms is None else st.transforms.stats(),
    }


def memory_budget(st: Any) -> dict[str, Any]:
    """`StreamLoader.memory_budget()` of the loader's stages `st` (`loader.assemble.Stages`): see its doc."""
    import numpy as np

    b, routes, resolved, builder, store = st.config.batch_size, st.decode_routes, st.resolved, st.builder, st.store
    steps = {k: len(st.plan_config.delta_indices.get(k, (0,))) for k in routes}
    # each key's largest camera over the members
    size = {k: max(st.catalog.fields[k].sizes.values(), key=lambda hw: hw[0] * hw[1]) for k in routes}
    host = builder.host_keys
    itemsize = 4 if st.image_ops.dtype == "float32" else 1

    def out_bytes(k: str) -> int:
        if routes[k].depth:  # float32 depth, one channel, as recorded (no image op applies)
            return b * steps[k] * 4 * size[k][0] * size[k][1]
        return b * steps[k] * itemsize * int(np.prod(st.image_ops.out_shape(*size[k])))

    decoded = sum(b * steps[k] * size[k][0] * size[k][1] * 3
                  for k, r in routes.items() if r.torchcodec and k not in host)
    host_batches_alive = resolved.prefetch_batches + (2 if resolved.host_batches else 3)
    prepared = (resolved.prefetch_batches + 1) * decoded + host_batches_alive * sum(map(out_bytes, host))
    footers, indexes = store.tables.files, store.indexes.files
    return {"cache_peak": store.stats.peak_bytes, "cache_bound": store.capacity_bytes,
            "segment_bytes_limit": resolved.segment_bytes, "pieces_cut": store.stats.pieces_cut,
            "piece_bytes": store.stats.piece_bytes, "pieces_ahead_peak": store.stats.pieces_ahead_peak,
            "table_footers_peak": footers.peak_bytes, "table_footers_bound": footers.capacity_bytes,
            "mp4_indexes_peak": indexes.peak_bytes, "mp4_indexes_bound": indexes.capacity_bytes,
            "prepared_batches": prepared,
            "dali_outputs": 2 * sum(out_bytes(k) for k in routes if k not in host),
            "host_frames": list(host), "host_buffers_peak": builder.buffers.nbytes,
            "decoders_alive_peak": st.decoders.peak, "decoders_bound": st.decoders.capacity,
            "knobs": {"cache_bound": "cache_bytes", "segment_bytes_limit": "segment_bytes",
                      "prepared_batches": "prefetch_batches, num_workers",
                      "dali_outputs": "batch_size, image_dtype, resize/crop", "decoders": "max_decoders",
                      "table_footers_bound": "footer_bytes", "mp4_indexes_bound": "index_bytes"}}
