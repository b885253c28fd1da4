"""What a `StreamLoader` shows of its insides: its counters (`stats()`, `memory_budget()`, `remote_stats`,
`data_wait()`), its plans (`epoch_plan`, `batch_plan`), the episodes it fetched, and the few reads measurement tools
(`dali-stream bench`, benchmarks/) make of the frames it decodes. The loader's stages (`loader.assemble.Stages`)
are read here and in the rest of dali_stream/loader/, never from outside it (the test suite's guard, `tests/support/insides.py`, refuses such reads): this is
their public face, so they can change without anyone outside noticing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .stats import loader_stats, memory_budget

if TYPE_CHECKING:
    import numpy as np

    from ..plan.epoch import BatchPlan, EpochPlan
    from .assemble import Stages
    from .position import Position
    from .wait import DataWait


class LoaderViews:
    """`StreamLoader`'s read-only surface beside iterating (module doc)."""

    _stages: Stages
    _position: Position
    _waits: DataWait

    # ---- counters ---------------------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """What each bounded structure holds now against its bound and setting (`bounded`: fetched episodes, pieces
        cut ahead, MP4 indexes, parquet footers, CPU decoders, host buffers, decoded frames), the decoded-frame
        cache (`frames`), the fetch counters (`fetch`), the decoders opened, the open-decoder engines' counters
        (`engines`), what the batch builders decoded (`build`: frames and seconds on the workers, DALI's samples,
        streams and frames per camera it decodes in the graph) and where `image_transforms` run (`transforms`)
        (`loader/stats.py` says each key, docs/memory.md). Cheap (counters, and a walk of the
        episodes held): safe at any step."""
        return loader_stats(self._stages)

    def memory_budget(self) -> dict[str, Any]:
        """Where this loader's host memory goes, in bytes, and the knob that bounds each part (docs/memory.md).

        An episode's camera above `resolved.segment_bytes` is read in pieces, one per sample, held only until its
        batch is built (`pieces_cut`, `piece_bytes`: how many and their bytes so far; `pieces_ahead_peak`: most
        bytes of pieces cut ahead of the builders at once, at most `prefetch_batches` + 1 batches'), never in the
        cache.

        `cache_peak`, `table_footers_peak` (parsed parquet footers of the data files kept open, weighed at 8x
        their serialized size) and `mp4_indexes_peak` (video files' sample indexes) are measured, against
        their bounds (`footer_bytes`, `index_bytes`: least recently used files are dropped and read again when
        needed); `stats()` reports what each holds now; the others are upper estimates from the configuration:
        prepared batches hold decoded uint8 frames (CPU routes through the graph) and clips (DALI routes) for
        `prefetch_batches + 1` batches; host frames (`host_frames`: the cameras laid out by the workers, never in
        DALI's graph, `graph.host`) are output-sized buffers for `prefetch_batches + 2` batches (the ones building,
        the caller's), one more where a DALI graph holds one too (tables or other cameras still in the graph); DALI
        keeps `prefetch_queue_depth` (2) output batches of the cameras it lays out; CPU decoders hold their frame
        buffers (~12 MB per AV1 decoder at 480p, ~1.3 MB per H.264 one), counted here as alive at the peak."""
        return memory_budget(self._stages)

    @property
    def remote_stats(self) -> dict | None:
        """Where a remote dataset's bytes came from: requests, retries, bytes and seconds of remote reads, the disk
        tier's reads and writes (`disk_*`, docs/remote.md), and `memory_hits`, the episode lookups the memory cache
        answered (`stats()["fetch"]["hits"]`); None for a local dataset."""
        metas = [m.meta for m in self._stages.catalog.members]
        found = [fs.counts() for fs in {id(f): f for m in metas for f in (m.fs, m.data_fs)}.values()
                 if hasattr(fs, "counts")]
        if not found:
            return None
        return {**{k: sum(s[k] for s in found) for k in found[0]}, "memory_hits": self._stages.store.stats.hits}

    def data_wait(self) -> dict[str, Any]:
        """How long the training loop waited for batches on this rank, from asking (`next`) to getting each one:
        `wait_fraction` of the wall time since the first batch was asked for, and `recent` (the last 100 batches:
        `wait_fraction`, `p50_ms`, `p95_ms`, `max_ms`). Near 0: the loader keeps ahead of the loop; near 1: the
        loop waits for data (`loader/wait.py`). Readable at any step; a training loop logs the max over ranks
        (dali-stream train)."""
        return self._waits.stats()

    def fetched_episodes(self) -> frozenset[int]:
        """The positions (rows of `meta.episodes`; a mixture's members one after another, `catalog`) of the episodes
        this loader fetched so far, rows or video, each once however often it was fetched again: which episodes
        a rank read (`stats()["fetch"]["episodes"]` counts them)."""
        return frozenset(self._stages.store.stats.episodes)

    # ---- plans ------------------------------------------------------------------------------------------
    def epoch_plan(self, epoch: int) -> EpochPlan:
        """This rank's plan of `epoch` (`plan.epoch.EpochPlan`: its batches, the episodes it admits and retires);
        for an epoch resumed on another world size, the rest of it. Pure: no batch is built."""
        return self._position.plan(epoch)

    def batch_plan(self, epoch: int, index: int) -> BatchPlan:
        """The plan of batch `index` of `epoch` on this rank (for tools such as `dali-stream bench`)."""
        return self.epoch_plan(epoch).batch(index)

    # ---- what measurement tools read (`dali-stream bench`, benchmarks/) -----------------------------------
    def locate(self, plan: BatchPlan, key: str) -> tuple[list, list[np.ndarray]]:
        """Per sample of batch plan `plan` (`batch_plan`), camera `key`'s segment (`fetch.segments.Segment`; images
        stored in the tables: the sample's images; None where the sample's member lacks the camera) and the
        frame indices in it the sample shows, fetched through the loader's own store: what its decoders get."""
        st = self._stages
        rows = [st.store.rows(int(p)) for p in plan.episodes]
        return st.builder.locate(plan, rows, key)

    def decode_on_engine(self, key: str, segments: list, indices: list) -> Any:
        """Frames `indices` of `segments` (`locate`) of camera `key` decoded by the open-decoder engine of its route
        (`decode.engine`: its threads, its decoders kept open), as the engine returns them. A KeyError where
        `key`'s route has no engine (`stats()["engines"]` names the routes that have one)."""
        st = self._stages
        return st.engines[st.decode_routes[key]].decode(key, segments, indices)

    def dali_inputs(self, key: str, segments: list, indices: list) -> list:
        """The streams DALI's decoder in the graph would get for frames `indices` of `segments` (`locate`) of camera
        `key`: joined per group where they can be (`join_streams`), else a clip a sample (`graph.clips.DaliInput`:
        `data`, `frames`), for timing that decoder alone (`tools.bench_limit`)."""
        return self._stages.builder.streams_of(key, segments, indices)

    def record_pieces(self) -> list:
        """Start recording the pieces of long episodes cut from now on (`segment_bytes`): the list returned grows by
        one (epoch, batch, sample, camera) per piece cut, what `tools.bench.gop_bytes_needed` measures the bytes
        read against. Recording stops with the loader."""
        pieces = self._stages.store.pieces
        if pieces.log is None:
            pieces.log = []
        return pieces.log
