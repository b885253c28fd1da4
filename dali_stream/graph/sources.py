"""Each camera's frames behind one protocol: `FrameSource.frames_for(batch) -> CameraFrames`, and `close()`.

A batch's builder (`graph.batches`) locates each camera's samples (their segments, pieces or frames the decoded-frame
cache holds, `graph.locate`) and hands them to the camera's source, which returns what the batch takes of that
camera: the DALI graph's inputs (`values`, one list per output, per group of samples) or, on host frames, the
camera's batch tensor laid out already (`host`). Which source a camera gets is its route's business
(`loader.assemble`); the builder loops over its sources and knows none of them:

- `DaliClips`: DALI's decoder decodes the camera in the graph (`nvdec`, `dali-cpu`): per group one stream, the
  members' clips joined (`graph.joined`), or a clip per sample (`graph.clips`);
- `EngineSource`: an open-decoder engine (`nvdec-open`, `cpu-open`) decodes it, its pictures fed to the graph
  through the engine route's own external source (`engine_outputs`);
- `WorkerPixels`: decoded on the workers (torchcodec, or DALI's CPU decoder there) and fed to the graph as pixels;
- `HostFrames`: decoded on the workers and laid out straight into the batch (`graph.host`), no graph;
- `DepthFrames` (`graph.depth_source`): a depth camera's codes, laid out as depth by the workers, whatever the batch;
- `TableImages` (`graph.table_images`): a camera stored as images in the frame tables, laid out by the workers.

A camera whose frames the decoded-frame cache keeps has its source behind `CachedFrames`, the one place in the graph
that reaches the cache (besides `graph.source_kit`, which builds it): it names the samples' frames, takes those held, and hands the source where to report those
it decodes (`CameraBatch.keep`, the cache's `put`); the sources themselves never hold the cache.
"""

from __future__ import annotations

import threading
import warnings
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Protocol

import numpy as np

from ..decode.cpu import DecoderCache
from ..decode.frame_cache import FrameCache, micros
from ..decode.open_episodes import EpisodeFrames, asked_by
from ..decode.route import Route
from ..errors import DecodeError
from ..plan.epoch import BatchPlan
from .buffers import BufferPool
from .clips import DaliInput, dali_input
from .imageops import ImageOps
from .joined import join_group, join_pieces
from .worker_decode import Held, Keep, decode_grouped, decode_host


@dataclass(frozen=True)
class Output:
    """One external-source output: what it carries and for which key."""

    name: str  # unique output name inside the graph
    kind: str  # "encoded" | "frames" | "order" | "pixels" | "decoded" | "rand" | "table"
    key: str  # feature key (or "<key>_is_pad") it belongs to
    dtype: np.dtype
    ndim: int


@dataclass
class CameraBatch:
    """One camera of one batch, located: per sample its segment (an episode's, a long episode's piece, a `Held`
    sample's cached frames, or None for a mixture's member lacking the camera) and the frame indices in it to show;
    per sample what the decoded-frame cache names and holds (`names`, `FrameCache.look`; None: not cached); the
    samples' members; `groups` samples per group of the graph's batch, and a DALI camera's joined streams. `keep`:
    where the source reports the frames it decodes of named samples (names, frames), set by `CachedFrames` (the
    cache's `put`; None: not cached)."""

    plan: BatchPlan
    segs: list
    idx: list[np.ndarray]
    names: list | None
    member_index: np.ndarray
    groups: int = 1
    streams: list[DaliInput] | None = None
    keep: Keep | None = None


@dataclass
class CameraFrames:
    """What a source gives of its camera: graph output name -> per group; or the host-frame tensor; and how many
    frames it decoded on the workers."""

    values: dict[str, list] = field(default_factory=dict)
    host: np.ndarray | None = None
    decoded: int = 0


class FrameSource(Protocol):
    key: str
    route: Route
    outputs: tuple[Output, ...]  # the graph's inputs it fills (on its engine's source when `engine`)
    engine: Route | None  # the open-decoder engine route whose external source takes `outputs`, else None
    in_graph: bool  # False: host frames, the camera never enters the graph

    @property
    def buffers(self) -> BufferPool | None:
        """The host-frame buffers it lays its batches out in (None: none)."""
        ...

    @property
    def counts(self) -> list[int] | None:
        """DALI's decoder in the graph: [samples, streams opened, frames fed] (None: another decoder)."""
        ...

    def held(self, plan: BatchPlan, rows: list[dict], locator: Any) -> list | None:
        """Per sample, what the decoded-frame cache names and holds of the camera (`FrameCache.look`); None: the
        camera is not cached."""
        ...

    def holds_all(self, plan: BatchPlan, j: int, rows: dict, locator: Any) -> bool:
        """Whether the decoded-frame cache holds every frame sample `j` of `plan` shows of the camera (`rows`: its
        episode's rows): no piece of a long episode is cut for it (`Locator.cut_ahead`). False: not cached."""
        ...

    def join(self, segs: list, idx: list[np.ndarray], members: int) -> list[DaliInput] | None:
        """One stream per group of `members` samples where the source joins clips (DALI's decoder), else None."""
        ...

    def frames_for(self, batch: CameraBatch) -> CameraFrames: ...

    def close(self) -> None: ...


class Source:
    """What every source says unless it says otherwise: in the graph, no engine, no buffers, not cached, no DALI
    counts, clips not joined."""

    key: str
    route: Route
    outputs: tuple[Output, ...] = ()
    engine: Route | None = None
    in_graph = True
    buffers: BufferPool | None = None
    counts: list[int] | None = None

    def held(self, plan: BatchPlan, rows: list[dict], locator: Any) -> list | None:
        return None

    def holds_all(self, plan: BatchPlan, j: int, rows: dict, locator: Any) -> bool:
        return False

    def join(self, segs: list, idx: list[np.ndarray], members: int) -> list[DaliInput] | None:
        return None

    def close(self) -> None:
        pass


class CachedFrames:
    """`inner`'s camera behind the decoded-frame cache (`decode.frame_cache`): its samples' frames are named as the
    cache keeps them (`names`, from where `locator`, a `graph.locate.Locator`, finds them), those it holds taken from
    it (`held`) before `inner` is asked for the others, which `inner` reports back to be kept (`CameraBatch.keep`)."""

    def __init__(self, inner: FrameSource, cache: FrameCache) -> None:
        self.inner, self.cache, self.label = inner, cache, cache.labels[inner.key]  # how the camera's frames are kept
        self.key, self.route, self.outputs, self.engine = inner.key, inner.route, inner.outputs, inner.engine
        self.in_graph, self.buffers, self.counts = inner.in_graph, inner.buffers, inner.counts

    def held(self, plan: BatchPlan, rows: list[dict], locator: Any) -> list | None:
        return self.cache.look(self.names(plan, list(enumerate(rows)), locator))

    def holds_all(self, plan: BatchPlan, j: int, rows: dict, locator: Any) -> bool:
        names = self.names(plan, [(j, rows)], locator)[0]
        return names is not None and self.cache.holds(names)

    def names(self, plan: BatchPlan, samples: list[tuple[int, dict]], locator: Any) -> list:
        """Per (sample, its episode's rows) of `samples`, the cache's names of the frames it shows of the camera: its
        video file and the file times it asks for (`Locator.query_s`), whatever segment or piece serves them,
        gathered first and turned into names in one go (a camera stored in the tables: `_row_names`); None where
        its member lacks the camera."""
        own = locator.fields[self.key].own
        if self.route.in_tables:
            return [self._row_names(plan, j, locator) for j, _ in samples]
        digests: list[str | None] = []
        times = []
        for j, rows in samples:
            member, local = locator.catalog.locate(int(plan.episodes[j]))
            camera = own[member.index]
            digests.append(None if camera is None else
                           self.cache.digest(member.meta.video_file(local, camera), self.label))
            if camera is not None:
                times.append(locator.query_s(plan, j, self.key, rows))
        if not times:
            return digests
        per_sample = iter(micros(np.asarray(times)).reshape(len(times), -1).tolist())
        return [None if d is None else [(d, t) for t in next(per_sample)] for d in digests]

    def _row_names(self, plan: BatchPlan, j: int, locator: Any) -> list[tuple[str, int]] | None:
        """The cache's names of the images sample `j` shows of the camera stored in the tables: its episode's data
        file, its column and the rows' (episode, frame) (`FrameCache.row_names`); None: its member lacks the camera."""
        member, local = locator.catalog.locate(int(plan.episodes[j]))
        own = locator.fields[self.key].own[member.index]
        if own is None:
            return None
        return self.cache.row_names(member.meta.data_file(local), own, self.label, member.meta.episode_index(local),
                                    locator.rows_of(plan, j, self.key))

    def join(self, segs: list, idx: list[np.ndarray], members: int) -> list[DaliInput] | None:
        return self.inner.join(segs, idx, members)

    def frames_for(self, batch: CameraBatch) -> CameraFrames:
        return self.inner.frames_for(replace(batch, keep=self.cache.put))

    def close(self) -> None:
        self.inner.close()


class DaliClips(Source):
    """DALI's decoder in the graph: per group a stream of encoded bytes, its distinct frames and their order.
    `counts`: [samples, streams DALI opened a decoder for, frames its decoder works through]."""

    def __init__(self, key: str, route: Route) -> None:
        self.key, self.route = key, route
        self.outputs: tuple[Output, ...] = (Output(f"{key}@encoded", "encoded", key, np.dtype(np.uint8), 1),
                        Output(f"{key}@frames", "frames", key, np.dtype(np.int32), 1),
                        Output(f"{key}@order", "order", key, np.dtype(np.int32), 1))
        self.counts: list[int] | None = [0, 0, 0]
        self._lock = threading.Lock()

    def join(self, segs: list, idx: list[np.ndarray], members: int) -> list[DaliInput] | None:
        """One stream per group of `members` samples, or None where some group's clips cannot share one."""
        joined = [join_group(segs[g:g + members], idx[g:g + members]) for g in range(0, len(segs), members)]
        return None if any(j is None for j in joined) else joined  # type: ignore[return-value]

    def frames_for(self, batch: CameraBatch) -> CameraFrames:
        inputs = batch.streams if batch.streams is not None else [dali_input(s, i) for s, i in zip(batch.segs,
                                                                                                    batch.idx)]
        assert self.counts is not None
        with self._lock:
            self.counts[0] += len(batch.segs)
            self.counts[1] += len(inputs)
            self.counts[2] += sum(d.frames_fed for d in inputs)
        return CameraFrames({f"{self.key}@encoded": [d.data for d in inputs],
                             f"{self.key}@frames": [d.frames for d in inputs],
                             f"{self.key}@order": [d.order for d in inputs]})


class EngineSource(Source):
    """An open-decoder engine's pictures (`graph.engine_pictures.EngineFrames`, shared by the route's cameras, resized
    there by `resizer` where the workers resize the camera), per group, for the external source of the engine's
    route."""

    def __init__(self, key: str, route: Route, pictures: Any, resizer: Any = None) -> None:
        self.key, self.route, self.pictures, self.resizer = key, route, pictures, resizer  # resizer: closed here
        self.engine = route
        self.outputs: tuple[Output, ...] = (Output(f"{key}@decoded", "decoded", key, np.dtype(np.uint8), 4),)

    def frames_for(self, batch: CameraBatch) -> CameraFrames:
        pictures, decoded = self.pictures(self.route, self.key, batch.segs, batch.idx, batch.member_index,
                                          batch.names, batch.keep)
        span = batch.groups * len(batch.idx[0])  # every sample of a camera has the same steps
        per_group = pictures if isinstance(pictures, list) else [  # a list: per sample (a mixture's sizes)
            pictures[g:g + span] for g in range(0, len(pictures), span)]
        return CameraFrames({self.outputs[0].name: per_group}, decoded=decoded)

    def close(self) -> None:
        if self.resizer is not None:
            self.resizer.close()


class Workers:
    """What the cameras decoded on the workers share: the CPU decoders kept, the open episodes' frames
    (`decode.open_episodes`), and whether a batch's clips of whole episodes are joined into one stream too (a global
    shuffle), not only long episodes' pieces."""

    def __init__(self, decoders: DecoderCache, join_all: bool = False, episodes: EpisodeFrames | None = None) -> None:
        self.decoders, self.join_all, self.episodes = decoders, join_all, episodes
        self._join_failed: set[str] = set()  # cameras whose joined pieces failed to decode

    def decode(self, key: str, segs: list, idx: list[np.ndarray], decode: Callable[[list, list], Any],
               joinable: bool = True) -> Any:
        """`decode(segs, idx)`, a camera's pieces of long episodes (one per sample) joined into one stream first
        (`join_pieces`): one decoder opened for them instead of one per piece. Should a joined stream fail (its
        frames are checked like any), the camera's pieces are decoded one by one from then on, said once."""
        pieces = [j for j, seg in enumerate(segs) if seg is not None and not isinstance(seg, Held)
                  and (seg.piece or self.join_all)] if joinable and key not in self._join_failed else []
        joined = join_pieces([segs[j] for j in pieces], [idx[j] for j in pieces]) if len(pieces) > 1 else None
        if joined is not None:
            one, steps = joined
            segs_j, idx_j = list(segs), list(idx)
            for j, part in zip(pieces, steps):
                segs_j[j], idx_j[j] = one, part
            try:
                return decode(segs_j, idx_j)
            except DecodeError as exc:
                self._join_failed.add(key)
                warnings.warn(f"camera {key!r}: the pieces of long episodes joined into one stream did not decode "
                              f"({exc}); its pieces are decoded one by one from now on (one decoder opened per "
                              "piece: slower). `dali-stream verify DATASET --decode` lists a damaged file; where it "
                              "finds them healthy, please report it with its output", stacklevel=3)
        return decode(segs, idx)


class WorkerPixels(Source):
    """Decoded on the workers (torchcodec; DALI's CPU decoder where `dali` is given), through `resizer` where the
    workers resize, and fed to the graph as (members x steps, H, W, 3) pixels per group. `blank(steps)`: a sample's
    zeros for a mixture's member lacking the camera."""

    def __init__(self, key: str, route: Route, workers: Workers, blank: Callable[[int], np.ndarray],
                 resizer: Any = None, dali: Any = None) -> None:
        self.key, self.route, self.workers, self.blank, self.resizer, self.dali = key, route, workers, blank, resizer, dali
        self.outputs: tuple[Output, ...] = (Output(f"{key}@pixels", "pixels", key, np.dtype(np.uint8), 4),)

    def frames_for(self, batch: CameraBatch) -> CameraFrames:
        w = self.workers
        pixels, decoded = w.decode(self.key, batch.segs, batch.idx, lambda s, i: decode_grouped(
            s, i, w.decoders, self.blank(len(i[0])), batch.keep, batch.names, self.resizer, self.dali,
            asked_by(w.episodes, batch.plan)),
            joinable=self.dali is None)
        g = batch.groups
        return CameraFrames({self.outputs[0].name: pixels if g == 1 else [
            np.concatenate(pixels[k:k + g]) for k in range(0, len(pixels), g)]}, decoded=decoded)

    def close(self) -> None:
        for pipelines in (self.resizer, self.dali):
            if pipelines is not None:
                pipelines.close()


class HostFrames(Source):
    """Decoded on the workers and laid out as `image_ops` says straight into a buffer of `buffers` (host frames,
    `graph.host`): the camera's (B, T, 3, H, W) batch tensor, no graph. `size`: the camera's (H, W); `chw`: the
    decoded-frame cache keeps its frames (3, H, W) (`Resolved.kept_chw`)."""

    in_graph = False
    buffers: BufferPool

    def __init__(self, key: str, route: Route, workers: Workers, buffers: BufferPool, image_ops: ImageOps,
                 size: tuple[int, int], dali: Any = None, chw: bool = False) -> None:
        self.key, self.route, self.workers, self.buffers = key, route, workers, buffers
        self.image_ops, self.size, self.dali, self.chw = image_ops, size, dali, chw

    def frames_for(self, batch: CameraBatch) -> CameraFrames:
        w = self.workers
        host, decoded = w.decode(self.key, batch.segs, batch.idx, lambda s, i: decode_host(
            s, i, w.decoders, self.buffers, self.image_ops, self.size, batch.keep, batch.names, self.dali,
            asked_by(w.episodes, batch.plan), self.chw),
            joinable=self.dali is None)
        return CameraFrames(host=host, decoded=decoded)

    def close(self) -> None:
        self.buffers.clear()  # batches the caller holds stay valid
        if self.dali is not None:
            self.dali.close()
