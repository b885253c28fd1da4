"""`Source`: a StreamLoader's batches as the inputs of a DALI pipeline the user defines, resumable.

The source iterates its loader, one epoch per DALI epoch: DALI's external sources ask it for a batch per pipeline
iteration (`BatchInfo`), and every external source `read` declared gets its part of the same batch; the loader's
end of epoch is DALI's (StopIteration), so the iterator's epochs are the loader's, each last batch as short as the
loader's.

Resume. DALI runs the pipeline ahead of the training loop (`prefetch_queue_depth` batches), so the loader's own
position counts batches the loop has not received. The source keeps, for each batch it handed DALI, the position
before it: (the loader's state when the loader's epoch run began, batches of that run before it). The batches
DALI ran and the iterator has not yet handed out are the pipeline's outputs not yet taken (DALI's
`Pipeline._batches_to_consume`: the count its `share_outputs` checks); `state_dict()` is the position before the
oldest of them, in the loader's own state format, so a Source's state resumes a StreamLoader and the other way
round. This holds for `DALIGenericIterator` built with `prepare_first_batch=False` (`iterator_args`): with True
the iterator keeps one more batch aside, out of the pipeline's count.
"""

from __future__ import annotations

import copy
import difflib
import os
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Sequence

import numpy as np

from ..config import dali_source_signature
from ..errors import (
    BatchSizeMismatchError,
    ConfigError,
    PipelineError,
    SourceClosedError,
    SourceInUseError,
    StateError,
    UnknownOutputError,
)
from .schema import RAND, RANDOMS, Output, check_batch, dali_batch, outputs_of

if TYPE_CHECKING:
    from ..config import LoaderConfig
    from ..loader import StreamLoader

# what frames reach the user's pipeline as, unless the settings say otherwise: decoded bytes, stored HWC
SOURCE_DEFAULTS = {"image_dtype": "uint8", "memory_format": "channels_last"}


@dataclass
class _Handed:
    """A batch of the loader on its way through DALI: where its run of the loader began (`start`, the loader's
    state then), how many batches of that run came before it (`index`), the batch and its arrays per chosen output
    (both kept until the loop has the batch: DALI copies GPU ones on a stream)."""

    start: dict[str, Any]
    index: int
    batch: dict[str, Any]
    arrays: list[Any] | None = None

    def position(self) -> dict[str, Any]:
        """The loader state that resumes at this batch."""
        state = copy.deepcopy(self.start)
        state["batches_consumed"] = int(state["batches_consumed"]) + self.index
        return state


class Source:
    """A StreamLoader's batches as inputs of your own DALI pipeline: `read(source)` inside a `@pipeline_def`.

    `Source(dataset, **settings)` takes StreamLoader's arguments (dataset, `delta_timestamps`, `episodes`, `seed`,
    `decode`, caches, ...; rank and world from the environment as the loader's), with `image_dtype="uint8"` and
    `memory_format="channels_last"` by default (a `config=` keeps its own): the frames reach the pipeline as decoded,
    for your own operators.
    `Source(loader)` takes a StreamLoader you built, its settings as they are. `source.loader` is the loader (`meta`,
    `routes`, `stats()`); closing the source closes a loader it built.

    One source feeds one pipeline, read once. Give the pipeline `batch_size=source.batch_size` and
    `device_id=source.device_id`, and the iterator `DALIGenericIterator(pipe, **source.iterator_args())`.
    """

    @dali_source_signature  # its keywords, for a type checker and an editor: StreamLoader's (config.py says how)
    def __init__(self, source: Any = None, *, config: LoaderConfig | None = None, repo_id: str | None = None,
                 root: str | os.PathLike | None = None, **settings: Any) -> None:
        from ..loader import StreamLoader

        self.loader: StreamLoader
        if isinstance(source, StreamLoader):
            if config is not None or repo_id is not None or root is not None or settings:
                raise ConfigError("Source(loader) takes the loader's own settings; give the settings to the loader, "
                                  "or build the source from the dataset: Source(dataset, **settings)")
            if source.closed:
                raise SourceClosedError("Source(loader) was given a closed StreamLoader (close(), or the end of its "
                                        "`with` block): build a new loader (load_state_dict() to continue where it "
                                        "stopped), or let the source build it: Source(dataset, **settings)")
            self.loader, self._owns = source, False
        else:
            chosen: dict[str, Any] = dict(settings)
            if config is None:
                for name, value in SOURCE_DEFAULTS.items():
                    chosen.setdefault(name, value)
            self.loader, self._owns = StreamLoader(source, config=config, repo_id=repo_id, root=root, **chosen), True
        self._closed = False
        # the pipeline that read this source, held (its count of batches run ahead is the resume point's, even where
        # the caller dropped pipeline and iterator before asking for the state) until close(), which keeps the count
        self._pipe: Any = None
        self._read = False
        self._waiting_at_close = 0
        self._outputs: list[Output] | None = None  # every output the batches give (`schema`)
        self._skipped: list[str] = []
        self._chosen: list[Output] = []  # the outputs the pipeline reads
        self.output_names: list[str] | None = None  # what the pipeline returns, in order (`outputs`)
        self._run: Iterator[dict[str, Any]] | None = None  # the loader's epoch being iterated
        self._run_start: dict[str, Any] = {}
        self._run_index = 0
        self._pending: _Handed | None = None  # a batch taken to learn the outputs, not yet asked for by DALI
        self._handed: deque[_Handed] = deque()  # batches handed to DALI, the loop's not yet received among the last
        self._asked = False  # DALI asked for a batch: the position can no longer be changed
        self._key: tuple[int, int] | None = None  # the DALI (epoch, iteration) of `_current`
        self._current: _Handed | None = None

    # ---- what the pipeline gets ------------------------------------------------------------------------------------
    @property
    def batch_size(self) -> int:
        """Samples per batch: the pipeline's `batch_size` must be this."""
        return int(self.loader.config.batch_size)

    @property
    def device_id(self) -> int | None:
        """The pipeline's `device_id`: the CUDA device the loader's batches are on, None where they are on the CPU."""
        device = str(self.loader.device)
        return int(device.partition(":")[2] or 0) if device.startswith("cuda") else None

    @property
    def cameras(self) -> list[str]:
        """The camera keys, in the loader's order (the order `<camera>_rand` numbers are drawn in)."""
        return list(self.loader.routes)

    @property
    def schema(self) -> dict[str, Output]:
        """Every output the source's batches give, by name (learned from the first batch, taken on first use)."""
        if self._outputs is None:
            self._check_open()
            try:
                self._pending = self._next()
            except StopIteration:
                raise ConfigError("the loader's next epoch holds no batch, so the source cannot show DALI its "
                                  "outputs: use a smaller batch_size or drop_last=False") from None
            self._outputs, self._skipped = outputs_of(self._pending.batch, self.cameras)
        return {o.name: o for o in self._outputs}

    @property
    def skipped(self) -> list[str]:
        """Batch keys that are not tensors (`task`, text columns): not pipeline inputs (`task_index` is)."""
        _ = self.schema
        return list(self._skipped)

    def iterator_args(self, output_map: Sequence[str] | None = None) -> dict[str, Any]:
        """Keywords for `DALIGenericIterator(pipe, **source.iterator_args())`: `output_map` (what the pipeline returns:
        the names `outputs()` recorded, or `output_map` given here), `size=-1` (the source ends each epoch where the
        loader does), `auto_reset=True` (a `for` over the iterator is one epoch, as over the loader),
        `last_batch_policy=PARTIAL` (what happens: an epoch's last batch is as short as the loader's; DALI applies no
        policy of its own with size=-1) and `prepare_first_batch=False` (`state_dict()` counts on it)."""
        from nvidia.dali.plugin.base_iterator import LastBatchPolicy

        names = list(output_map) if output_map is not None else self.output_names
        if names is None:
            raise PipelineError("no output names: end the pipeline with `return dali_stream.dali.outputs(inputs)` "
                                "(it records them), or name the pipeline's outputs here: "
                                "source.iterator_args(output_map=[...])")
        return {"output_map": names, "size": -1, "auto_reset": True, "last_batch_policy": LastBatchPolicy.PARTIAL,
                "prepare_first_batch": False}

    # ---- resume ---------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """The resume point: the loader's state before the first batch the training loop has not received (the ones
        DALI prepared ahead included). Same format as `StreamLoader.state_dict()`."""
        waiting = self._waiting()
        if waiting:
            return self._handed[-waiting].position()
        if self._pending is not None:
            return self._pending.position()
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue at `state` (a Source's or a StreamLoader's). Call it before the pipeline asks for its first batch:
        before the iterator's first `next` (built with `iterator_args()`, the iterator asks for none before it)."""
        self._check_open()
        if self._asked:
            raise StateError("load_state_dict() after the pipeline began: DALI has already run batches from the old "
                             "position. Load the state into a new Source before iterating its pipeline "
                             "(source = Source(...); source.load_state_dict(state); then the pipeline and iterator)")
        self._end_run()
        self._pending = None
        self.loader.load_state_dict(state)

    # ---- lifecycle ------------------------------------------------------------------------------------------------
    def close(self) -> None:
        """End the loader's epoch in progress and close the loader if the source built it. A pipeline still asking
        for batches then gets SourceClosedError; `state_dict()` still gives where the loop stood."""
        if not self._closed:
            self._waiting_at_close = self._waiting()
        self._closed = True
        self._pipe = None
        self._end_run()
        self._current = None
        for item in [*self._handed, *([self._pending] if self._pending is not None else [])]:
            item.batch, item.arrays = {}, None  # the positions stay: state_dict() still says where the loop stood
        if self._owns:
            self.loader.close()

    def __enter__(self) -> "Source":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ---- called by read() and by DALI ------------------------------------------------------------------------------
    def unknown(self, key: str) -> UnknownOutputError:
        """The error for a camera or key the batches do not have: the names they have, the closest first."""
        names = list(self.schema)
        close = difflib.get_close_matches(key, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        text = f" ({self._skipped} are not tensors: no DALI form; task_index is)" if self._skipped else ""
        return UnknownOutputError(f"{key!r} is not an output of this source: {hint}its outputs are {names}{text}. "
                                  "Name one of those, or add the key to the loader's settings (delta_timestamps "
                                  "for a window's `<key>_is_pad`)")

    def _attach(self, pipe: Any, keys: Sequence[str] | None) -> list[Output]:
        """Check `pipe` against the source and record it; the outputs it reads (`keys`, or all)."""
        self._check_open()
        if self._read:
            same = self._pipe is pipe
            raise SourceInUseError(
                f"this Source was already read {'in this pipeline' if same else 'by another pipeline'}: a source feeds "
                "one pipeline, read once (use the dict read() returned for every input). For another pipeline build "
                "another Source; source.state_dict() carries the position over")
        if pipe.max_batch_size != self.batch_size:
            raise BatchSizeMismatchError(
                f"the pipeline's batch_size={pipe.max_batch_size} but the source's batches hold {self.batch_size} "
                "samples: build the pipeline with batch_size=source.batch_size (or the source with "
                f"batch_size={pipe.max_batch_size})")
        outputs = self.schema
        missing = [k for k in keys or () if k not in outputs]
        if missing:
            raise self.unknown(missing[0])
        chosen = list(outputs.values()) if keys is None else [outputs[k] for k in dict.fromkeys(keys)]
        on_gpu = [o.name for o in chosen if o.device == "gpu"]
        if on_gpu and pipe.device_id != self.device_id:
            raise PipelineError(
                f"the source's batches are on {self.loader.device} ({on_gpu[:3]}...) but the pipeline has "
                f"device_id={pipe.device_id}: build it with device_id=source.device_id ({self.device_id})")
        self._pipe, self._read = pipe, True
        self._chosen = chosen
        return chosen

    def _feed(self, info: Any, picks: Sequence[int]) -> tuple:
        """Outputs `picks` (places in `_chosen`) of DALI's iteration `info` (one batch for every external source of
        the same iteration): StopIteration where the loader's epoch ended."""
        key = (int(info.epoch_idx), int(info.iteration))
        if key != self._key:
            self._check_open()
            self._key, self._current = key, None
            self._asked = True
            waiting = self._waiting()  # batches DALI ran that the loop has not taken: keep their positions
            while len(self._handed) > waiting:
                self._handed.popleft()
            item = self._pending if self._pending is not None else self._next()
            self._pending = None
            item.arrays = self._arrays(item)
            self._handed.append(item)
            self._current = item
        if self._current is None:
            raise StopIteration
        arrays = self._current.arrays
        assert arrays is not None
        return tuple(arrays[i] for i in picks)

    # ---- inside ---------------------------------------------------------------------------------------------------
    def _next(self) -> _Handed:
        """The loader's next batch with its position (a new epoch run where the last one ended); StopIteration at an
        epoch's end."""
        if self.loader.closed:
            raise SourceClosedError("the Source's StreamLoader was closed (loader.close(), or its `with` block ended): "
                                    "build a new loader and Source, and load_state_dict(source.state_dict()) to "
                                    "continue")
        if self._run is None:
            self._run_start, self._run_index = self.loader.state_dict(), 0
            self._run = iter(self.loader)
        try:
            batch = next(self._run)
        except StopIteration:
            self._run = None
            raise
        item = _Handed(self._run_start, self._run_index, batch)
        self._run_index += 1
        return item

    def _arrays(self, item: _Handed) -> list[Any]:
        """The chosen outputs of `item`'s batch, as DALI takes them; the plan's random numbers where asked for."""
        batch = item.batch
        check_batch(self._chosen, batch)
        rand: dict[str, np.ndarray] = {}
        if any(o.kind == RANDOMS for o in self._chosen):
            from ..graph.batches import augment_randoms

            position = item.position()
            plan = self.loader.batch_plan(position["epoch"], position["batches_consumed"])
            seed = int(self.loader.config.seed)
            rand = {key: np.stack(augment_randoms(seed, plan, k)) for k, key in enumerate(self.cameras)}
        return [rand[o.name[:-len(RAND)]] if o.kind == RANDOMS else dali_batch(o, batch[o.name])
                for o in self._chosen]

    def _waiting(self) -> int:
        """Batches DALI ran that the iterator has not handed out (the pipeline's outputs not yet taken)."""
        pipe = self._pipe
        if pipe is None:
            return self._waiting_at_close
        try:
            waiting = int(pipe._batches_to_consume)
        except AttributeError:  # a DALI whose Pipeline counts otherwise: resume cannot be exact
            raise PipelineError("this DALI's Pipeline has no `_batches_to_consume` count, which state_dict() reads "
                                "to leave out the batches DALI prepared ahead: use DALI 2.2-2.4 "
                                "(`dali-stream diagnose` names the tested versions)") from None
        if waiting > len(self._handed):
            raise PipelineError(f"the pipeline holds {waiting} batches but the source handed it {len(self._handed)} "
                                "not yet taken: was another pipeline's output counted? Read a Source in one pipeline")
        return waiting

    def _check_open(self) -> None:
        if self._closed:
            raise SourceClosedError("this Source was closed (close(), or the end of its `with` block): build a new "
                                    "Source, and load_state_dict() the state saved before closing to continue")

    def _end_run(self) -> None:
        if self._run is not None:
            close = getattr(self._run, "close", None)
            if close is not None:
                close()
            self._run = None
