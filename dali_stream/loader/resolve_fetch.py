"""Resolvers of `loader.resolve` for reading episodes' bytes: the fetch threads and how far ahead they run, the
piece limit of long episodes, which retired episodes the store keeps, where decoded row groups go (`fetching`), and
the remote requests a rank has in flight (`remote_concurrency`, which the source's opening reads too, before there
are routes to resolve the rest). Pure (`loader.resolve_base`)."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from ..config import TABLE_CACHE_OFF, LoaderConfig
from .resolve_base import Facts, Part
from .resolve_threads import GIVEN, Sampling

FETCH_AHEAD_BATCHES = 16  # episodes admitted this many batches beyond the builders' lookahead are fetched
REMOTE_CUT_AHEAD = 16  # batches whose pieces are cut ahead from a remote source (reads in flight hide its latency)
LONG_SEGMENT_FLOOR = 16 << 20  # bytes: a segment below this is never cut in pieces (see EpisodeStore)
REMOTE_GLOBAL_FETCHES = 16  # fetch threads of a global shuffle from a remote source
LOCAL_FETCHES = 4  # at most this many fetch threads on a local source (one per core below that)
REMOTE_FETCHES = 4  # fetch threads of a pool from a remote source


@dataclass(frozen=True, kw_only=True)
class Fetching(Part):
    fetch_ahead: int = field(metadata={"what": "batches ahead of those being built whose episodes are already fetched"})
    fetch_workers: int = field(metadata={"what": "threads reading episodes' bytes"})
    rank_episodes: int = field(metadata={"what": "episodes a rank holds, at most"})
    segment_bytes: int = field(metadata={  # read in pieces, one per sample
        "what": "an episode's camera larger than this is read one sample's frames at a time"})
    epoch_episodes: int | None = field(metadata={  # None: the store keeps retired episodes always
        "what": "episodes a rank's epoch keeps fetched where they fit the cache"})
    cut_ahead: int = field(metadata={
        "what": "batches ahead whose frames' bytes are read ahead of decoding (remote sources)"})
    table_cache_dir: str | None = field(metadata={"what": (  # `fetch.decoded_groups`
        "where parquet row groups holding many episodes are kept decoded, once a node, and the images stored in the "
        "tables of open episodes past cache_bytes (None: the last 2 groups, and the images, in memory)")})
    remote_concurrency: int | None = field(metadata={"what": (  # `source.storage.RemoteOptions`
        "remote requests this rank has in flight at once, its part of the node's remote_concurrency (None: no limit "
        "but the fetch threads')")})


def fetching(cfg: LoaderConfig, facts: Facts, drawn: Sampling) -> Fetching:
    """How episodes' bytes are read: threads, how far ahead, in pieces past which size, what the store keeps."""
    why: dict[str, str] = {}
    why["fetch_ahead"] = "episodes admitted this many batches beyond the built ones are fetched"
    fetch_workers, why["fetch_workers"] = _fetch_workers(cfg, facts, drawn)
    rank_episodes = -(-facts.episodes // facts.world_size)
    why["rank_episodes"] = "selected episodes over the ranks, rounded up"
    # An episode's camera whose segment would take more than its share of the cache (half of cache_bytes over the
    # pool's episodes and cameras, at least LONG_SEGMENT_FLOOR) is read in pieces, one per sample (hour-long
    # recordings): the cache bound then holds for any episode length. A global shuffle has the rank's whole share
    # for a pool: where that share's segments fit in half of cache_bytes each episode is fetched whole once and
    # kept; where not, every sample reads its GOPs alone.
    cameras = max(1, len(facts.routes))
    if cfg.segment_bytes is not None:
        segment_bytes, why["segment_bytes"] = cfg.segment_bytes, GIVEN
    elif drawn.global_shuffle:
        segment_bytes = max(1, cfg.cache_bytes // (2 * rank_episodes * cameras))
        why["segment_bytes"] = "half of cache_bytes over the rank's episodes and cameras (global shuffle)"
    else:
        segment_bytes = max(LONG_SEGMENT_FLOOR, cfg.cache_bytes // (2 * (drawn.pool or 1) * cameras))
        why["segment_bytes"] = f"half of cache_bytes over the pool's episodes and cameras, at least " \
                               f"{LONG_SEGMENT_FLOOR >> 20} MiB"
    epoch_episodes = None if drawn.global_shuffle else rank_episodes
    why["epoch_episodes"] = ("a global shuffle keeps retired episodes" if drawn.global_shuffle
                             else "the rank's episodes: retired ones are kept where its epoch fits cache_bytes")
    # Pieces (a few KB each) are cut further ahead than batches are built from a remote source: the reads in flight
    # are what many batches ahead ask for (50 ms a request: 3 batches ahead read 330 samples/s, 8 batches 640).
    cut_ahead = 0 if facts.local else REMOTE_CUT_AHEAD
    why["cut_ahead"] = "local: reads take microseconds" if facts.local else "remote: reads in flight hide latency"
    table_cache_dir, why["table_cache_dir"] = _table_cache_dir(cfg, facts)
    concurrency, why["remote_concurrency"] = remote_concurrency(cfg, facts.local_world_size)
    return Fetching(fetch_ahead=FETCH_AHEAD_BATCHES, fetch_workers=fetch_workers, rank_episodes=rank_episodes,
                    segment_bytes=segment_bytes, epoch_episodes=epoch_episodes, cut_ahead=cut_ahead,
                    table_cache_dir=table_cache_dir, remote_concurrency=concurrency, why=why)


def _fetch_workers(cfg: LoaderConfig, facts: Facts, drawn: Sampling) -> tuple[int, str]:
    """The fetch threads, and why. Local fetches are CPU work (remux): one thread per core; remote ones wait, and a
    global shuffle's batches each admit as many episodes as samples (50 ms a request: 4 threads fetched 44
    samples/s, 16 threads 643)."""
    if cfg.fetch_workers is not None:
        return cfg.fetch_workers, GIVEN
    if facts.local:
        return min(LOCAL_FETCHES, facts.cpu_count), f"local: one per core, at most {LOCAL_FETCHES}"
    if drawn.global_shuffle:
        return REMOTE_GLOBAL_FETCHES, "remote, global shuffle"
    return REMOTE_FETCHES, "remote"


def remote_concurrency(cfg: LoaderConfig, local_world_size: int) -> tuple[int | None, str]:
    """This rank's remote requests in flight at once, and why: the node's `remote_concurrency` split evenly over its
    `local_world_size` ranks, at least 1 (None: not given, no limit but the fetch threads').
    `loader.source_setup.remote_options` reads it to open the source, which comes before the routes `resolve` needs."""
    if cfg.remote_concurrency is None:
        return None, "remote_concurrency not given: no limit but the fetch threads'"
    return (max(1, cfg.remote_concurrency // local_world_size),
            f"remote_concurrency ({cfg.remote_concurrency}, the node's) over its {local_world_size} ranks, rounded "
            "down, at least 1")


def _table_cache_dir(cfg: LoaderConfig, facts: Facts) -> tuple[str | None, str]:
    """The folder of decoded row groups holding many episodes, and why: as given, else beside the disk tier's blocks,
    else in the user's cache (as Hugging Face datasets keeps its decoded Arrow tables)."""
    if cfg.table_cache_dir is not None:
        return (None if cfg.table_cache_dir == TABLE_CACHE_OFF else cfg.table_cache_dir), GIVEN
    if cfg.disk_cache_dir is not None:
        return posixpath.join(cfg.disk_cache_dir, "tables"), "beside disk_cache_dir's blocks, on the node's local drive"
    if facts.user_cache_dir is not None:
        return (posixpath.join(facts.user_cache_dir, "tables"),
                "this user's cache folder ($XDG_CACHE_HOME or ~/.cache, or DALI_STREAM_CACHE)")
    return None, "no user cache folder (no home directory): kept in memory"
