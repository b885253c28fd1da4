"""`read(source)`: a Source's outputs declared inside the user's `@pipeline_def`, and `outputs(inputs)`, which
returns them from it with their names recorded for the iterator.

One `fn.external_source` per device the outputs are on (the CPU's; a CUDA device's where the loader's batches are
on a GPU), each with the names' dtypes, sample dimensions and layouts declared, so DALI checks every batch against
them and the user's operators see HWC / FHWC frames. Every external source of a pipeline iteration gets its part
of the same batch of the loader (`Source._feed`, keyed by DALI's `BatchInfo`).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from ..errors import PipelineError
from .source import Source


class Inputs(dict):
    """`read`'s result: output name -> DALI DataNode, in the batches' key order. Replace or add entries with your
    operators' results and return `dali_stream.dali.outputs(inputs)`. A name the source does not have raises
    UnknownOutputError naming the ones it has."""

    def __init__(self, source: Source, nodes: dict[str, Any]) -> None:
        super().__init__(nodes)
        self.source = source

    def __missing__(self, key: str) -> Any:
        raise self.source.unknown(key)


def read(source: Source, keys: Iterable[str] | None = None) -> Inputs:
    """Declare `source`'s outputs (those named in `keys`, else every one) as inputs of the pipeline being defined:
    call it inside a `@pipeline_def` function (or a `with pipe:` block), once per source. Frames come as uint8 HWC
    (FHWC for a camera with `delta_timestamps`) unless the loader's settings say otherwise, on the GPU where the
    loader's batches are; `<key>_is_pad`, `index`, `episode_index`, `timestamp` and the other columns as the loader
    shapes them; `<camera>_rand` (float32, 16 per sample, on the CPU: usable as operators' argument inputs) are the
    plan's random numbers, the ones a StreamLoader `augment=` hook gets, for augmentation that a resumed run repeats.

    Raises BatchSizeMismatchError (pipeline and source batch sizes differ), UnknownOutputError (a key in `keys` the
    batches lack), SourceInUseError (the source already read), SourceClosedError (the source or its loader closed),
    PipelineError (not inside a pipeline's definition, or the pipeline on another device than the batches)."""
    from nvidia.dali import fn
    from nvidia.dali.pipeline import Pipeline

    pipe = Pipeline.current()
    if pipe is None:
        raise PipelineError("dali_stream.dali.read() declares a source's inputs in the pipeline being defined: call "
                            "it inside your @pipeline_def function (or a `with pipe:` block)")
    if isinstance(keys, str):
        keys = [keys]
    chosen = source._attach(pipe, None if keys is None else list(keys))
    nodes: dict[str, Any] = {}
    for device in ("cpu", "gpu"):
        picks = [i for i, o in enumerate(chosen) if o.device == device]
        if not picks:
            continue
        outs = [chosen[i] for i in picks]
        fed = fn.external_source(source=_feeder(source, picks), num_outputs=len(outs), batch=True,
                                 batch_info=True, device=device, dtype=[o.dali_type for o in outs],
                                 ndim=[o.ndim for o in outs], layout=[o.layout for o in outs])
        nodes.update(zip((o.name for o in outs), fed if isinstance(fed, (list, tuple)) else [fed]))
    return Inputs(source, {o.name: nodes[o.name] for o in chosen})


def _feeder(source: Source, picks: list[int]) -> Callable[[Any], tuple]:
    """An external source's callback: its outputs (`picks`) of DALI's iteration `info` (one positional parameter:
    DALI then passes its `BatchInfo`)."""

    def feed(info: Any) -> tuple:
        return source._feed(info, picks)

    return feed


def outputs(inputs: Inputs) -> tuple:
    """The pipeline's outputs, `inputs`' values in order; records their names on the source, for
    `source.iterator_args()`: `return dali_stream.dali.outputs(inputs)` ends a `@pipeline_def`."""
    if not isinstance(inputs, Inputs):
        raise PipelineError(f"outputs() takes the dict read() returned (its entries replaced by your operators' "
                            f"results). Found: {type(inputs).__name__}")
    inputs.source.output_names = list(inputs)
    return tuple(inputs.values())
