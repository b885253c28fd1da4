"""Turn a BatchPlan into the arrays the DALI graph's external source hands out, one list per output.

Per sample: the episode's rows give the tabular values (windowed keys gather their clamped rows) and the
timestamps each camera must show; a camera's timestamps become frame indices in its episode segment by nearest
pts (`graph.locate`), and each camera's source (`graph.sources`: DALI's decoder in the graph, an open-decoder
engine, the workers' decoders, host frames) gives its frames. The graph's batch is the batch's samples in groups
of `Prepared.members` (contiguous, equal size; `graph.joined`): every output carries a group's members together,
tables stacked (members, ...) and cameras as (members x steps) frames, so the loader reshapes the graph's outputs
into per-sample views; host-frame cameras skip the graph as one tensor per camera in `Prepared.host`. Everything
else in the batch (`task` strings) rides alongside.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from ..decode.route import Route
from ..errors import DaliStreamError, DatasetError
from ..plan import salts
from ..plan.epoch import BatchPlan
from .buffers import BufferPool
from .clips import DaliInput, dali_input
from .joined import group_sizes
from .locate import Locator
from .sources import CameraBatch, FrameSource, Output
from .worker_decode import held_samples

AUGMENT_RANDOMS = 16  # uniform [0, 1) numbers per sample and camera handed to an augmentation hook


@dataclass(frozen=True)
class BuildSpec:
    """What a batch is made of beyond its cameras: the table keys (in the catalog's keys, a mixture's) with their
    (dtype, ndim) and windows (`delta_indices`), the frame-time tolerance, `augment_seed` (ship each camera
    AUGMENT_RANDOMS uniform numbers per sample, a pure function of (seed, epoch, batch, sample, camera), for an
    augmentation hook in the graph; None: no hook) and `join_streams` (DALI-decoded cameras decode a batch as at most
    this many groups, each group's clips joined into one stream, `graph.joined`; 0: one clip per sample).
    `one_group`: no graph takes the batch (`host_batches`): its tables come as one group of every sample, stacked
    here on the worker that builds it, not by the caller."""

    delta_indices: Mapping[str, tuple[int, ...]]
    tolerance_s: float
    table_keys: tuple[str, ...] = ()
    table_dtypes: Mapping[str, tuple[np.dtype, int]] = field(default_factory=dict)
    augment_seed: int | None = None
    join_streams: int = 0
    one_group: bool = False
    text_keys: tuple[str, ...] = ()  # columns handed over as Python values (`Prepared.texts`), never in a graph


@dataclass
class Prepared:
    plan: BatchPlan
    arrays: list[list[np.ndarray]]  # per output, per group of `members` samples
    tasks: list[str]
    host: dict[str, np.ndarray] = field(default_factory=dict)  # camera -> (B, T, 3, H, W) frames (graph.host)
    members: int = 1  # samples per group (the graph's batch is the groups: `graph.joined`)
    # DALI-routed camera -> per sample, its segment (the episode's, or a long episode's piece) and the frame
    # indices in it the sample asked for: what a failed decode is checked against (`explain_dali_failure`)
    asked: dict[str, tuple[list, list[np.ndarray]]] = field(default_factory=dict)
    # open-decoder engine route -> per output of `BatchBuilder.engine_outputs[route]`, per group: its camera's frames
    # as the engine decoded them (CUDA tensors for nvdec-open), for the graph's external source of that route
    engine_arrays: dict[Route, list[list[Any]]] = field(default_factory=dict)
    # camera -> its output tensor already laid out and through `image_transforms` (by the worker that built the
    # batch, `transforms.TransformPool`): the caller hands it over as it is
    images: dict[str, Any] = field(default_factory=dict)
    # text key -> per sample its frame's value (a string, or lerobot's language rows; None: a mixture's member lacks
    # the key), handed over as a list as `task` is
    texts: dict[str, list] = field(default_factory=dict)
    # camera a mixture's member lacks -> per sample, whether its member lacks it (the host's copy of the batch's
    # `<key>_is_missing`): the caller's batch zeroes those samples without reading a mask back from the GPU
    lacking: dict[str, np.ndarray] = field(default_factory=dict)


def task_of(meta: Any, rows: Mapping[str, np.ndarray], frame: int) -> str:
    """The task text of an episode's `frame` (its row's `task_index` in meta/tasks.parquet); a `DatasetError` where
    the tasks table lacks it (lerobot's `dataset[i]` fails there too), never an empty prompt."""
    index = int(rows["task_index"][frame])
    text = meta.tasks.get(index)
    if text is None:
        known = sorted(meta.tasks)
        raise DatasetError(
            f"episode {int(rows['episode_index'][frame])} of {meta.source!r} (frame {frame}) has task_index {index}, "
            f"which meta/tasks.parquet does not list (it lists {len(known)} task(s): task_index "
            f"{known[:10]}{' ...' if len(known) > 10 else ''}): the tasks table is cut short or from another "
            "version of the dataset; re-download the dataset's meta folder")
    return text


class BatchBuilder:
    def __init__(self, catalog, store, sources: Mapping[str, FrameSource], spec: BuildSpec) -> None:
        """`catalog` (`dali_stream.meta.catalog.Catalog`): the episode positions the plans name, and each key's feature
        in each member (the sources' keys and `spec`'s are in the catalog's keys: a mixture's). A mixture's batch also
        carries `dataset_index`, `<key>_is_missing` for keys some member lacks (zeros in the batch) and
        `<key>_dim_is_pad` for vectors some member has shorter (zero-padded). `store`: the episodes' rows and
        segments (`fetch.store`). `sources`: camera -> where its frames come from (`graph.sources`: those the
        decoded-frame cache keeps are behind it, `CachedFrames`, which names their samples' frames)."""
        self.catalog, self.store, self.sources, self.spec = catalog, store, dict(sources), spec
        self.mixed = catalog.is_mixture
        self.fields = catalog.fields
        self.delta = dict(spec.delta_indices)
        self.table_keys = list(spec.table_keys)
        self.table_dtypes = dict(spec.table_dtypes)
        outputs = [o for s in self.sources.values() if s.in_graph and s.engine is None for o in s.outputs]
        self.engine_outputs: dict[Route, list[Output]] = {}
        for s in self.sources.values():
            if s.engine is not None:
                self.engine_outputs.setdefault(s.engine, []).extend(s.outputs)
        if spec.augment_seed is not None:
            outputs += [Output(f"{key}@rand", "rand", key, np.dtype(np.float32), 1) for key in self.sources]
        for key in self.table_keys:  # a group's members stacked: one more axis than a sample's value
            dtype, ndim = self.table_dtypes[key]
            outputs.append(Output(key, "table", key, dtype, ndim + 1 + (1 if key in self.delta else 0)))
        for key in self.delta:
            outputs.append(Output(f"{key}_is_pad", "table", f"{key}_is_pad", np.dtype(np.bool_), 2))
        # a mixture's: which member, which keys it lacks, which vector elements are padding
        self.masks = [k for k in [*self.sources, *self.table_keys] if self.mixed and self.fields[k].missing]
        self.dim_masks = [k for k in self.table_keys if self.mixed and self.fields[k].padded]
        if self.mixed:
            outputs.append(Output("dataset_index", "table", "dataset_index", np.dtype(np.int64), 1))
            outputs += [Output(f"{k}_is_missing", "table", f"{k}_is_missing", np.dtype(np.bool_), 1)
                        for k in self.masks]
            outputs += [Output(f"{k}_dim_is_pad", "table", f"{k}_dim_is_pad", np.dtype(np.bool_), 2)
                        for k in self.dim_masks]
        self._table_shapes = {k: self._frame_shape(k, self.table_dtypes[k]) for k in self.table_keys}
        self.outputs = outputs
        self._slot = {o.name: i for i, o in enumerate(outputs)}
        self.locator = Locator(catalog, store, self.sources, spec.tolerance_s)
        self.decode_s = 0.0  # seconds the sources spent (CPU decoding, host frames' layout), summed over threads
        self.decoded_frames = 0
        self._count_lock = threading.Lock()

    @property
    def routes(self) -> dict[str, Route]:
        """Camera -> its route."""
        return {k: s.route for k, s in self.sources.items()}

    @property
    def dali_keys(self) -> list[str]:
        """The cameras DALI decodes in the graph (the others' pictures come decoded, by the workers or an engine)."""
        return [k for k, s in self.sources.items() if s.counts is not None]

    @property
    def host_keys(self) -> list[str]:
        """The cameras on host frames: laid out by the workers, never in the graph (`graph.host`)."""
        return [k for k, s in self.sources.items() if not s.in_graph]

    @property
    def buffers(self) -> BufferPool:
        """The host-frame buffers the cameras laid out by the workers share (host frames, depth, images stored in the
        tables; an empty pool without any)."""
        return next((s.buffers for s in self.sources.values() if s.buffers is not None), _NO_BUFFERS)

    @property
    def dali_counts(self) -> dict[str, list[int]]:
        """Per DALI-decoded camera: [samples, streams (decoders DALI opened: one per joined stream or per sample),
        frames DALI's decoder works through (clip frames up to the last asked)]."""
        return {k: s.counts for k, s in self.sources.items() if s.counts is not None}

    @property
    def dali_samples(self) -> int:
        """Sample-cameras DALI's decoder served (summed over DALI-routed cameras)."""
        return sum(c[0] for c in self.dali_counts.values())

    @property
    def dali_streams(self) -> int:
        """Decoders DALI opened: one per joined stream, or per sample (summed over cameras)."""
        return sum(c[1] for c in self.dali_counts.values())

    @property
    def dali_frames_fed(self) -> int:
        """Frames DALI's decoder worked through (summed over cameras)."""
        return sum(c[2] for c in self.dali_counts.values())

    @property
    def graph_routes(self) -> dict[str, Route]:
        """The cameras that go through the DALI graph (all but host frames), with their routes."""
        return {k: s.route for k, s in self.sources.items() if s.in_graph}

    def _frame_shape(self, key: str, dtype_ndim: tuple[np.dtype, int]) -> tuple[int, ...]:
        """A table key's value per frame in the batch: () for a scalar column, else the field's shape."""
        return () if dtype_ndim[1] == 0 else tuple(self.fields[key].shape) or (1,)

    def _members(self, plan: BatchPlan) -> tuple[np.ndarray, list]:
        """Per sample of `plan`: its member's index and the member (`catalog.Opened`)."""
        index = self.catalog.member_index(plan.episodes)
        return index, [self.catalog.members[m] for m in index.tolist()]

    def _column(self, key: str, rows: list[dict], members: list, sel: list) -> list[np.ndarray]:
        """Table key `key` of each sample: its rows `sel[j]` (a frame, or a window's rows) of its member's own
        column; a mixture's member that lacks the key gives zeros, a shorter vector is zero-padded."""
        f = self.fields[key]
        if not self.mixed:
            return [np.asarray(r[key][i]) for r, i in zip(rows, sel)]
        dtype, _ = self.table_dtypes[key]
        shape = self._table_shapes[key]
        out = []
        for r, m, i in zip(rows, members, sel):
            own = f.own[m.index]
            steps: tuple[int, ...] = () if np.ndim(i) == 0 else (len(i),)
            if own is None:
                out.append(np.zeros((*steps, *shape), dtype))
                continue
            value = np.asarray(r[own][i])
            if value.shape[len(steps):] != shape:
                have: np.ndarray = value.reshape((*steps, -1)).astype(dtype, copy=False)
                value = np.zeros((*steps, *shape), dtype)
                value.reshape((*steps, -1))[..., :have.shape[-1]] = have
            out.append(np.asarray(value, dtype))
        return out

    def _tables(self, plan: BatchPlan, rows: list[dict], member_index: np.ndarray, members: list) -> dict[str, list]:
        """Per sample, each table key's value (its frame's row, or a window's rows), each window's padding, and a
        mixture's member index and masks."""
        values: dict[str, list] = {}
        for key in self.table_keys:
            if key in plan.windows:
                values[key] = [np.ascontiguousarray(v) for v in
                               self._column(key, rows, members, list(plan.windows[key].rows))]
            else:
                values[key] = self._column(key, rows, members, plan.frames.tolist())
        for key, win in plan.windows.items():
            values[f"{key}_is_pad"] = list(win.is_pad)
        if self.mixed:
            values["dataset_index"] = list(member_index.astype(np.int64))
            for key in self.masks:
                values[f"{key}_is_missing"] = [np.asarray(self.fields[key].own[m.index] is None) for m in members]
            for key in self.dim_masks:
                f = self.fields[key]
                values[f"{key}_dim_is_pad"] = [np.arange(f.shape[0]) >= (f.own_shapes[m.index] or (0,))[0]
                                               for m in members]
        return values

    def build(self, plan: BatchPlan) -> Prepared:
        rows = [self.store.rows(int(p)) for p in plan.episodes]
        member_index, members = self._members(plan)
        values = self._tables(plan, rows, member_index, members)
        # frames the decoded-frame cache keeps, by its names: a sample whose frames are all held is not located
        cached = {k: s.held(plan, rows, self.locator) for k, s in self.sources.items()}
        cameras = {key: CameraBatch(plan, *self.locate(plan, rows, key, held_samples(cached[key])),
                                    cached[key], member_index) for key in self.sources}
        groups = self._groups(cameras, plan.size)
        host: dict[str, np.ndarray] = {}
        engine_values: dict[str, list] = {}
        for key, source in self.sources.items():
            t0 = time.perf_counter()
            got = source.frames_for(cameras[key])
            (engine_values if source.engine is not None else values).update(got.values)
            if got.host is not None:
                host[key] = got.host
            with self._count_lock:
                self.decode_s += time.perf_counter() - t0
                self.decoded_frames += got.decoded
        # the cameras' masks as `_tables` made them, per sample, before they are stacked into the graph's groups
        lacking = {key: np.array(values[f"{key}_is_missing"], bool) for key in self.masks if key in self.sources}
        stacked = [*self.table_keys, *(f"{k}_is_pad" for k in plan.windows)]
        if self.mixed:
            stacked += ["dataset_index", *(f"{k}_is_missing" for k in self.masks),
                        *(f"{k}_dim_is_pad" for k in self.dim_masks)]
        for key in stacked:  # a group of one sample: a view with the group's axis (DALI and `Delivery` copy it)
            values[key] = [np.stack(values[key])] if self.spec.one_group else \
                [np.stack(values[key][g:g + groups]) for g in range(0, plan.size, groups)] if groups > 1 \
                else [a[None] if a.flags.c_contiguous else np.stack([a]) for a in values[key]]
        if self.spec.augment_seed is not None:  # groups of one sample here (no joined streams with a hook)
            for k, key in enumerate(self.sources):
                values[f"{key}@rand"] = augment_randoms(self.spec.augment_seed, plan, k)
        tasks = [task_of(m.meta, r, f) for m, r, f in zip(members, rows, plan.frames.tolist())]
        asked = {key: (cameras[key].segs, cameras[key].idx) for key in self.dali_keys}
        engine_arrays = {route: [engine_values[o.name] for o in outs] for route, outs in self.engine_outputs.items()}
        texts = {key: [None if (own := self.fields[key].own[m.index]) is None else r[own][f]
                       for m, r, f in zip(members, rows, plan.frames.tolist())] for key in self.spec.text_keys}
        return Prepared(plan, [values[o.name] for o in self.outputs], tasks, host, groups, asked, engine_arrays,
                        texts=texts, lacking=lacking)

    def release(self) -> None:
        """Close the sources: drop the host-frame buffers (batches the caller holds stay valid) and the workers'
        DALI pipelines."""
        for source in self.sources.values():
            source.close()

    def _groups(self, cameras: Mapping[str, CameraBatch], size: int) -> int:
        """Samples per group of the graph's batch (`graph.joined`): `group_sizes(size, join_streams)` where every
        DALI-decoded camera's groups can each be one stream (their streams then set on `cameras`), else 1 (a clip
        per sample)."""
        dali = {k: s for k, s in self.sources.items() if s.counts is not None and k in cameras}
        if not self.spec.join_streams or not dali:
            return 1
        members = group_sizes(size, self.spec.join_streams)
        streams = {}
        for key, source in dali.items():
            joined = source.join(cameras[key].segs, cameras[key].idx, members)
            if joined is None:
                return 1
            streams[key] = joined
        for key, joined in streams.items():
            cameras[key].streams = joined
        for camera in cameras.values():
            camera.groups = members
        return members

    def streams_of(self, key: str, segs: list, idx: list[np.ndarray]) -> list[DaliInput]:
        """DALI-decoded camera `key`'s streams for these samples as the graph gets them, the camera alone: joined
        per group where they can be, else a clip a sample (for timing DALI's decoder: `tools.bench_limit`)."""
        camera = CameraBatch(None, segs, idx, None, np.zeros(len(segs), np.int64))  # type: ignore[arg-type]
        self._groups({key: camera}, len(segs))
        return camera.streams if camera.streams is not None else [dali_input(s, i) for s, i in zip(segs, idx)]

    def locate(self, plan: BatchPlan, rows: list[dict], key: str,
               held: list | None = None) -> tuple[list, list[np.ndarray]]:
        """Per sample, camera `key`'s segment and the frame indices in it to show (`Locator.locate`)."""
        return self.locator.locate(plan, rows, key, held)

    def cut_ahead(self, plan: BatchPlan) -> None:
        """Have the store begin cutting the pieces of long episodes `plan`'s samples will ask for (`Locator`)."""
        self.locator.cut_ahead(plan)

    def explain_dali_failure(self, pending: list[Prepared], exc: BaseException, node=None) -> DaliStreamError:
        """DALI's decoder failed on one of `pending` (in flight, oldest first) without naming a sample: what failed,
        which camera and episode, and the fix (`graph.forensics`)."""
        from .forensics import explain

        return explain(self, pending, exc, node)


def augment_randoms(seed: int, plan: BatchPlan, camera: int) -> list[np.ndarray]:
    """Each sample's AUGMENT_RANDOMS numbers for camera number `camera`: drawn per batch, or, for picked samples
    (`plan.picked`), per sample as `loader.dataset[i]` alone draws them (batch i of epoch 0 of one sample)."""
    if plan.samples is None:
        rng = np.random.default_rng([seed, plan.epoch, plan.index, camera, salts.AUGMENT])
        return list(rng.random((plan.size, AUGMENT_RANDOMS), dtype=np.float32))
    return [np.random.default_rng([seed, 0, int(i), camera, salts.AUGMENT]).random((1, AUGMENT_RANDOMS),
                                                                                   dtype=np.float32)[0]
            for i in plan.samples.tolist()]


_NO_BUFFERS = BufferPool(0)
