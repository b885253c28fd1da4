"""Which CUDA device a loader decodes on, and where every tensor of its batches lands: one device per loader.

Resolution (`resolve_device`): an explicit `device="cuda:N"`; else, for `device="cuda"` or the default,
torch's current device when this process already initialised CUDA (after `torch.cuda.set_device`, as
accelerate and most DDP scripts do, `.to("cuda")` goes there too); else `LOCAL_RANK % visible devices`,
so one visible GPU per task (`--gpus-per-task=1`, a narrowed `CUDA_VISIBLE_DEVICES`) is device 0 whatever
the local rank. The DALI pipeline is built on that index and batches land on `cuda:<index>`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import DeviceError

if TYPE_CHECKING:
    from .node import Node


@dataclass(frozen=True)
class Placement:
    """Where the DALI graph runs (`dali_device`: a CUDA index, or None for CPU only) and where batches land."""

    dali_device: int | None
    torch_device: str  # "cpu" or "cuda:<index>"


def resolve_device(device: str | None, gpus: int, local_rank: int, current: int | None,
                   gpu_problem: str | None = None) -> Placement:
    """`device` as the user gave it; `gpus`: CUDA devices usable by DALI and torch (the routing node's count);
    `current`: torch's current device if this process initialised CUDA, else None."""
    text = "" if device is None else str(device).strip()  # a torch.device reads as "cpu", "cpu:0", "cuda:1"
    if text.startswith("cpu"):
        text = "cpu"
    if text not in ("", "cpu", "cuda") and not text.startswith("cuda:"):
        raise DeviceError(f"device={device!r} is not 'cpu', 'cuda' or 'cuda:N'; batches land on a torch device")
    explicit = None
    if text.startswith("cuda:"):
        try:
            explicit = int(text.split(":", 1)[1])
        except ValueError:
            raise DeviceError(f"device={device!r}: the index after 'cuda:' must be an integer, e.g. 'cuda:0'") from None
    if text.startswith("cuda") and gpus == 0:
        why = gpu_problem or "torch sees no CUDA GPU on this node"
        raise DeviceError(f"device={device!r} asks for a GPU, but none is usable here: {why}; use device='cpu'")
    if gpus == 0:
        return Placement(None, "cpu")
    if explicit is not None:
        if not 0 <= explicit < gpus:
            raise DeviceError(f"device={device!r} but this process sees {gpus} CUDA device(s) (0..{gpus - 1}); "
                              "with one GPU per task (CUDA_VISIBLE_DEVICES narrowed) use device='cuda' or 'cuda:0'")
        index = explicit
    elif current is not None and 0 <= current < gpus:
        index = current
    else:
        index = local_rank % gpus
    return Placement(index, "cpu" if text == "cpu" else f"cuda:{index}")


def place(device: str | None, local_rank: int) -> tuple["Node", Placement]:
    """This node's decode capabilities (`routes.Node`, identifying the GPU the loader decodes on) and the loader's
    placement. torch's current device is read FIRST: naming a GPU (`Node.probe`, through
    `torch.cuda.get_device_name`) initialises CUDA in this process, after which torch reports device 0 as current
    and every rank of a torchrun job that had not called `set_device` would land on GPU 0."""
    from .node import Node, warn_once

    current = torch_current_device()
    node = Node.probe()
    if node.gpu_problem and not (node.facts and node.facts.cpu_only):
        warn_once(node.gpu_problem)
    placement = resolve_device(device, node.gpus, local_rank, current, node.gpu_problem)
    if placement.dali_device:  # another GPU than device 0: identify that one
        node = Node.probe(placement.dali_device)
    return node, placement


def torch_current_device() -> int | None:
    """torch's current CUDA device if this process initialised CUDA already, else None."""
    try:
        import torch

        if torch.cuda.is_available() and torch.cuda.is_initialized():
            return int(torch.cuda.current_device())
    except Exception:
        pass
    return None
