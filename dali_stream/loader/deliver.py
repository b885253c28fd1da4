"""The caller's batches of one epoch, from the run-ahead (`loader.schedule`): through the DALI graph, or without one
(`host_batches`: the workers' host frames and tables), each laid out as lerobot's batch
(`Delivery.batch`) with `image_transforms` applied."""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generator, Mapping

import numpy as np

from ..decode.errors import classify
from ..decode.route import Route
from ..errors import DaliStreamError
from ..graph.batches import Prepared
from ..graph.host import to_output
from ..graph.transforms import apply, plan_seeds
from .schedule import Schedule

if TYPE_CHECKING:
    from ..config import LoaderConfig
    from ..decode.node import Node
    from ..graph.batches import BatchBuilder
    from ..graph.imageops import ImageOps
    from ..graph.transforms import TransformPool
    from .assemble import Stages
    from .resolve import Resolved


class Batch(dict):
    """A batch as the caller gets it: a plain dict of lerobot's keys (tensors, and `task`), whose missing key is a
    KeyError naming the keys it has and the nearest ones."""

    def __missing__(self, key: Any) -> Any:
        import difflib

        near = difflib.get_close_matches(str(key), [str(k) for k in self], n=2)
        raise KeyError(f"{key!r} is not a key of this batch" + (f" (did you mean {' or '.join(map(repr, near))}?)"
                                                               if near else "") + f"; its keys: {sorted(self)}")


@dataclass(frozen=True)
class Outlet:
    """The parts of a loader's stages (`loader.assemble.Stages`) its batches are handed out from: the builder, the
    transform processes, the open-decoder engines (their CUDA streams), what lays a batch out (routes, `squeeze`,
    image ops) and where it goes (`device`; `dali_device` the graph's, `node` to name a decoder's failure)."""

    config: LoaderConfig
    resolved: Resolved
    builder: BatchBuilder
    transforms: TransformPool | None
    engines: Mapping[Route, Any]
    routes: Mapping[str, str]
    squeeze: Mapping[str, bool]
    image_ops: ImageOps
    device: str
    dali_device: int | None
    node: Node

    @classmethod
    def of(cls, st: Stages) -> "Outlet":
        return cls(st.config, st.resolved, st.builder, st.transforms, st.engines, st.routes, st.squeeze, st.image_ops,
                   st.device, st.dali_device, st.node)


class Delivery:
    """Batches handed to the caller, from `parts` (`Outlet`)."""

    def __init__(self, parts: Outlet) -> None:
        self.parts = parts
        self.cfg = parts.config
        # one stream for the loader's life: torch's caching allocator keeps a stream's freed blocks for that stream
        # alone, so a stream per epoch would hold each epoch's batches' memory apart
        self.hand_off = HandOff(parts.device)

    def schedule(self, plan, start: int) -> Schedule:
        """The run-ahead of `plan` (an epoch's, or picked samples': `plan.picked`) from batch `start`: host
        frames' `image_transforms` in its builder threads where transform processes take them."""
        st, r = self.parts, self.parts.resolved
        host_transforms = st.transforms is not None and st.transforms.in_processes and not st.device.startswith("cuda")
        return Schedule(st.builder, plan, start, r.num_workers, r.prefetch_batches, r.fetch_ahead, r.cut_ahead,
                        self.transform_host if host_transforms else None)

    def batches(self, schedule: Schedule, plan, start: int) -> Generator[dict[str, Any], None, None]:
        """Batches `start`, `start + 1`, ... of `plan`, as the schedule builds them."""
        if self.parts.resolved.host_batches:
            return self._host_batches(schedule, plan, start)
        return self._graph_batches(schedule)

    @contextlib.contextmanager
    def _dali_errors(self, schedule: Schedule):
        """DALI reports a decoder failure as a RuntimeError without naming the sample: name it."""
        try:
            yield
        except RuntimeError as exc:
            if isinstance(exc, DaliStreamError) or "decoders.video" not in str(exc) and \
                    classify(str(exc)).kind == "unknown":
                raise  # our own errors name what they are about already
            raise self.parts.builder.explain_dali_failure(list(schedule.handed), exc, self.parts.node) from None

    def batch(self, got: Mapping[str, Any], prepared: Prepared) -> dict[str, Any]:
        """The caller's batch: cameras in route order (host frames as tensors on their buffers, `graph.host`),
        then the tables, then `task`; every tensor on the loader's device. The graph's outputs come per group of
        samples (`graph.batches`): (groups, members x steps, ...) cameras and (groups, members, ...) tables,
        viewed here as (samples, steps, ...), or (samples, ...) for a one-step camera. With `channels_last` the
        graph's cameras come HWC and are handed over as (..., 3, H, W) views, as host frames are."""
        st = self.parts
        routes, squeeze, channels_last, builder = st.routes, st.squeeze, st.image_ops.channels_last, st.builder
        size = prepared.plan.size
        tensors = {k: v.flatten(0, 1) for k, v in got.items() if k not in routes}
        for k in builder.graph_routes:
            frames = got[k].reshape(size, -1, *got[k].shape[2:])
            frames = frames[:, 0] if squeeze[k] else frames
            tensors[k] = frames.movedim(-1, -3) if channels_last else frames
        for k, v in prepared.host.items():
            tensors[k] = prepared.images[k] if k in prepared.images else to_output(v, squeeze[k], channels_last)
        for k in builder.masks:  # a mixture's member lacking a camera: zeros (after mean/std too)
            if k in builder.graph_routes:
                # samples picked on the host, each zeroed through a view: reading the CUDA mask back (or indexing
                # by it) would wait for every kernel queued on the caller's stream, the training step's
                for j in np.flatnonzero(prepared.lacking[k]).tolist():
                    tensors[k][j] = 0
        order = [*routes, *(k for k in got if k not in routes)]
        batch = Batch({k: tensors[k] if str(tensors[k].device) == st.device else tensors[k].to(st.device)
                       for k in order})
        if self.cfg.image_transforms is not None:
            self._transform(batch, prepared)
        batch["task"] = prepared.tasks
        batch.update(prepared.texts)
        return batch

    def _transform(self, batch: dict[str, Any], prepared: Prepared) -> None:
        """`image_transforms` on each sample's camera tensor, as lerobot applies them, with torch's RNG seeded per
        (seed, epoch, batch, sample, camera) around each call (`graph.transforms`): in the worker processes
        for tensors on the CPU, else here. Cameras the batch's builder transformed already are left as they are."""
        import torch

        st, plan, transform = self.parts, prepared.plan, self.cfg.image_transforms
        assert transform is not None and st.transforms is not None
        devices = [torch.device(st.device).index or 0] if st.device.startswith("cuda") else []
        for k, key in enumerate(st.routes):
            if key in prepared.images:
                continue
            seed_list = plan_seeds(self.cfg.seed, plan, k)
            batch[key] = (st.transforms(batch[key], seed_list) if not devices
                          else apply(transform, batch[key], seed_list, devices))

    def transform_host(self, prepared: Prepared, stop: threading.Event | None = None) -> None:
        """`image_transforms` on a CPU batch's host-frame cameras, in the thread that built it (a schedule worker):
        the caller's loop then receives them done, while the next batches build. `stop` set (the epoch ended):
        the wait for the transform processes ends, raising."""
        st = self.parts
        assert st.transforms is not None
        plan = prepared.plan
        for k, key in enumerate(st.routes):
            if key in prepared.host:
                frames = to_output(prepared.host[key], st.squeeze[key], st.image_ops.channels_last)
                prepared.images[key] = st.transforms(frames, plan_seeds(self.cfg.seed, plan, k), stop)

    def _host_batches(self, schedule: Schedule, plan, start: int):
        """Batches without a DALI graph (`host_batches`): the workers' host frames and tables."""
        import torch

        keys = [o.key for o in self.parts.builder.outputs]  # only tables: no camera goes through a graph here
        for index in range(start, plan.num_batches):
            prepared = schedule.take(index)
            # one group of the batch's samples each (`BuildSpec.one_group`): (1, B, ...), stacked by the builder
            tables = {k: torch.from_numpy(values[0][None]) for k, values in zip(keys, prepared.arrays)}
            batch = self.batch(tables, prepared)
            # Only now are the next batches drawn and handed to the workers. Woken workers take the GIL, and every
            # torch call above gives it up (torch releases the GIL in each op): after a wake each would wait out
            # the interpreter's switch interval (5 ms) to get it back, on the caller's clock. The draws are pure
            # Python, which keeps the GIL until the caller's step gives it up.
            schedule.bring_ahead(index)
            yield batch

    def _graph_batches(self, schedule: Schedule):
        """Batches through the DALI graph, with the schedule as its external source."""
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy
        from nvidia.dali.plugin.pytorch import DALIGenericIterator

        from ..graph.pipeline import build_pipeline

        st, builder = self.parts, self.parts.builder
        # DALI asks its source for prefetch_queue_depth + 1 batches before it returns the first. A graph with no
        # camera (a camera-less dataset on a GPU) only moves tables: one batch of queue is enough there.
        queue_depth = 2 if builder.graph_routes else 1
        pipe, names = build_pipeline(builder.outputs, builder.graph_routes, schedule, self.cfg.batch_size,
                                     st.resolved.dali_threads, st.dali_device, st.image_ops,
                                     on_gpu=st.device.startswith("cuda"), augment=self.cfg.augment,
                                     prefetch_queue_depth=queue_depth, engine_outputs=builder.engine_outputs,
                                     engine_sources={r: schedule.engine_source(r) for r in builder.engine_outputs},
                                     engine_streams={r: st.engines[r].stream for r in builder.engine_outputs},
                                     shaped=st.resolved.shaped_on_workers)
        hand_off = self.hand_off
        with self._dali_errors(schedule), hand_off.making():  # the iterator runs the first batch while constructed
            iterator = DALIGenericIterator([pipe], names, auto_reset=False, last_batch_policy=LastBatchPolicy.PARTIAL)
        while True:
            with hand_off.making():
                try:
                    with self._dali_errors(schedule):
                        out = next(iterator)
                except StopIteration:
                    return
                batch = self.batch(out[0], schedule.handed.popleft())
            hand_off.to_caller(batch)
            yield batch


class HandOff:
    """Where a CUDA batch is made: a CUDA stream of the loader's own, never the caller's. DALI's iterator copies its
    outputs into torch tensors on the current stream, and a host camera's frames go to the device by a copy that
    waits for the current stream's work: on the caller's stream both would wait for the training step's kernels
    queued there (and DALI's next outputs behind them). Made on this stream, a batch is handed over by making the
    caller's stream wait for it (on the GPU, not here) and marking its tensors as used there, so their memory is
    not given to this stream again before the caller's kernels have read them. On the CPU it does nothing."""

    def __init__(self, device: str) -> None:
        import torch

        self.torch = torch
        self.stream = torch.cuda.Stream(device=device) if device.startswith("cuda") else None

    def making(self):
        """The context a batch is made in: this stream current (nothing on the CPU)."""
        return self.torch.cuda.stream(self.stream) if self.stream is not None else contextlib.nullcontext()

    def to_caller(self, batch: Mapping[str, Any]) -> None:
        """The caller's current stream waits for `batch` (made on this stream)."""
        if self.stream is None:
            return
        caller = self.torch.cuda.current_stream(self.stream.device)
        caller.wait_stream(self.stream)
        for value in batch.values():
            if isinstance(value, self.torch.Tensor) and value.is_cuda:
                value.record_stream(caller)
