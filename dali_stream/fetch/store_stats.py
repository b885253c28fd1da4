"""The episode store's counters (`fetch.store.EpisodeStore.stats`), read by `loader.stats` into `stats()["fetch"]`."""

from __future__ import annotations

from dataclasses import dataclass, field


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
