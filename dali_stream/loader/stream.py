"""StreamLoader: a LeRobot v3 dataset streamed through the planner, the fetchers and one DALI graph (none on a CPU
node where every camera is laid out by the workers: `Resolved.host_batches`), as a thin facade: its stages are built
by `loader.assemble` from the settings `loader.resolve` derives, each epoch runs ahead in `loader.schedule` and
reaches the caller through `loader.deliver`.

`for batch in loader` runs one epoch; the next `for` runs the next epoch. `state_dict()` counts the
batches the caller has received (DALI prefetches ahead, that does not count); `load_state_dict(state)`
before iterating continues exactly there: plans are recomputed, nothing skipped is fetched or decoded.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

from ..config import LoaderConfig, loader_signature, open_meta_signature
from ..decode.route import Route
from ..errors import ConfigError, StateError
from ..fetch.closer import CLOSER, in_background
from ..meta.catalog import MixtureMeta
from ..meta.dataset import DatasetMeta
from ..mixture import Member, Mixture
from ..plan.world import World
from ..source.lerobot import lerobot_source, named
from .assemble import Stages, assemble
from .deliver import Delivery, Outlet
from .lifecycle import OPEN_LOADERS, shut
from .memory import TRIM_EVERY, release_freed
from .position import Planning, Position
from .resolve import Resolved
from .samples import Samples, asked_by_torch_data, wrapped
from .source_setup import open_meta as _open_meta
from .views import LoaderViews
from .wait import DataWait

if TYPE_CHECKING:
    from ..decode.node import Node
    from ..graph.imageops import ImageOps
    from ..meta.catalog import Catalog
    from ..plan.epoch import PlanConfig

# The parts of its stages a loader shows as its own (`loader.meta`, `loader.routes`, ...: values settled at
# construction); the others (the store, the builder, the decoders, ...) stay inside dali_stream/loader/, shown
# through `loader.stats()` and the methods of `loader.views`
PUBLIC_STAGES = frozenset({"meta", "world", "device", "routes", "decode_routes", "route_reasons", "member_routes",
                           "resolved", "node", "dali_device", "catalog", "plan_config", "image_ops"})
log = logging.getLogger("dali_stream")


@open_meta_signature  # its keywords, for a type checker and an editor: LoaderConfig's fields (config.py says how)
def open_meta(source: str | Mixture | Sequence[str | Member] | None = None, *, config: LoaderConfig | None = None,
              repo_id: str | None = None, root: str | os.PathLike | None = None, **settings: Any) -> Any:
    """A source's metadata, as `loader.meta` of a loader built on it will be, without building the loader: what
    lerobot's `resolve_delta_timestamps(cfg, meta)` needs before the loader exists. A dataset's is lerobot's
    `LeRobotDatasetMetadata` in the parts policies read (`features`, `fps`, `stats`), a
    mixture's a `MixtureMeta`. Pass it to `StreamLoader` in place of the source and the dataset is not opened
    again (the settings that open one, `revision`, `data_files_root`, `storage_options` and the `remote_*`
    ones, then go here, not to the loader). lerobot's `repo_id=`/`root=` name the source as in `StreamLoader`."""
    return named(_open_meta(lerobot_source(source, repo_id, root), LoaderConfig.make(config, **settings)), repo_id)


class StreamLoader(LoaderViews):
    """Batches of a LeRobot v3 dataset following lerobot's sample contract, decoded through DALI.

    `StreamLoader(source, *, config=None, **settings)`: `source` is the dataset root (a local path, an fsspec
    URL or a Hub id such as "lerobot/pusht"), or what `open_meta` returned; lerobot's `repo_id=` and `root=` name it
    as `LeRobotDataset` does (`root` where it holds the dataset, else `repo_id` streamed from the Hub: nothing is
    downloaded). Every other argument is keyword-only and a field of
    `LoaderConfig` (batch_size, delta_timestamps, decode, device, episodes, augment, ...: see its fields for
    each one's meaning and default). `config=` passes a whole `LoaderConfig`; keywords given beside it replace
    its fields. `loader.config` is the validated, frozen result.

    One CUDA device per loader (`dali_stream.decode.device`): "cuda:N", else torch's current device once CUDA
    is initialised, else LOCAL_RANK % visible devices; `loader.device` says which ("cuda:0", ..., or "cpu").
    `loader.routes` says how each camera is decoded (route names; `loader.decode_routes` the `decode.route.Route`
    objects, whose properties say where and how); `loader.host_batches` whether batches skip DALI's graph
    altogether (batches on the CPU and every camera laid out by the CPU decoding threads, `graph.host`).
    What it holds and did is `loader.stats()`; its plans and the reads measurement tools make are its methods
    (`loader.views`); its parts themselves stay inside dali_stream/loader/.
    """

    # the public stages under their own name (`__getattr__`; what each is: `loader.assemble.Stages`): `node` what this
    # machine decodes, `dali_device` the CUDA index DALI's graph runs on (None: CPU only), `catalog` the episodes
    # read (one dataset or a mixture's members), `plan_config` the planner's settings, `image_ops` the image ops
    meta: Any
    world: World
    device: str
    routes: dict[str, str]
    decode_routes: dict[str, Route]
    route_reasons: dict[str, str]
    member_routes: Any
    resolved: Resolved
    node: Node
    dali_device: int | None
    catalog: Catalog
    plan_config: PlanConfig
    image_ops: ImageOps

    @loader_signature  # its keywords, for a type checker and an editor: LoaderConfig's fields (config.py says how)
    def __init__(self, source: str | Mixture | Sequence[str | Member] | DatasetMeta | MixtureMeta | None = None, *,
                 config: LoaderConfig | None = None, repo_id: str | None = None,
                 root: str | os.PathLike | None = None, **settings: Any) -> None:
        self.config = cfg = LoaderConfig.make(config, **settings)
        self._stages = stages = assemble(cfg, lerobot_source(source, repo_id, root))
        named(stages.meta, repo_id)
        self.plan_lengths = stages.plan_lengths
        self._delivery = Delivery(Outlet.of(stages))  # each gets the parts it reads
        self._closed = False
        self._samples: Samples | None = None  # `dataset`, opened on first use
        # Threads end with the loader, even unclosed: a collected loader is closed on a thread of its own, one open
        # at interpreter exit on the main thread (why: `loader.lifecycle`'s docstring)
        CLOSER.start()
        self._finalizer = weakref.finalize(self, in_background, shut, stages.store, list(stages.engines.values()),
                                           stages.transforms)
        self._finalizer.atexit = False
        OPEN_LOADERS.add(self)
        self._position = Position(Planning.of(stages))
        self._live: weakref.ref | None = None  # the generator of the epoch being iterated
        self.last_epoch_stats: dict[str, Any] = {}
        self._waits = DataWait()  # how long the loop waited for each batch (`data_wait`)
        self._position.check_first_epoch()

    def __getattr__(self, name: str) -> Any:
        """The public stages (`PUBLIC_STAGES`) under their own names; the others stay inside (`loader.views`)."""
        if name in PUBLIC_STAGES and "_stages" in self.__dict__:
            return getattr(self._stages, name)
        inner = name in Stages.__dataclass_fields__ or name == "stages"
        raise AttributeError(f"'StreamLoader' object has no attribute {name!r}" + (
            f": the loader's {name} is its own, not shown; what it holds is in loader.stats(), and what tools read "
            "of it are the loader's methods (dali_stream/loader/views.py)" if inner else ""))

    # lerobot's LeRobotDataset names: the selected episodes' frames (len(loader.dataset)) and count, the dataset's fps
    num_frames = property(lambda self: int(self._stages.catalog.lengths.sum()), doc="frames of the selected episodes")
    num_episodes = property(lambda self: int((self._stages.catalog.lengths > 0).sum()), doc="episodes selected")
    fps = property(lambda self: float(self.meta.fps), doc="the dataset's frames a second (a mixture's first member's)")

    @property
    def closed(self) -> bool:
        """Whether `close()` ran (iterating then raises ConfigError; `dali_stream.dali.Source` refuses such a loader)."""
        return self._closed

    @property
    def host_batches(self) -> bool:
        """Whether batches skip DALI's graph: every camera laid out by the workers, batches on the CPU (`resolved`)."""
        return self._stages.resolved.host_batches

    # ---- the public surface --------------------------------------------------------------------------
    @property
    def dataset(self) -> Samples:
        """The loader's samples as lerobot's dataset offers them: `len(loader.dataset)` frames, `loader.dataset[i]`
        sample i as `LeRobotDataset.__getitem__` returns it (one dict, no batch axis, `task` a string); sample i is
        the i-th frame of the selected episodes in order (`loader.samples`). Iterating the loader is the fast
        way through an epoch; torch's DataLoader around this one builds each of its batches together
        (`__getitems__`)."""
        if self._samples is None:
            self._samples = Samples(self)
        return self._samples

    def __getitem__(self, i: int) -> dict[str, Any]:
        """`loader[i]` is `loader.dataset[i]`: sample i as lerobot's `dataset[i]` (`len(loader)` counts batches, as a
        DataLoader's; `len(loader.dataset)` counts samples)."""
        return self.dataset[i]

    def __len__(self) -> int:
        """Batches in the epoch the next `for` runs, on this rank (torch's DataLoader sizing it: `samples.wrapped`)."""
        if asked_by_torch_data():
            raise wrapped(self)
        return self._position.next_len()

    def __getitems__(self, indices) -> list:  # torch's DataLoader fetching samples of the loader: refused
        raise wrapped(self)

    def state_dict(self) -> dict[str, Any]:
        """The resume point, identical on every rank. `elastic` lists the (world_size, batches) segments this
        epoch already ran on other world sizes; `batches_consumed` counts the current segment."""
        return self._position.state()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at `state` (from `state_dict()`, possibly saved on another world size) on the next `for`.

        Call it before iterating: while an epoch is being iterated it raises `StateError`; on a closed loader,
        `ConfigError`."""
        if self._closed:
            raise self._closed_error()
        live = self._live() if self._live is not None else None
        if live is not None and live.gi_frame is not None:
            raise StateError(
                f"load_state_dict() was called while epoch {self._position.epoch} is being iterated "
                f"({self._position.consumed} batches delivered): the live loop would go on from where it is. Load the "
                "state before the `for` loop, or leave the loop (break, or close the iterator with .close()) first")
        self._position.load(state)

    # ---- lifecycle ----------------------------------------------------------------------------------------
    def close(self, wait: bool = True) -> None:
        """End the fetch threads, close CPU decoders and index containers, drop fetched episodes and the host-frame
        buffers (batches the caller still holds stay valid). Also done when the loader is garbage collected, at
        interpreter exit, and by `with StreamLoader(...) as loader:`. Iterating a closed loader raises
        ConfigError, and so does a `for` still running when it closed, at its next batch. `wait=False`: tell the threads to end without waiting for them (at interpreter exit, which
        joins them itself)."""
        self._closed = True
        OPEN_LOADERS.discard(self)
        if self._samples is not None:
            self._samples.close()
        st = self._stages
        st.builder.release()
        if self._finalizer.detach() is not None:
            shut(st.store, list(st.engines.values()), st.transforms, wait)

    def __enter__(self) -> "StreamLoader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _closed_error(self, during: str = "") -> ConfigError:
        state = self._position.state()
        return ConfigError(f"this StreamLoader was closed (close(), or the end of its `with` block){during}; "
                           f"construct a new one, and load_state_dict() to continue where it stopped (its state_dict() "
                           f"is still at epoch {state['epoch']}, batch {state['batches_consumed']})")

    def _while_open(self, batches: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """`batches` while the loader is open: one built after close() (or cut short by it: a closed engine, store or
        transform pool fails the build) is not handed over; the loop gets the closed loader's error instead."""
        try:
            for batch in batches:
                if self._closed:
                    raise self._closed_error(" while an epoch was being iterated")
                yield batch
        except Exception as exc:
            if self._closed and not isinstance(exc, ConfigError):
                raise self._closed_error(" while an epoch was being iterated") from exc
            raise

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._closed:
            raise self._closed_error()
        run = self._run(*self._position.next_run())
        self._live = weakref.ref(run)  # load_state_dict refuses while this generator is suspended mid-epoch
        return run

    def _run(self, epoch: int, start: int) -> Iterator[dict[str, Any]]:
        asked = time.perf_counter()  # the loop asked for the epoch's first batch (this generator's first `next`)
        plan = self.epoch_plan(epoch)
        if start >= plan.num_batches:  # e.g. fewer frames on this rank than one batch with drop_last
            self._position.ended(epoch)
            self.last_epoch_stats = {"epoch": epoch, "batches": 0, "first_batch_s": None, "wall_s": 0.0,
                                     "build_s": 0.0, "producer_wait_s": 0.0}
            return
        producer = self._delivery.schedule(plan, start)
        t0 = time.perf_counter()
        first_s = None
        delivered = 0
        batches = self._delivery.batches(producer, plan, start)
        try:
            for batch in self._while_open(batches):
                self._waits.got(asked)
                self._position.consumed += 1
                delivered += 1
                if delivered % TRIM_EVERY == 0:  # a look ~0.4 ms on the caller's thread, a trim where due more (memory.py)
                    release_freed()
                if first_s is None:
                    first_s = time.perf_counter() - t0
                yield batch
                asked = time.perf_counter()  # the loop asks for the next batch
            self._position.ended(epoch)
        finally:
            batches.close()
            producer.close()
            self.last_epoch_stats = {"epoch": epoch, "batches": delivered, "first_batch_s": first_s,
                                     "wall_s": time.perf_counter() - t0, "build_s": producer.build_s,
                                     "producer_wait_s": producer.wait_s}

