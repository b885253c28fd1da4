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

import functools
import threading
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, cast

import numpy as np

from ..decode.cpu import DecoderCache, torchcodec_frames, torchcodec_tensor
from ..decode.errors import classify, explain_device, stream_format
from ..decode.frames import FrameCache
from ..decode.route import DALI_CPU, NVDEC, keys_where
from ..decode.route import route as route_of
from ..decode.routes import DALI_CPU_CODECS
from ..errors import DaliStreamError, DecodeError
from ..fetch.segments import FIX_FILE
from ..fetch.tables import FRAME_TIME_S
from ..plan.epoch import BatchPlan
from .buffers import BufferPool
from .clips import DaliInput, dali_input
from .host import host_dtype, host_shape, scatter_frames
from .imageops import ImageOps
from .joined import group_sizes, join_group, join_pieces

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
                 frames: FrameCache | None = None) -> None:
        """`catalog` (`dali_stream.catalog.Catalog`): the episode positions the plans name, and each key's feature
        in each member (`routes`, `table_keys`, `table_dtypes` and `delta_indices` are in the catalog's keys: a
        mixture's). A mixture's batch also carries `dataset_index`, `<key>_is_missing` for keys some member lacks
        (zeros in the batch) and `<key>_dim_is_pad` for vectors some member has shorter (zero-padded); its cameras
        decode one clip per sample. `join_streams`: DALI-routed cameras decode a batch as at most this many groups, each group's clips
        joined into one stream (`graph.joined`); 0: one clip per sample (`graph.clips`); the loader's
        `resolve` says which (0 for a mixture, with an augmentation hook, or without a DALI-decoded camera). `augment_seed`: ship each camera AUGMENT_RANDOMS uniform numbers per sample, a pure function of
        (seed, epoch, batch, sample, camera), for an augmentation hook in the graph (None: no hook).
        `image_ops`: given, torchcodec cameras skip the graph (host frames, `graph.host`): their frames are laid
        out as these ops say into `Prepared.host`, `lookahead` batches ahead of the one handed over. `engines`: route ->
        the open-decoder engine (`decode.engine`) that decodes that route's cameras; their frames go to the graph
        through a source of their own per route (`engine_outputs`, `Prepared.engine_arrays`). `join_all`: a torchcodec
        camera's clips of whole episodes are joined into one stream per batch too, not only long episodes' pieces
        (a global shuffle: a batch's samples come from as many episodes, and a decoder kept per episode would be
        opened per sample). `frames`: the decoded-frame cache torchcodec cameras read before decoding
        (`decode.frames`; None: every frame decoded)."""
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
        self.host_keys = keys_where(self.routes, "torchcodec") if image_ops is not None else []
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
            elif route_of(route).in_dali:
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
        self.decode_s = 0.0  # seconds spent in CPU (torchcodec) decoding (and host frames' layout), summed over threads
        self.decoded_frames = 0
        # per DALI-routed camera: [samples, streams (decoders DALI opened: one per joined stream or per sample),
        # frames DALI's decoder works through (clip frames up to the last asked)]
        self.dali_counts = {k: [0, 0, 0] for k in keys_where(self.routes, "in_dali")}
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
        located = {key: self.locate(plan, rows, key) for key in self.routes}
        groups, streams = self.group_streams(located, plan.size)
        for key, inputs in streams.items():
            values[f"{key}@encoded"] = [d.data for d in inputs]
            values[f"{key}@frames"] = [d.frames for d in inputs]
            values[f"{key}@order"] = [d.order for d in inputs]
            self._count(key, plan.size, len(inputs), sum(d.frames_fed for d in inputs))
        engine_values: dict[str, list] = {}
        for key, route in self.routes.items():
            if route_of(route).in_dali:
                continue
            segs, idx = located[key]
            t0 = time.perf_counter()
            # torchcodec cameras' frames by the cache's names (before pieces are joined: `_decode_cpu`)
            names = frame_keys(segs, idx, self.frames) if self.frames is not None and not route_of(route).engine \
                else None
            if route_of(route).engine:
                pictures, frames_decoded = self._decode_engine(route, key, segs, idx, member_index)
                span = groups * len(idx[0])  # every sample of a camera has the same steps
                engine_values[f"{key}@decoded"] = [pictures[g:g + span] for g in range(0, len(pictures), span)]
            elif key in self.host_keys:
                image_ops = cast(ImageOps, self.image_ops)
                size = self.fields[key].shape[:2]
                host[key], frames_decoded = self._decode_cpu(
                    key, segs, idx, lambda s, i: decode_host(s, i, self.decoders, self.buffers, image_ops, size,
                                                             self.frames, names))
            else:
                pixels, frames_decoded = self._decode_cpu(
                    key, segs, idx, lambda s, i: decode_grouped(s, i, self.decoders, self._blank(key, len(i[0])),
                                                                self.frames, names))
                values[f"{key}@pixels"] = pixels if groups == 1 else [
                    np.concatenate(pixels[g:g + groups]) for g in range(0, plan.size, groups)]
            with self._count_lock:
                self.decode_s += time.perf_counter() - t0
                self.decoded_frames += frames_decoded
        stacked = [*self.table_keys, *(f"{k}_is_pad" for k in plan.windows)]
        if self.mixed:
            stacked += ["dataset_index", *(f"{k}_is_missing" for k in self.masks),
                        *(f"{k}_dim_is_pad" for k in self.dim_masks)]
        for key in stacked:
            values[key] = [np.stack(values[key][g:g + groups]) for g in range(0, plan.size, groups)]
        if self.augment_seed is not None:  # groups of one sample here (no joined streams with a hook)
            for k, key in enumerate(self.routes):
                rng = np.random.default_rng([self.augment_seed, plan.epoch, plan.index, k, 0xA6])
                values[f"{key}@rand"] = list(rng.random((plan.size, AUGMENT_RANDOMS), dtype=np.float32))
        tasks = [m.meta.tasks.get(int(r["task_index"][f]), "") for m, r, f in zip(members, rows, frames)]
        asked = {key: located[key] for key in streams}
        engine_arrays = {route: [engine_values[o.name] for o in outs] for route, outs in self.engine_outputs.items()}
        return Prepared(plan, [values[o.name] for o in self.outputs], tasks, host, groups, asked, engine_arrays)

    def _blank(self, key: str, steps: int) -> np.ndarray:
        """A mixture's frames for a sample whose member lacks camera `key`: zeros (steps, H, W, 3); the loader
        zeroes them again after the graph's image ops (mean/std would move them off 0)."""
        h, w = self.fields[key].shape[:2]
        return np.zeros((steps, h, w, 3), np.uint8)

    def _decode_engine(self, route: str, key: str, segs: list, idx: list[np.ndarray], member_index: np.ndarray):
        """Camera `key`'s frames from the open-decoder engine of `route`, sample after sample: one call per member
        (its stream kind and size are its own: the engine keeps decoders per member camera, `engine_camera`)."""
        engine = self.engines[route]
        if not self.mixed:
            return engine.decode(key, segs, idx)
        by_sample: list[Any] = [None] * len(segs)
        decoded = 0
        lacking = []  # samples of members without the camera: zeros, in the decoded frames' kind and device
        for m in np.unique(member_index).tolist():
            sel = np.flatnonzero(member_index == m).tolist()
            if segs[sel[0]] is None:
                lacking += sel
                continue
            frames, n = engine.decode(engine_camera(key, self.catalog.members[m].name, True),
                                      [segs[j] for j in sel], [idx[j] for j in sel])
            steps = len(idx[sel[0]])
            for k, j in enumerate(sel):
                by_sample[j] = frames[k * steps:(k + 1) * steps]
            decoded += n
        on_host = all(f is None or isinstance(f, np.ndarray) for f in by_sample)
        if on_host:
            for j in lacking:
                by_sample[j] = self._blank(key, len(idx[j]))
            return np.concatenate(by_sample), decoded
        # nvdec-open: CUDA tensors; the blanks made on the engine's hand-off stream, the samples joined there
        # (`OpenDecoders.hand_over`: no part's memory is reused before the join has read it)
        import torch

        device = next(f for f in by_sample if f is not None).device
        with torch.cuda.stream(engine.stream):
            for j in lacking:
                by_sample[j] = torch.zeros((len(idx[j]), *self.fields[key].shape[:2], 3), dtype=torch.uint8,
                                           device=device)
        return engine.hand_over(by_sample), decoded

    def _decode_cpu(self, key: str, segs: list, idx: list[np.ndarray], decode: Callable[[list, list], Any]) -> Any:
        """`decode(segs, idx)` of a torchcodec camera, its pieces of long episodes (one per sample) joined into one
        stream first (`join_pieces`): one decoder opened for them instead of one per piece. Should a joined stream
        fail (its frames are checked like any), the camera's pieces are decoded one by one from then on, said once."""
        pieces = [j for j, seg in enumerate(segs) if seg is not None and (seg.piece or self.join_all)] \
            if key not in self._join_failed else []
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
        keys = [k for k in located if route_of(self.routes[k]).in_dali]
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

    def locate(self, plan: BatchPlan, rows: list[dict], key: str) -> tuple[list, list[np.ndarray]]:
        """Per sample of `plan`: camera `key`'s episode segment and the frame indices in it to show (for a
        mixture's sample whose member lacks the camera: None and as many zeros as the key's steps)."""
        segs: list[Any] = []
        idx: list[np.ndarray] = []
        f = self.fields[key]
        steps = plan.windows[key].rows.shape[1] if key in plan.windows else 1
        for j, (pos, r) in enumerate(zip(plan.episodes, rows)):
            member, _ = self.catalog.locate(int(pos))
            own = f.own[member.index]
            if own is None:
                segs.append(None)
                idx.append(np.zeros(steps, dtype=np.int64))
                continue
            query = self.query_s(plan, j, key, r)
            seg = self.store.segment_for(int(pos), own, query, key=piece_key(plan, j, key))
            segs.append(seg)
            tolerance = member.tolerance_s if member.tolerance_s is not None else self.tolerance_s
            idx.append(seg.frame_indices(query, tolerance, f"frame {int(plan.frames[j])}"))
        return segs, idx

    def query_s(self, plan: BatchPlan, j: int, key: str, rows: dict) -> np.ndarray:
        """The file times sample `j` of `plan` shows of camera `key` (`rows`: its episode's table rows)."""
        sel = plan.windows[key].rows[j] if key in plan.windows else plan.frames[j:j + 1]
        member, local = self.catalog.locate(int(plan.episodes[j]))
        return float(member.camera(key).from_timestamp[local]) + rows[FRAME_TIME_S][sel]

    def cut_ahead(self, plan: BatchPlan) -> None:
        """Have the store begin cutting the pieces of long episodes `plan`'s samples will ask for (`fetch.store`),
        before a builder takes the batch up: one task for the batch, its reads coalesced."""
        asks = []
        for key in self.routes:
            f = self.fields[key]
            for j, pos in enumerate(plan.episodes):
                own = f.own[self.catalog.locate(int(pos))[0].index]
                if own is not None:
                    asks.append((piece_key(plan, j, key), int(pos), own, functools.partial(self.query_s, plan, j, key)))
        self.store.cut_ahead(asks)

    def explain_dali_failure(self, pending: list[Prepared], exc: BaseException, node=None) -> DaliStreamError:
        """DALI's decoder failed on one of `pending` (in flight, oldest first) without naming a sample: say what
        failed (this GPU, or one stream), which camera and which episode, and the fix."""
        failure = classify(str(exc))
        dali_keys = keys_where(self.routes, "in_dali")
        nvdec = {k: [seg for b in pending for seg in b.asked.get(k, ([], []))[0]]
                 for k, r in self.routes.items() if r == NVDEC.name}
        found = explain_device(failure, nvdec, node)
        if found is not None:
            return found
        if failure.kind == "out-of-bounds":
            found = self._out_of_bounds(pending, failure)
            if found is not None:
                return found
        found = self._unopened(pending, failure) if failure.kind == "unopened" else None
        found = found or self._check_asked_frames(pending, failure)
        if found is not None:
            return found
        episodes = self.catalog.episodes_text([p for b in pending for p in b.plan.episodes])
        if not dali_keys:
            return DecodeError(f"DALI pipeline failed: {failure.line}")
        return DecodeError(
            f"DALI's video decoder failed ({failure.line}) on a batch with {episodes} of cameras "
            f"{dali_keys}, although torchcodec decodes every frame those batches asked for: the failure is "
            f"DALI's, not the data's. Route the cameras through torchcodec with "
            f"decode={dict.fromkeys(dali_keys, 'cpu')!r}, and report it with the output of "
            "`dali-stream diagnose DATASET --decode-test --json`")

    def _unopened(self, pending: list[Prepared], failure) -> DecodeError | None:
        """DALI could not open a stream (`decode.errors`, kind "unopened"): the first clip or joined stream handed
        to it that FFmpeg cannot open either, or whose codec DALI's CPU decoder lacks (the bytes DALI got, not the
        segment they were cut from). NVDEC's refusals were asked before (`explain_device`)."""
        for prepared in pending:
            for key in prepared.asked:
                for g, data in enumerate(prepared.arrays[self._slot[f"{key}@encoded"]]):
                    fmt = stream_format(np.asarray(data).tobytes())
                    n = prepared.members
                    eps = self.catalog.episodes_text(prepared.plan.episodes[g * n:(g + 1) * n])
                    where = f"camera {key!r}, {eps}"
                    if fmt is None:
                        return DecodeError(
                            f"DALI's video decoder could not open the stream cut for {where} ({failure.line}), and "
                            f"FFmpeg cannot open it either: the cut is wrong, not the file. Decode the camera with "
                            f"torchcodec, decode={{{key!r}: 'cpu'}}, and report it with "
                            "`dali-stream diagnose DATASET --decode-test --json`")
                    if self.routes[key] == DALI_CPU.name and fmt.codec not in DALI_CPU_CODECS:
                        member = self.catalog.locate(int(prepared.plan.episodes[g * n]))[0]
                        claimed = member.camera(key).codec
                        return DecodeError(
                            f"DALI's CPU decoder could not open {where}: the stream is {fmt.describe()}, and it "
                            f"decodes only {', '.join(sorted(DALI_CPU_CODECS))} ({failure.line}); meta/info.json "
                            f"says {claimed!r}. Fix info.json's video.codec for the camera, or decode it with "
                            f"torchcodec: decode={{{key!r}: 'cpu'}}")
        return None

    def _check_asked_frames(self, pending: list[Prepared], failure) -> DecodeError | None:
        """The frames the failed batches asked of their DALI-routed cameras, decoded by torchcodec from their
        segments, each frame's time checked: the first that fails names its episode and camera. Only those
        frames: a whole segment of an hour-long episode would take minutes."""
        for prepared in pending:
            for key, (segs, asked) in prepared.asked.items():
                by_seg: dict[int, tuple[Any, list[np.ndarray]]] = {}
                for seg, idx in zip(segs, asked):
                    by_seg.setdefault(seg.uid, (seg, []))[1].append(np.asarray(idx))
                for seg, parts in by_seg.values():
                    try:
                        torchcodec_frames(seg, np.unique(np.concatenate(parts)))
                    except DecodeError as cpu_exc:
                        return DecodeError(f"DALI's video decoder failed ({failure.line}) on episode {seg.episode}, "
                                           f"camera {key!r}; the CPU check agrees: {cpu_exc}")
        return None

    def _out_of_bounds(self, pending: list[Prepared], failure) -> DecodeError | None:
        """The sample that asked DALI for frame `failure.frame` of a stream DALI found shorter."""
        for prepared in pending:
            for key, route in self.routes.items():
                if not route_of(route).in_dali:
                    continue
                frames = prepared.arrays[self._slot[f"{key}@frames"]]
                for j, idx in enumerate(frames):
                    if failure.frame is not None and failure.frame in np.asarray(idx).tolist():
                        if prepared.members > 1:
                            return self._joined_out_of_bounds(prepared, key, j, failure)
                        seg = prepared.asked[key][0][j]
                        return DecodeError(
                            f"DALI's video decoder found {failure.frames} frames in the clip of episode "
                            f"{seg.episode}, camera {key!r} (cut from {seg.source}) but frame {failure.frame} was "
                            "asked for: the file's index lists more frames than the stream decodes. The file is "
                            f"damaged: {FIX_FILE}; or decode the camera with torchcodec: decode={{{key!r}: 'cpu'}}")
        return None

    def _joined_out_of_bounds(self, prepared: Prepared, key: str, group: int, failure) -> DecodeError:
        """A joined stream (`graph.joined`) decoded shorter than its clips' sample tables say: name its episodes,
        and whether the clips decode apart (then joining them is what failed)."""
        n = prepared.members
        segs = prepared.asked[key][0][group * n:(group + 1) * n]
        episodes = sorted({seg.episode for seg in segs})
        what = (f"DALI's video decoder found {failure.frames} frames in a stream joining the clips of episodes "
                f"{episodes}, camera {key!r}, where frame {failure.frame} was asked for")
        for seg in {seg.uid: seg for seg in segs}.values():
            try:
                torchcodec_frames(seg, np.arange(len(seg.pts_s)))
            except DecodeError as exc:
                return DecodeError(f"{what}; the CPU check finds a damaged segment: {exc}")
        return DecodeError(f"{what}, although every one of those segments decodes apart: joining these clips is what "
                           "failed. Decode one clip per sample with join_streams=0, and report it with "
                           "`dali-stream diagnose DATASET --decode-test --json`")


def piece_key(plan: BatchPlan, j: int, camera: str) -> tuple[int, int, int, str]:
    """What names the piece of a long episode sample `j` of `plan` reads of `camera` (`EpisodeStore.cut_ahead`)."""
    return plan.epoch, plan.index, j, camera


def engine_camera(key: str, member: str, mixed: bool) -> str:
    """The open-decoder engine's name for a camera (its decoders are kept per name): a mixture's member cameras
    under one key may differ in codec and size, so each member's is its own."""
    return f"{key}@{member}" if mixed else key


def decode_segments(segs, idx, cache, frames: FrameCache | None = None, keys: list | None = None):
    """Decode each distinct segment of a batch's camera once (its distinct frames in one call); samples without a
    segment (None: a mixture's member lacking the camera) are skipped. With `frames` (the decoded-frame cache) and
    `keys` (per sample, the cache's name of each of its frames: `frame_keys`), frames found there are not decoded
    and those decoded are kept there.

    Yields (members, wanted, pixels, decoded): the batch positions using the segment, the sorted distinct frame
    indices, their pixels (len(wanted), H, W, 3) uint8 (an array, or a list of (H, W, 3) arrays where some came
    from the cache) and how many of them were decoded."""
    by_seg: dict[int, tuple[Any, list[int]]] = {}
    for j, seg in enumerate(segs):
        if seg is None:
            continue
        by_seg.setdefault(seg.uid, (seg, []))[1].append(j)
    for seg, members in by_seg.values():
        wanted = np.unique(np.concatenate([idx[j] for j in members]))
        if frames is None or keys is None:
            yield members, wanted, torchcodec_tensor(seg, wanted, cache).numpy(), len(wanted)
            continue
        name: dict[int, tuple[str, int]] = {}
        for j in members:
            name.update(zip(idx[j].tolist(), keys[j]))
        names = [name[w] for w in wanted.tolist()]
        found = [frames.get(k) for k in names]
        missing = [n for n, f in enumerate(found) if f is None]
        if missing:
            decoded = torchcodec_tensor(seg, wanted[missing], cache).numpy()
            frames.put([names[n] for n in missing], decoded)
            if len(missing) == len(wanted):
                yield members, wanted, decoded, len(missing)
                continue
            for n, picture in zip(missing, decoded):
                found[n] = picture
        yield members, wanted, found, len(missing)  # a list: the frames are not copied into one array first


def frame_keys(segs, idx, frames: FrameCache) -> list:
    """Per sample, the decoded-frame cache's name of each frame `idx[j]` of `segs[j]` (None without a segment):
    its video file and file time, whatever segment or piece it was cut in."""
    return [None if seg is None else [frames.key(seg.source, t) for t in seg.pts_s[i].tolist()]
            for seg, i in zip(segs, idx)]


def decode_grouped(segs, idx, cache, blank: np.ndarray | None = None, frames: FrameCache | None = None,
                   keys: list | None = None) -> tuple[list[np.ndarray], int]:
    """Per sample, its frames (T, H, W, 3) uint8 (for DALI's graph), and how many frames were decoded; `blank`
    for a sample without a segment; `frames`, `keys`: the decoded-frame cache (`decode_segments`)."""
    out: list[np.ndarray | None] = [blank if seg is None else None for seg in segs]
    decoded = 0
    for members, wanted, pixels, n in decode_segments(segs, idx, cache, frames, keys):
        decoded += n
        for j in members:
            at = np.searchsorted(wanted, idx[j])
            out[j] = pixels[at] if isinstance(pixels, np.ndarray) else np.stack([pixels[k] for k in at])
    return cast("list[np.ndarray]", out), decoded  # every sample's slot was filled above


def decode_host(segs, idx, cache, pool: BufferPool, image_ops: ImageOps, size: tuple[int, int] | None = None,
                frames: FrameCache | None = None, keys: list | None = None):
    """The batch's frames of one camera as one array of `pool` (`host_shape`), laid out as `image_ops` says
    (host frames, `graph.host`), and how many frames were decoded. `size`: (H, W) of the camera, for a batch
    none of whose samples has a segment (a mixture's members that lack it: zeros); `frames`, `keys`: the
    decoded-frame cache (`decode_segments`)."""
    out = None
    if size is not None and all(seg is None for seg in segs):
        out = pool.take(host_shape(image_ops, len(segs), len(idx[0]), *size), host_dtype(image_ops))
    decoded = 0
    for members, wanted, pixels, n in decode_segments(segs, idx, cache, frames, keys):
        if out is None:
            h, w, _ = pixels[0].shape
            out = pool.take(host_shape(image_ops, len(segs), len(idx[0]), h, w), host_dtype(image_ops))
        scatter_frames(out, pixels, members, wanted, idx, image_ops)
        decoded += n
    if out is not None:
        for j, seg in enumerate(segs):
            if seg is None:  # a mixture's member without the camera: zeros (a reused buffer holds old frames)
                out[j] = 0
    return out, decoded
