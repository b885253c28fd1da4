"""What this node can decode with: the probes (the only IO of routing) and the pure rules that turn what they found
into a `Node` (`Node.from_facts`), so routing on an H100, a MIG slice, a container without NVDEC or an install
without DALI is testable anywhere: a GPU counts only when DALI and torch both use it, NVDEC only when libnvcuvid
loads and the GPU (or MIG slice) has engines. Which route each camera then takes is `decode.routes`'."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field

from .gpus import GpuCaps, lookup

ENV_CPU_ONLY = "DALI_STREAM_CPU_ONLY"  # "1": behave as on a node without GPU (CPU routes, batches on CPU)
NVDEC_CAPABILITY_FIX = ("in a container, expose the driver's video capability: NVIDIA_DRIVER_CAPABILITIES="
                        "compute,video,utility (or all), e.g. "
                        "`docker run --gpus all -e NVIDIA_DRIVER_CAPABILITIES=all`")


@dataclass(frozen=True)
class StreamFormat:
    """What routing needs to know of a camera's stream (from meta/info.json or the file itself)."""

    codec: str
    width: int | None = None
    height: int | None = None
    pix_fmt: str | None = None  # None: not recorded (lerobot records yuv420p)
    depth: bool = False  # a depth camera (`meta.depth`): 12-bit codes of depth, not RGB

    def describe(self) -> str:
        size = f" {self.width}x{self.height}" if self.width and self.height else ""
        return f"{'depth ' if self.depth else ''}{self.codec}{size}{f' {self.pix_fmt}' if self.pix_fmt else ''}"


@dataclass(frozen=True)
class NodeFacts:
    """What the probes found on this node; `Node.from_facts` turns them into routing decisions (pure)."""

    dali_devices: int = 0  # CUDA devices DALI's backend sees
    torch_devices: int = 0  # CUDA devices torch can use (0 with a CPU-only build or a too-old driver)
    torch_version: str | None = None
    torch_cuda: str | None = None  # the CUDA version torch was built for; None for a CPU-only build
    gpu_name: str = "unknown"  # the device this process decodes on
    capability: tuple[int, int] | None = None
    nvcuvid_error: str | None = None  # why libnvcuvid (NVDEC's driver library) does not load; None: it loads
    cpu_only: bool = False  # DALI_STREAM_CPU_ONLY=1
    dali: bool = True  # NVIDIA DALI is installed (False: the CPU install, `pairing.dali_present`)


@dataclass(frozen=True)
class Node:
    """What this node can decode with: CUDA devices DALI and torch both use, and what the GPU's NVDEC supports.

    `gpus` counts devices usable for decode and batches (0: CPU routes only). `gpu_problem` says why GPUs
    that are present are not used; `nvdec_problem` why NVDEC is not used although the GPU is."""

    gpus: int
    gpu: GpuCaps | None = None  # capabilities of the GPU this process decodes on (None without GPU)
    gpu_problem: str | None = None
    nvdec_problem: str | None = None
    facts: NodeFacts | None = field(default=None, compare=False)
    dali: bool = True  # NVIDIA DALI is installed: its CPU decoder can take VP8/VP9/MJPEG cameras

    @classmethod
    def probe(cls, device_index: int = 0) -> "Node":
        return cls.from_facts(probe_facts(device_index))

    @classmethod
    def from_facts(cls, f: NodeFacts) -> "Node":
        if f.cpu_only:
            return cls(0, gpu_problem=f"{ENV_CPU_ONLY}=1 is set: GPUs are not used", facts=f, dali=f.dali)
        if not f.dali:
            return cls(0, gpu_problem=(f"torch sees {f.torch_devices} CUDA device(s), but NVIDIA DALI is not installed "
                                       "(the CPU install): pip install '.[cu12]' or '.[cu13]' in the dali_stream checkout (docs/install.md)"
                                       if f.torch_devices else None), facts=f, dali=False)
        if f.dali_devices == 0:
            problem = None
            if f.torch_devices:
                problem = (f"torch sees {f.torch_devices} CUDA device(s) but DALI sees none: the DALI build does not "
                           "match the driver (nvidia-dali-cuda120 needs driver >= 525, -cuda130 >= 580); see "
                           "`dali-stream diagnose`")
            return cls(0, gpu_problem=problem, facts=f)
        if f.torch_devices == 0:
            build = ("a CPU-only build" if f.torch_cuda is None else
                     f"built for CUDA {f.torch_cuda}, which this driver does not run")
            return cls(0, gpu_problem=(
                f"DALI sees {f.dali_devices} CUDA device(s) but torch {f.torch_version or '?'} cannot use them "
                f"({build}); batches could not reach torch, so every camera decodes on CPU. Install a CUDA "
                "build of torch that this driver runs (docs/install.md; `dali-stream diagnose` names the set)"),
                facts=f)
        if f.torch_devices != f.dali_devices:
            return cls(0, gpu_problem=(
                f"DALI sees {f.dali_devices} CUDA device(s) and torch sees {f.torch_devices}: they would number "
                "devices differently, so every camera decodes on CPU. Set CUDA_VISIBLE_DEVICES before the "
                "process starts (not after importing torch or DALI)"), facts=f)
        caps = lookup(f.gpu_name, f.capability)
        nvdec_problem = None
        if f.nvcuvid_error is not None:
            nvdec_problem = (f"libnvcuvid (NVDEC's driver library) does not load ({f.nvcuvid_error}); "
                             + NVDEC_CAPABILITY_FIX)
        elif caps.nvdec_engines == 0:
            nvdec_problem = caps.why_not("any codec")
        return cls(f.dali_devices, caps, None, nvdec_problem, facts=f)

    def nvdec_refuses(self, fmt: StreamFormat) -> str | None:
        """Why NVDEC cannot take this stream on this node; None when it can."""
        if self.gpus == 0 or self.gpu is None:
            return self.gpu_problem or ("no CUDA GPU visible to DALI" if self.dali else
                                        "no GPU decoding without NVIDIA DALI (the CPU install)")
        if self.nvdec_problem:
            return self.nvdec_problem
        return self.gpu.refuses(fmt.codec, fmt.width, fmt.height, fmt.pix_fmt)

    def nvdec_decodes(self, codec: str | StreamFormat) -> bool:
        fmt = codec if isinstance(codec, StreamFormat) else StreamFormat(codec)
        return self.nvdec_refuses(fmt) is None


# ---- probes (the only IO here) ----------------------------------------------------------------------------
def _driver_present() -> bool:
    """Whether the node has an NVIDIA driver loaded (its /proc entry, or the control device a container gets)."""
    return os.path.exists("/proc/driver/nvidia/version") or os.path.exists("/dev/nvidiactl")


def _dali_device_count() -> int:
    """CUDA devices DALI's backend sees; 0 without asking it (and without importing DALI) where the node has no
    NVIDIA driver at all."""
    if not _driver_present():
        return 0
    try:
        from nvidia.dali import backend

        return int(backend.GetCUDADeviceCount())
    except Exception:  # no driver, broken install: the node has no usable GPU for DALI
        return 0


def _torch_cuda() -> tuple[int, str | None, str | None]:
    """(devices torch can use, torch version, CUDA version torch was built for)."""
    try:
        import torch
    except Exception:
        return 0, None, None
    try:
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:
        count = 0
    return count, torch.__version__, torch.version.cuda


def nvcuvid_error() -> str | None:
    """None when libnvcuvid loads (NVDEC usable from this process); else why not."""
    import ctypes

    errors = []
    for name in ("libnvcuvid.so.1", "libnvcuvid.so"):
        try:
            ctypes.CDLL(name)
            return None
        except OSError as exc:
            errors.append(str(exc))
    return errors[0]


def probe_facts(device_index: int = 0) -> NodeFacts:
    from ..pairing import dali_present

    present = dali_present()
    cpu_only = os.environ.get(ENV_CPU_ONLY, "").strip().lower() in ("1", "true", "yes")
    if cpu_only:
        return NodeFacts(cpu_only=True, dali=present)
    dali = _dali_device_count() if present else 0
    torch_devices, torch_version, torch_cuda = _torch_cuda()
    if dali == 0:
        return NodeFacts(0, torch_devices, torch_version, torch_cuda, dali=present)
    name, capability = gpu_identity(device_index if device_index < dali else 0)
    return NodeFacts(dali, torch_devices, torch_version, torch_cuda, name, capability, nvcuvid_error())


def gpu_identity(index: int = 0) -> tuple[str, tuple[int, int] | None]:
    """(name, compute capability) of CUDA device `index`, from torch, else nvidia-smi; ("unknown", None)."""
    try:
        import torch

        if torch.cuda.is_available():
            return torch.cuda.get_device_name(index), tuple(torch.cuda.get_device_capability(index))
    except Exception:
        pass
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", f"--id={index}", "--query-gpu=name,compute_cap", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        name, cap = (part.strip() for part in out.split(",", 1))
        major, minor = cap.split(".")
        return name, (int(major), int(minor))
    except Exception:
        return "unknown", None


_WARNED: set[str] = set()


def warn_once(message: str) -> None:
    """One UserWarning per distinct message per process."""
    if message not in _WARNED:
        _WARNED.add(message)
        warnings.warn(message, stacklevel=3)


def rank_cores(local_world_size: int = 1, root: str = "/sys/fs/cgroup") -> int:
    """The cores this rank may use: its CPU affinity where the launcher narrowed it (SLURM's `--cpus-per-task`,
    `taskset`, a container's cpuset), else the node's cores over its ranks (`local_world_size`, the launcher's);
    at most the container's CPU quota (cgroup v2 `cpu.max`, v1 `cpu.cfs_quota_us`) over those ranks."""
    node = os.cpu_count() or 1
    allowed = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else node
    cores = allowed if allowed < node else node // max(1, local_world_size)
    quota = _cgroup_quota(root)
    if quota is not None:
        cores = min(cores, int(quota // max(1, local_world_size)))
    return max(1, cores)


def _cgroup_quota(root: str) -> float | None:
    """The container's CPU quota in cores (None: none set, or no cgroup to read)."""
    v1 = (f"{root}/cpu/cpu.cfs_quota_us", f"{root}/cpu/cpu.cfs_period_us")
    for path, period_path in ((f"{root}/cpu.max", None), v1):
        try:
            text = _read(path).split() + ([_read(period_path).strip()] if period_path is not None else [])
        except OSError:
            continue
        if len(text) < 2 or text[0] in ("max", "-1"):
            return None
        try:
            return max(1.0, int(text[0]) / int(text[1]))
        except ValueError:
            return None
    return None


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()
