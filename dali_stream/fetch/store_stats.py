"""The episode store's counters (`fetch.store.EpisodeStore.stats`), read by `loader.stats` into `stats()["fetch"]`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StoreStats:
    segments_cut: int = 0
    segment_bytes: int = 0
    table_reads: int = 0
    hits: int = 0  # lookups that found the episode fetched (or in flight)
    demand_fetches: int = 0  # episodes a batch builder had to fetch itself (not prefetched)
    prefetches: int = 0  # episodes fetched by the background threads
    wait_s: float = 0.0  # time batch builders waited for fetches in flight or fetched themselves
    evictions: int = 0
    pieces_cut: int = 0  # pieces of long episodes cut for samples (`segment_for`)
    piece_bytes: int = 0  # their bytes
    pieces_ahead: int = 0  # of them, cut by their batch's task (`cut_ahead`), reads coalesced
    batches_taken_over: int = 0  # of those tasks, run by their builder: no piece thread had begun it
    pieces_dropped: int = 0  # cut ahead, never asked for (the epoch stopped first)
    pieces_ahead_peak: int = 0  # most bytes of pieces cut ahead held at once, waiting for their builders
    retired_dropped: int = 0  # episodes dropped when retired: this rank's epoch would not fit the cache (`unpin`)
    columns_left_out: int = 0  # columns of images in the tables not read with their rows: the frame cache held them
    columns_read_again: int = 0  # of those, read alone after all: the cache had lost one of their images (`column`)
    fetch_s: float = 0.0
    peak_bytes: int = 0
    episodes: set = field(default_factory=set)  # positions whose rows or segments were fetched


def held_now(store) -> dict[str, Any]:
    """What the store `store` (`fetch.store.EpisodeStore`) holds now: `episodes` held (fetched or in flight), of them
    `pinned` by batches in flight, and `row_bytes`, the table rows of those fetched (`stats()["bounded"]
    ["fetched_episodes"]`). A walk of the held entries under the store's lock: as many as `cache_bytes` holds."""
    from .tables import rows_nbytes

    with store._lock:
        entries = list(store._entries.values())
    return {"episodes": len(entries), "pinned": sum(e.refs > 0 for e in entries),
            "row_bytes": sum(rows_nbytes(e.rows) for e in entries if e.done.is_set())}


def ahead_now(pieces) -> dict[str, Any]:
    """The pieces of long episodes cut ahead now (`fetch.pieces.Pieces`), not taken by their builders yet: how many
    (`pieces`), and the furthest batch of its epoch they belong to (`furthest_batch`; None: none ahead)."""
    with pieces._lock:
        keys = list(pieces._ahead)
    batches = [key[1] for key in keys if isinstance(key, tuple) and len(key) > 1]
    return {"pieces": len(keys), "furthest_batch": max(batches) if batches else None}
