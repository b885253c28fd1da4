"""What every resolver of `loader.resolve` reads besides the settings (`Facts`) and what each returns (a `Part`).

A resolver is a pure function of the settings, the facts and the parts resolved before it, for one concern (threads,
the frames held, the batch's layout, fetching, ...): it returns a `Part`, its values each with its reason. A part's
fields are where each derived setting is declared, once, with what it is; `Resolved` inherits every part. Nothing
here opens a file, probes a device or imports torch or DALI.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Mapping

from ..decode.route import Route


@dataclass(frozen=True)
class Facts:
    """What `resolve` reads besides the settings, found by the loader before it builds anything.

    `routes`: camera key -> its route (`decode.routes`); `gpu`: the loader's device is a GPU; `gpu_engines`: its
    NVDEC engines as the capability table knows them (None: unknown); `cuda_batches`: batches land on a CUDA
    device; `local`: every file of every member is on a local file system; `episodes`: the selected episodes;
    `world_size`: ranks; `local_world_size`: ranks on this node; `cpu_count`: this node's cores; `rank_cores`: the
    cores this rank may use (`decode.node.rank_cores`); `mixture`: the source is a mixture of datasets;
    `frame_bytes`: camera key -> one decoded frame's bytes, 3 x H x W (unknown: not kept channels-first);
    `user_cache_dir`: dali_stream's folder in this user's cache (None: no home to put one in)."""

    routes: Mapping[str, Route]
    gpu: bool = False
    gpu_engines: int | None = None
    cuda_batches: bool = False
    local: bool = True
    episodes: int = 1
    world_size: int = 1
    local_world_size: int = 1
    cpu_count: int = 1
    rank_cores: int = 1
    mixture: bool = False
    frame_bytes: Mapping[str, int] = field(default_factory=dict)
    user_cache_dir: str | None = None  # this user's cache folder for dali_stream (`source.local_disk.user_cache_dir`)


@dataclass(frozen=True, kw_only=True)
class Part:
    """Some derived settings, as one resolver found them. A subclass declares each as a field, typed, with what it is
    in plain words (`field(metadata={"what": ...})`: `inspect` and `bench` print it beside the value and why), and
    `Resolved` inherits the subclass, so the field is `Resolved`'s too. `why`: the reason for each (a value without
    one is not described: `Resolved.describe`)."""

    why: Mapping[str, str]

    def values(self) -> dict[str, object]:
        """The derived settings this part holds, by name (its fields but `why`)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "why"}
