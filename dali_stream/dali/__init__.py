"""LeRobot episodes inside your own DALI pipeline: the loader's sampler, windows, padding masks and decoded frames
as operators' inputs, beside your resize, crop, normalisation and augmentation, iterated with DALI's
`DALIGenericIterator`, resumable.

    import dali_stream.dali as dsd
    from nvidia.dali import fn, pipeline_def, types
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    @pipeline_def
    def training(source):
        inputs = dsd.read(source)                       # name -> DataNode: frames uint8 HWC, columns, masks
        front = fn.resize(inputs["observation.images.front"], size=[224, 224])
        inputs["observation.images.front"] = fn.crop_mirror_normalize(front, dtype=types.FLOAT, output_layout="CHW")
        return dsd.outputs(inputs)

    source = dsd.Source("lerobot/pusht", batch_size=32, delta_timestamps={"action": [i / 10 for i in range(8)]})
    pipe = training(source, batch_size=source.batch_size, device_id=source.device_id, num_threads=4)
    for batch, in DALIGenericIterator(pipe, **source.iterator_args()):
        ...                                            # one `for` is one epoch; source.state_dict() resumes

`Source` takes StreamLoader's settings (docs/dali.md; its docstring). Errors are `PipelineError`s, DaliStreamErrors.
"""

from __future__ import annotations

from ..errors import (
    BatchSizeMismatchError,
    PipelineError,
    SourceClosedError,
    SourceInUseError,
    UnknownOutputError,
)
from .graph import Inputs, outputs, read
from .schema import RAND, Output
from .source import SOURCE_DEFAULTS, Source

__all__ = ["Source", "read", "outputs", "Inputs", "Output", "RAND", "SOURCE_DEFAULTS", "PipelineError",
           "BatchSizeMismatchError", "UnknownOutputError", "SourceInUseError", "SourceClosedError"]
