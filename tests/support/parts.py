"""Components a loader builds, built here directly for the tests of their insides (the fetch store), and those a
loader builds captured as it builds them, for the tests of its threads and locks: never read out of a loader, whose
insides stay inside (tests/support/insides.py)."""

from __future__ import annotations

import contextlib
from typing import Any, Iterator


def store_of(root, *, tolerance_s: float = 1e-4, capacity_bytes: int = 1 << 30, fetch_workers: int = 0,
             **settings: Any):
    """An episode store (`fetch.store.EpisodeStore`) over every episode of the dataset at `root`, as a loader builds
    one (`settings`: its keyword settings, `segment_bytes_limit`, `table_cache_dir`, ...); without fetch threads each
    read is done on the calling thread. Close it after."""
    from dali_stream.decode.cpu import DecoderCache
    from dali_stream.fetch.store import EpisodeStore
    from dali_stream.meta.catalog import Catalog
    from dali_stream.meta.dataset import DatasetMeta

    return EpisodeStore(Catalog.whole(DatasetMeta.open(str(root))), tolerance_s, capacity_bytes, DecoderCache(1),
                        fetch_workers, **settings)


def store_for(loader, **settings: Any):
    """An episode store as `loader`'s (`store_of`): over its episodes (`loader.catalog`), with its tolerance, piece
    limit (`segment_bytes`) and row-group folder, `settings` replacing them. Close it after."""
    from dali_stream.decode.cpu import DecoderCache
    from dali_stream.fetch.store import EpisodeStore

    settings = {"segment_bytes_limit": loader.resolved.segment_bytes,
                "table_cache_dir": loader.resolved.table_cache_dir, **settings}
    return EpisodeStore(loader.catalog, loader.config.tolerance_s, 1 << 30, DecoderCache(1), 0, **settings)


@contextlib.contextmanager
def built(cls: type) -> Iterator[list]:
    """The instances of `cls` made inside the block, in order (a loader's store, as the loader builds it): for the tests
    of what a loader's own threads and locks do, which a component built apart would not have."""
    made: list = []
    init = cls.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    cls.__init__ = recording  # type: ignore[method-assign]
    try:
        yield made
    finally:
        cls.__init__ = init  # type: ignore[method-assign]


def parts_of(root, **settings: Any):
    """A loader's parts (`loader.assemble.Stages`: its store, batch builder, decoders, ...) built as a loader builds
    them from `settings`, with no loader around them: for the tests of the batch builder's insides. Without fetch
    threads (`fetch_workers=0`, each episode fetched as it is asked for) nothing of them runs on a thread, so there is
    nothing to close but the store's files."""
    from dali_stream.config import LoaderConfig
    from dali_stream.loader.assemble import assemble

    return assemble(LoaderConfig.make(fetch_workers=0, **settings), str(root))


def plan_of(parts, epoch: int = 0, index: int = 0):
    """Batch `index` of `epoch` on this rank as a loader over `parts` (`parts_of`) plans it."""
    from dali_stream.plan.epoch import resume_plan

    return resume_plan(parts.plan_lengths, parts.plan_config, parts.world, epoch, [], parts.mix).batch(index)
