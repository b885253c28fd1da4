"""Turn a BatchPlan into the arrays the DALI graph's external source hands out, one list per output.

Per sample: the episode's rows give the tabular values (windowed keys gather their clamped rows) and the
timestamps each camera must show; a camera's timestamps become frame indices in its episode segment by
nearest pts. The graph's batch is the batch's samples in groups of `Prepared.members` (contiguous, equal
size; `graph.joined`): every output carries a group's members together, tables stacked (members, ...) and
cameras as (members x steps) frames, so the loader reshapes the graph's outputs into per-sample views. DALI-
decoded cameras ship per group one stream, its distinct frames and the order that lays them out member by
member, step by step: the members' clips joined (`joined`), or with groups of one a per-sample clip
(`clips`); torchcodec cameras ship decoded frames (HWC), or with host frames (`graph.host`: batches on the
CPU, no DALI image ops) skip the graph as one CHW tensor per camera in `Prepared.host`. Everything else in
the batch (`task` strings) rides alongside.
"""

from __future__ import annotations

import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, cast

import numpy as np

from ..decode.cpu import DecoderCache
from ..decode.frames import FrameCache
from ..decode.route import keys_where
from ..decode.route import route as route_of
from ..errors import DaliStreamError, DecodeError
from ..plan import salts
from ..plan.epoch import BatchPlan
from .buffers import BufferPool
from .clips import DaliInput, dali_input
from .engine_frames import EngineFrames
from .imageops import ImageOps
from .joined import group_sizes, join_group, join_pieces
from .locate import Locator
from .segment_frames import Held, decode_grouped, decode_host, held_samples

AUGMENT_RANDOMS = 16  # uniform [0, 1) numbers per sample and camera handed to an augmentation hook


@dataclass(frozen=True)
class Output:
    """One external-source output: what it carries and for which key."""

    name: str  # unique output name inside the graph
    kind: str  # "encoded" | "frames" | "order" | "pixels" | "decoded" | "rand" | "table"
    key: str  # feature key (or "<key>_is_pad") it belongs to
    dtype: np.dtype
    ndim: int


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
    engine_arrays: dict[str, list[list[Any]]] = field(default_factory=dict)
    # camera -> its output tensor already laid out and through `image_transforms` (by the worker that built the
    # batch, `transforms.TransformPool`): the caller hands it over as it is
    images: dict[str, Any] = field(default_factory=dict)


class BatchBuilder:
    def __init__(self, catalog, store, decoders: DecoderCache, routes: Mapping[str, str],
                 delta_indices: Mapping[str, tuple[int, ...]],
                 tolerance_s: float, table_keys: list[str], table_dtypes: Mapping[str, tuple[np.dtype, int]],
                 augment_seed: int | None = None, image_ops: ImageOps | None = None, lookahead: int = 0,
                 join_streams: int = 0, engines: Mapping[str, Any] | None = None, join_all: bool = False,
                 frames: FrameCache | None = None, resizers: Mapping[str, Any] | None = None,
                 dali_workers: Mapping[str, Any] | None = None) -> None:
        """`catalog` (`dali_stream.meta.catalog.Catalog`): the episode positions the plans name, and each key's feature
        in each member (`routes`, `table_keys`, `table_dtypes` and `delta_indices` are in the catalog's keys: a
        mixture's). A mixture's batch also carries `dataset_index`, `<key>_is_missing` for keys some member lacks
        (zeros in the batch) and `<key>_dim_is_pad` for vectors some member has shorter (zero-padded); its cameras
        decode one clip per sample. `join_streams`: DALI-routed cameras decode a batch as at most this many groups, each group's clips
        joined into one stream (`graph.joined`); 0: one clip per sample (`graph.clips`); the loader's
        `resolve` says which (0 for a mixture, with an augmentation hook, or without a DALI-decoded camera). `augment_seed`: ship each camera AUGMENT_RANDOMS uniform numbers per sample, a pure function of
        (seed, epoch, batch, sample, camera), for an augmentation hook in the graph (None: no hook).
        `image_ops`: given, the cameras decoded on the workers (torchcodec, `dali_workers`) skip the graph (host
        frames, `graph.host`): their frames are laid out as these ops say into `Prepared.host`, `lookahead` batches
        ahead of the one handed over. `engines`: route ->
        the open-decoder engine (`decode.engine`) that decodes that route's cameras; their frames go to the graph
        through a source of their own per route (`engine_outputs`, `Prepared.engine_arrays`). `join_all`: a torchcodec
        camera's clips of whole episodes are joined into one stream per batch too, not only long episodes' pieces
        (a global shuffle: a batch's samples come from as many episodes, and a decoder kept per episode would be
        opened per sample). `frames`: the decoded-frame cache the cameras it labels read before decoding
        (`decode.frames`; None: every frame decoded); `resizers`: camera -> the `graph.resizer.Resizer` its frames
        go through before the cache keeps them (the graph then neither resizes nor crops them); `dali_workers`:
        DALI-routed camera -> the decoder that decodes it on the workers instead of the graph (`graph.dali_frames`:
        the cache keeps its pictures)."""
        self.catalog = catalog
        self.mixed = catalog.is_mixture
        self.fields = catalog.fields
        self.augment_seed = augment_seed
        self.store = store
        self.decoders = decoders
        self.routes = dict(routes)
        self.engines = dict(engines or {})
        lacking = sorted({r for r in self.routes.values() if route_of(r).engine} - set(self.engines))
        if lacking:
            raise ValueError(f"routes {lacking} need their open-decoder engine")  # the loader makes them
        self.delta = dict(delta_indices)
        self.table_dtypes = dict(table_dtypes)
        self.tolerance_s = tolerance_s
        self.table_keys = table_keys
        self.join_streams = join_streams
        if image_ops is not None and augment_seed is not None:
            raise ValueError("host frames skip the graph, where augmentation runs")  # `resolve` rules it out
        self.dali_workers = dict(dali_workers or {})
        # cameras DALI decodes in the graph (the others' pictures come decoded, by the workers or an engine)
        self.dali_keys = [k for k in keys_where(self.routes, "in_dali") if k not in self.dali_workers]
        self.host_keys = [k for k, r in self.routes.items() if route_of(r).torchcodec or k in self.dali_workers] \
            if image_ops is not None else []
        self.image_ops = image_ops
        # Host-frame buffers alive at once: the batches built ahead (`lookahead` + 1), the one DALI holds and the
        # one the caller holds, per host camera (cameras of one shape share them).
        self.buffers = BufferPool((lookahead + 3) * max(1, len(self.host_keys)))
        outputs: list[Output] = []
        self.engine_outputs: dict[str, list[Output]] = {}
        for key, route in self.routes.items():
            if key in self.host_keys:
                continue
            if route_of(route).engine:
                self.engine_outputs.setdefault(route, []).append(
                    Output(f"{key}@decoded", "decoded", key, np.dtype(np.uint8), 4))
            elif key in self.dali_keys:
                outputs.append(Output(f"{key}@encoded", "encoded", key, np.dtype(np.uint8), 1))
                outputs.append(Output(f"{key}@frames", "frames", key, np.dtype(np.int32), 1))
                outputs.append(Output(f"{key}@order", "order", key, np.dtype(np.int32), 1))
            else:
                outputs.append(Output(f"{key}@pixels", "pixels", key, np.dtype(np.uint8), 4))
        if augment_seed is not None:
            outputs += [Output(f"{key}@rand", "rand", key, np.dtype(np.float32), 1) for key in self.routes]
        for key in table_keys:  # a group's members stacked: one more axis than a sample's value
            dtype, ndim = table_dtypes[key]
            outputs.append(Output(key, "table", key, dtype, ndim + 1 + (1 if key in self.delta else 0)))
        for key in self.delta:
            outputs.append(Output(f"{key}_is_pad", "table", f"{key}_is_pad", np.dtype(np.bool_), 2))
        # a mixture's: which member, which keys it lacks, which vector elements are padding
        self.masks = [k for k in [*self.routes, *table_keys] if self.mixed and self.fields[k].missing]
        self.dim_masks = [k for k in table_keys if self.mixed and self.fields[k].padded]
        if self.mixed:
            outputs.append(Output("dataset_index", "table", "dataset_index", np.dtype(np.int64), 1))
            outputs += [Output(f"{k}_is_missing", "table", f"{k}_is_missing", np.dtype(np.bool_), 1)
                        for k in self.masks]
            outputs += [Output(f"{k}_dim_is_pad", "table", f"{k}_dim_is_pad", np.dtype(np.bool_), 2)
                        for k in self.dim_masks]
        self._table_shapes = {k: self._frame_shape(k, table_dtypes[k]) for k in table_keys}
        self.outputs = outputs
        self._slot = {o.name: i for i, o in enumerate(outputs)}
        self.join_all = join_all
        self.frames = frames
        self.resizers = dict(resizers or {})
        self.locator = Locator(catalog, store, self.routes, tolerance_s, frames)
        self.engine_frames = EngineFrames(catalog, self.engines, self.resizers, frames, self._blank)
        self.decode_s = 0.0  # seconds spent in CPU (torchcodec) decoding (and host frames' layout), summed over threads
        self.decoded_frames = 0
        # per DALI-routed camera: [samples, streams (decoders DALI opened: one per joined stream or per sample),
        # frames DALI's decoder works through (clip frames up to the last asked)]
        self.dali_counts = {k: [0, 0, 0] for k in self.dali_keys}
        self._join_failed: set[str] = set()  # cameras whose joined pieces failed to decode (`_decode_cpu`)
        self._count_lock = threading.Lock()

    def _count(self, key: str, samples: int, streams: int, frames_fed: int) -> None:
        with self._count_lock:
            counts = self.dali_counts.setdefault(key, [0, 0, 0])
            counts[0] += samples
            counts[1] += streams
            counts[2] += frames_fed

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
    def graph_routes(self) -> dict[str, str]:
        """The cameras that go through the DALI graph (all but host frames), with their routes."""
        return {k: r for k, r in self.routes.items() if k not in self.host_keys}

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

    def build(self, plan: BatchPlan) -> Prepared:
        store = self.store
        rows = [store.rows(int(p)) for p in plan.episodes]
        frames = plan.frames
        member_index, members = self._members(plan)
        values: dict[str, list[np.ndarray]] = {}
        for key in self.table_keys:
            if key in plan.windows:
                values[key] = [np.ascontiguousarray(v) for v in self._column(key, rows, members, list(plan.windows[key].rows))]
            else:
                values[key] = self._column(key, rows, members, frames.tolist())
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
        host: dict[str, np.ndarray] = {}
        # frames the decoded-frame cache keeps, by its names: a sample whose frames are all held is not located
        cached = {k: self.frames.look(self.locator.cache_names(plan, rows, k)) for k in self.routes
                  if self.frames is not None and k in self.frames.labels}
        located = {key: self.locate(plan, rows, key, held_samples(cached.get(key))) for key in self.routes}
        groups, streams = self.group_streams(located, plan.size)
        for key, inputs in streams.items():
            values[f"{key}@encoded"] = [d.data for d in inputs]
            values[f"{key}@frames"] = [d.frames for d in inputs]
            values[f"{key}@order"] = [d.order for d in inputs]
            self._count(key, plan.size, len(inputs), sum(d.frames_fed for d in inputs))
        engine_values: dict[str, list] = {}
        for key, route in self.routes.items():
            if key in self.dali_keys:
                continue
            segs, idx = located[key]
            t0 = time.perf_counter()
            names = cached.get(key)
            if route_of(route).engine:
                pictures, frames_decoded = self.engine_frames(route, key, segs, idx, member_index, names)
                span = groups * len(idx[0])  # every sample of a camera has the same steps
                engine_values[f"{key}@decoded"] = pictures if isinstance(pictures, list) else [
                    pictures[g:g + span] for g in range(0, len(pictures), span)]  # a list: per sample (a mixture)
            elif key in self.host_keys:
                image_ops = cast(ImageOps, self.image_ops)
                size = self.fields[key].shape[:2]
                host[key], frames_decoded = self._decode_cpu(
                    key, segs, idx, lambda s, i: decode_host(s, i, self.decoders, self.buffers, image_ops, size,
                                                             self.frames, names, self.dali_workers.get(key)))
            else:
                pixels, frames_decoded = self._decode_cpu(
                    key, segs, idx, lambda s, i: decode_grouped(s, i, self.decoders, self._blank(key, len(i[0])),
                                                                self.frames, names, self.resizers.get(key),
                                                                self.dali_workers.get(key)))
                values[f"{key}@pixels"] = pixels if groups == 1 else [
                    np.concatenate(pixels[g:g + groups]) for g in range(0, plan.size, groups)]
            with self._count_lock:
                self.decode_s += time.perf_counter() - t0
                self.decoded_frames += frames_decoded
        stacked = [*self.table_keys, *(f"{k}_is_pad" for k in plan.windows)]
        if self.mixed:
            stacked += ["dataset_index", *(f"{k}_is_missing" for k in self.masks),
                        *(f"{k}_dim_is_pad" for k in self.dim_masks)]
        for key in stacked:  # a group of one sample: a view with the group's axis (DALI and `Delivery` copy it)
            values[key] = [np.stack(values[key][g:g + groups]) for g in range(0, plan.size, groups)] if groups > 1 \
                else [a[None] if a.flags.c_contiguous else np.stack([a]) for a in values[key]]
        if self.augment_seed is not None:  # groups of one sample here (no joined streams with a hook)
            for k, key in enumerate(self.routes):
                rng = np.random.default_rng([self.augment_seed, plan.epoch, plan.index, k, salts.AUGMENT])
                values[f"{key}@rand"] = list(rng.random((plan.size, AUGMENT_RANDOMS), dtype=np.float32))
        tasks = [m.meta.tasks.get(int(r["task_index"][f]), "") for m, r, f in zip(members, rows, frames)]
        asked = {key: located[key] for key in streams}
        engine_arrays = {route: [engine_values[o.name] for o in outs] for route, outs in self.engine_outputs.items()}
        return Prepared(plan, [values[o.name] for o in self.outputs], tasks, host, groups, asked, engine_arrays)

    def release(self) -> None:
        """Drop the host-frame buffers (batches the caller holds stay valid) and the workers' DALI pipelines."""
        self.buffers.clear()
        for pipelines in [*self.resizers.values(), *self.dali_workers.values()]:
            pipelines.close()

    def _blank(self, key: str, steps: int) -> np.ndarray:
        """A mixture's frames for a sample whose member lacks camera `key`: zeros (steps, H, W, 3); the loader
        zeroes them again after the graph's image ops (mean/std would move them off 0)."""
        h, w = self.resizers[key].out if key in self.resizers else self.fields[key].shape[:2]
        return np.zeros((steps, h, w, 3), np.uint8)

    def _decode_cpu(self, key: str, segs: list, idx: list[np.ndarray], decode: Callable[[list, list], Any]) -> Any:
        """`decode(segs, idx)` of a camera decoded on the workers; a torchcodec camera's pieces of long episodes (one
        per sample) joined into one stream first (`join_pieces`): one decoder opened for them instead of one per
        piece. Should a joined stream fail (its frames are checked like any), the camera's pieces are decoded one by
        one from then on, said once."""
        pieces = [j for j, seg in enumerate(segs) if seg is not None and not isinstance(seg, Held)
                  and (seg.piece or self.join_all)] \
            if key not in self._join_failed and key not in self.dali_workers else []
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
                              "piece: slower). Please report it with the output of `dali-stream verify DATASET "
                              "--decode`", stacklevel=2)
        return decode(segs, idx)

    def group_streams(self, located: Mapping[str, tuple[list, list[np.ndarray]]],
                     size: int) -> tuple[int, dict[str, list[DaliInput]]]:
        """Samples per group and, per DALI-routed camera, one stream per group (`graph.joined`): groups of
        `group_sizes(size, join_streams)`, or of one sample (a clip each) when joining is off or some group of
        some camera cannot be one stream."""
        keys = [k for k in located if k in self.dali_keys]
        if self.join_streams and keys:
            members = group_sizes(size, self.join_streams)
            streams: dict[str, list[DaliInput]] = {}
            for key in keys:
                segs, idx = located[key]
                joined = [join_group(segs[g:g + members], idx[g:g + members]) for g in range(0, size, members)]
                if any(j is None for j in joined):
                    break
                streams[key] = cast("list[DaliInput]", joined)
            else:
                return members, streams
        return 1, {key: [dali_input(seg, i) for seg, i in zip(*located[key])] for key in keys}

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
