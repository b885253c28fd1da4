"""`dali-stream diagnose`: what this node can decode, and how each camera of a dataset would be decoded here.

Only the standard library is imported at module level; every probe imports what it needs inside a guard,
so one broken package is reported (with the layer that failed and the fix) instead of crashing the tool.
The result is one JSON-serialisable dict (see `diagnose`); `diagnose_report` renders it and merges nodes.

Failure layers: `missing` (no file), `placeholder` (a Git LFS pointer), `empty` (0 bytes), `not-mp4` (other
bytes than an MP4's), `container` (an MP4 not readable), `bitstream` (the decoder rejects the data),
`codec-unsupported` (this GPU/decoder cannot decode the codec), `dali-no-cuda` (DALI cannot run GPU operators
here), `torchcodec-load` (torchcodec or its FFmpeg libraries do not load), `dali-import` (nvidia.dali does not
import), `metadata` (the dataset's meta files). Why GPUs present are not used (`report["gpu"]["layer"]`):
`torch-no-cuda` (DALI sees the GPU, torch cannot: CPU wheel or a CUDA build the driver does not run),
`dali-no-cuda`, `device-mismatch`, `nvdec-unavailable` (libnvcuvid missing in a container, or a MIG slice
without NVDEC).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
import socket
import subprocess
import sys
import time
from typing import Any

CORE_PACKAGES = ("torch", "nvidia.dali", "torchcodec", "av", "pyarrow")
CODECS_OF_INTEREST = ("h264", "hevc", "av1", "libdav1d", "libaom-av1", "vp9", "libvpx-vp9")


def _guard(fn, *args) -> dict[str, Any]:
    """Run a probe; a failure becomes {'ok': False, 'error': ...} instead of an exception."""
    try:
        out = fn(*args)
        return {"ok": True, **out}
    except BaseException as exc:  # noqa: BLE001 - a diagnose tool reports everything, even SystemExit from a lib
        return {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:600]}


# ---- node ----------------------------------------------------------------------------------------------
def _nvidia_smi() -> list[dict[str, Any]]:
    """Each GPU's facts from `nvidia-smi --query-gpu` (CSV). Not NVML's Python bindings: diagnose must report on
    a node whose Python environment is broken, and nvidia-smi ships with every driver."""
    fields = "index,name,compute_cap,memory.total,driver_version,mig.mode.current"
    proc = subprocess.run(["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits"],
                          capture_output=True, text=True, timeout=20)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr.strip() or f"nvidia-smi exited {proc.returncode}")
    header = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20).stdout
    cuda = header.split("CUDA Version:")[1].split()[0] if "CUDA Version:" in header else None
    gpus = []
    for line in proc.stdout.strip().splitlines():
        index, name, cap, mem, driver, mig = (p.strip() for p in line.split(","))
        major, minor = (int(x) for x in cap.split("."))
        gpus.append({"index": int(index), "name": name, "compute_capability": [major, minor],
                     "memory_gib": round(float(mem) / 1024, 1), "driver": driver, "cuda_driver_version": cuda,
                     "mig": mig})
    return gpus


def probe_node() -> dict[str, Any]:
    from ..decode.gpus import lookup

    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    node: dict[str, Any] = {"hostname": socket.gethostname(), "cpu_cores": cores, "platform": platform.platform()}
    try:
        gpus = _nvidia_smi()
        node["gpu_query"] = "nvidia-smi"
    except FileNotFoundError:
        gpus, node["gpu_query"] = [], "nvidia-smi not found: no NVIDIA driver on this node"
    except Exception as exc:  # driver present but broken
        gpus, node["gpu_query"] = [], f"nvidia-smi failed: {exc}"
    for gpu in gpus:
        caps = lookup(gpu["name"], tuple(gpu["compute_capability"]))
        gpu.update(generation=caps.generation, nvdec_engines=caps.nvdec_engines,
                   nvdec_codecs=sorted(caps.nvdec_codecs))
    node["gpus"] = gpus
    from ..decode.node import nvcuvid_error

    node["nvcuvid"] = "loads" if gpus and nvcuvid_error() is None else (nvcuvid_error() if gpus else None)
    return node


# ---- software ------------------------------------------------------------------------------------------
def _torch() -> dict[str, Any]:
    import torch

    available = torch.cuda.is_available()
    return {"version": torch.__version__, "cuda_build": torch.version.cuda, "cuda_available": available,
            "cuda_devices": torch.cuda.device_count() if available else 0}


def _dali() -> dict[str, Any]:
    import nvidia.dali as dali
    from nvidia.dali import backend

    from ..pairing import installed_dali

    flavours = installed_dali()
    try:
        devices = int(backend.GetCUDADeviceCount())
    except Exception:
        devices = 0
    return {"version": dali.__version__, "packages": flavours, "cuda_devices": devices, "gpu_operators": devices > 0}


def _dali_probe() -> dict[str, Any]:
    """DALI's probe; not installed (the CPU install) is no failure: `installed` False, and what it would add."""
    from ..pairing import DALI_EXTRA_LINE, dali_present

    if not dali_present():
        return {"ok": False, "installed": False,
                "error": "not installed (the CPU install: every camera decodes through torchcodec, batches without a "
                         f"DALI graph; resize=, crop=, augment= and decode='dali-cpu' need it: {DALI_EXTRA_LINE})"}
    return _guard(_dali)


def _torchcodec() -> dict[str, Any]:
    import torchcodec
    from torchcodec._core import get_ffmpeg_library_versions

    return {"version": torchcodec.__version__, "ffmpeg": get_ffmpeg_library_versions().get("ffmpeg_version")}


def _pyav() -> dict[str, Any]:
    import av

    have = sorted(c for c in CODECS_OF_INTEREST if c in av.codecs_available)
    return {"version": av.__version__, "libavcodec": ".".join(map(str, av.library_versions["libavcodec"])),
            "decoders": have}


def _system_ffmpeg_decoders() -> dict[str, Any]:
    """Decoders in the system libavcodec (the one torchcodec loads), asked through ctypes."""
    name = ctypes.util.find_library("avcodec")
    if name is None:
        raise OSError("libavcodec not found; install FFmpeg (Debian: apt-get install -y ffmpeg)")
    lib = ctypes.CDLL(name)
    lib.avcodec_find_decoder_by_name.restype = ctypes.c_void_p
    lib.avcodec_find_decoder_by_name.argtypes = [ctypes.c_char_p]
    return {"library": name, "decoders": [c for c in CODECS_OF_INTEREST if lib.avcodec_find_decoder_by_name(c.encode())]}


def _simple_version(module: str) -> dict[str, Any]:
    mod = __import__(module)
    return {"version": getattr(mod, "__version__", "?")}


def probe_software() -> dict[str, Any]:
    return {
        "python": {"ok": True, "version": platform.python_version(), "executable": sys.executable},
        "torch": _guard(_torch),
        "nvidia.dali": _dali_probe(),
        "torchcodec": _guard(_torchcodec),
        "av": _guard(_pyav),
        "system_ffmpeg": _guard(_system_ffmpeg_decoders),
        "pyarrow": _guard(_simple_version, "pyarrow"),
        "fsspec": _guard(_simple_version, "fsspec"),
        "distributions": _guard(_distributions),
        "PyNvVideoCodec": _guard(_pynvvideocodec),
    }


# NVENC API version PyNvVideoCodec 2.2 asks the driver for at import (it opens the encoder library even to decode)
NVENC_API = "12.1"


def _pynvvideocodec() -> dict[str, Any]:
    """Whether PyNvVideoCodec (the open-decoder NVDEC engine, nvdec_engine='open') imports here, tried in a child
    process: its import opens the driver's NVENC library (libnvidia-encode.so.1) and asks it for NVENC API >= 12.1
    even to decode, and a failure there must not take this process down. Not installed is no failure: it is
    optional (`pip install '.[nvdec]'` in the dali_stream checkout)."""
    import importlib.metadata as md
    import subprocess

    from ..pairing import extra_line

    try:
        version = md.version("pynvvideocodec")
    except md.PackageNotFoundError:
        return {"version": None, "imports": None,
                "note": f"not installed (optional: nvdec_engine='open'; {extra_line('nvdec')})"}
    try:
        ran = subprocess.run([sys.executable, "-c", "import PyNvVideoCodec"], capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
        said = (ran.stderr.strip().splitlines() or [f"exit code {ran.returncode}"])[-1]
        ok = ran.returncode == 0
    except subprocess.TimeoutExpired:
        ok, said = False, "the import did not finish within 120 s"
    if ok:
        return {"version": version, "imports": True}
    try:
        ctypes.CDLL("libnvidia-encode.so.1")
        encode = "libnvidia-encode.so.1 loads, so the driver is likely older than NVENC API " + NVENC_API + \
                 " needs (R530 or newer)"
    except OSError:
        encode = ("libnvidia-encode.so.1, the driver's NVENC library, is missing: in a container set "
                  "NVIDIA_DRIVER_CAPABILITIES=compute,video,utility (or all); on a bare node install the driver's "
                  "encode library (Debian/Ubuntu: libnvidia-encode-<driver version>)")
    raise ImportError(f"PyNvVideoCodec {version} is installed but does not import ({said}); {encode}. Without it "
                      "nvdec_engine='open' cannot run (nvdec_engine='dali' and the CPU routes can)")


def _distributions() -> dict[str, Any]:
    """What pip installed, whether or not it imports: the DALI flavours, torchcodec's version, and PyNvVideoCodec's
    (the open-decoder NVDEC engine, nvdec_engine='open'; None: not installed, the [nvdec] extra)."""
    import importlib.metadata as md

    from ..pairing import installed_dali

    found: dict[str, Any] = {"nvidia_dali": installed_dali()}
    for name in ("torchcodec", "pynvvideocodec"):
        try:
            found[name] = md.version(name)
        except md.PackageNotFoundError:
            found[name] = None
    return found


def broken_packages(software: dict[str, Any]) -> list[str]:
    """Packages that are installed and fail (DALI not installed at all is the CPU install, not a break)."""
    return [name for name in CORE_PACKAGES if not software[name]["ok"] and software[name].get("installed", True)]


# ---- the whole report ----------------------------------------------------------------------------------
EXIT_OK, EXIT_CAMERA, EXIT_BROKEN, EXIT_UNTESTED = 0, 1, 2, 3


GPU_LAYER_FIXES = {
    "torch-no-cuda": "install a CUDA build of torch that this driver runs (docs/install.md: the constraint set "
                     "for this driver), or use the NGC PyTorch container",
    "dali-no-cuda": "DALI sees no CUDA device: check the driver (nvidia-smi), CUDA_VISIBLE_DEVICES, and that "
                    "nvidia-dali-cuda120 (driver >= 525) or -cuda130 (driver >= 580) is installed",
    "device-mismatch": "set CUDA_VISIBLE_DEVICES before the process starts, not after importing torch or DALI",
    "nvdec-unavailable": "in a container set NVIDIA_DRIVER_CAPABILITIES=compute,video,utility (or all); on a MIG "
                         "slice without NVDEC use a profile with media extensions (+me) or a larger slice",
}


def routing_node(node: dict[str, Any], software: dict[str, Any]):
    """The `decode.routes.Node` routing sees here, from the probes' results (the same rules as the loader's)."""
    from ..decode.node import ENV_CPU_ONLY, Node, NodeFacts

    dali, torch = software["nvidia.dali"], software["torch"]
    first = node["gpus"][0] if node.get("gpus") else {"name": "unknown", "compute_capability": None}
    cap = first["compute_capability"]
    nvcuvid = node.get("nvcuvid")
    facts = NodeFacts(
        dali_devices=dali.get("cuda_devices", 0) if dali["ok"] else 0,
        torch_devices=torch.get("cuda_devices", 0) if torch["ok"] else 0,
        torch_version=torch.get("version"), torch_cuda=torch.get("cuda_build"), gpu_name=str(first["name"]),
        capability=tuple(cap) if cap else None, nvcuvid_error=None if nvcuvid in (None, "loads") else nvcuvid,
        cpu_only=os.environ.get(ENV_CPU_ONLY, "").strip().lower() in ("1", "true", "yes"),
        dali=dali.get("installed", True))
    return Node.from_facts(facts)


def gpu_verdict(node_report: dict[str, Any], routing) -> dict[str, Any]:
    """Whether this node's GPUs are used for decode, and if not, the layer that stops them and the fix."""
    present = len(node_report.get("gpus") or [])
    facts = routing.facts
    layer = None
    if routing.gpus == 0 and present and not facts.cpu_only:
        layer = ("dali-no-cuda" if facts.dali_devices == 0 else "torch-no-cuda" if facts.torch_devices == 0
                 else "device-mismatch")
    elif routing.gpus and routing.nvdec_problem:
        layer = "nvdec-unavailable"
    out = {"present": present, "usable": routing.gpus, "layer": layer, "problem": None}
    if layer:
        out["problem"] = routing.nvdec_problem if layer == "nvdec-unavailable" else routing.gpu_problem
        out["fix"] = GPU_LAYER_FIXES[layer]
    return out


def install_verdict(node_report: dict[str, Any], software: dict[str, Any]) -> dict[str, Any]:
    """Do the installed versions load together here: torch with torchcodec, torch's and DALI's CUDA builds with
    the driver, one DALI flavour, and are they a tested set (`pairing.TESTED_SETS`). `broken`: a pair that does not
    load, or a CUDA build this node's driver cannot run; `idle`: what runs but wastes the node (a DALI built for a
    newer driver leaving GPUs unused, none at all on a GPU node, CUDA libraries on a node without a GPU);
    `untested`: versions CI never ran together. `fix` is the install line for this node's driver."""
    from ..pairing import (
        constraint_set,
        cpu_node_cuda_problem,
        cuda_driver_problem,
        dali_flavour_problem,
        fix_for,
        torchcodec_problem,
        untested,
    )

    gpus = node_report.get("gpus") or []
    driver = gpus[0].get("driver") if gpus else None
    torch, codec, dali = software["torch"], software["torchcodec"], software["nvidia.dali"]
    broken: list[str] = []
    idle: list[str] = []
    installed = software["distributions"] if software["distributions"]["ok"] else {}
    codec_version = codec.get("version") or installed.get("torchcodec")
    pair = torchcodec_problem(codec_version, torch.get("version"), torch.get("cuda_build"))
    if pair:
        broken.append(pair)
    flavour = dali_flavour_problem(dali.get("packages") or installed.get("nvidia_dali") or [], driver)
    if flavour:
        (idle if "driver" in flavour and "installed together" not in flavour else broken).append(flavour)
    if torch["ok"]:
        cuda = cuda_driver_problem(f"torch {torch['version']}", torch.get("cuda_build"), driver)
        if cuda:
            broken.append(cuda)
        heavy = cpu_node_cuda_problem(torch["version"], torch.get("cuda_build"), driver, codec_version)
        if heavy:  # runs, on the CPU: a warning, not a break
            idle.append(heavy)
    versions = untested(torch.get("version") if torch["ok"] else None, codec_version, dali.get("version"))
    out = {"driver": driver, "constraint_set": constraint_set(driver), "broken": broken, "idle": idle,
           "untested": versions, "conflicts": _guard(_conflicts)}
    if broken or idle or versions:
        out["fix"] = fix_for(driver)
    return out


def _conflicts() -> dict[str, Any]:
    """Installed packages whose requirements on the loader's own dependencies no longer hold (`dependents`)."""
    from .dependents import conflicts, describe

    found = conflicts()
    return {"found": found, **(dict(zip(("problem", "fix"), describe(found))) if found else {})}


def diagnose(source: str | None = None, decode_test: bool = False) -> dict[str, Any]:
    """Probe node, software and (optionally) a dataset; returns the report with `exit_code` and `verdict`."""
    t0 = time.perf_counter()
    report: dict[str, Any] = {"node": _guard(probe_node), "software": probe_software()}
    broken = broken_packages(report["software"])
    node_report = report["node"] if report["node"]["ok"] else {"gpus": []}
    node = routing_node(node_report, report["software"])
    report["gpu"] = gpu_verdict(node_report, node)
    report["install"] = install_verdict(node_report, report["software"])
    if source is not None:
        from ..mixture import is_mixture_file
        from .diagnose_dataset import probe_dataset, probe_mixture

        probe = probe_mixture if is_mixture_file(source) else probe_dataset
        report["dataset"] = _guard(probe, source, report["software"], node, decode_test)
    host = report["node"].get("hostname", "this node")
    bad_cameras: list[str] = []
    cams: dict[str, Any] = {}
    dataset = report.get("dataset")
    if dataset is not None and dataset.get("ok"):
        cams = dataset["cameras"]
        bad_cameras = [k for k, c in cams.items() if not c["decodable"]]
    if broken or report["install"]["broken"]:
        errors = "; ".join([f"{p}: {report['software'][p]['error']}" for p in broken] + report["install"]["broken"])
        report["exit_code"] = EXIT_BROKEN
        report["verdict"] = f"BROKEN INSTALL on {host}: {errors}" + (
            f"; fix: {report['install']['fix']}" if report["install"]["broken"] else "")
    elif report["install"]["untested"]:
        report["exit_code"] = EXIT_UNTESTED
        report["verdict"] = (f"UNTESTED VERSIONS on {host}: {', '.join(report['install']['untested'])}; they may "
                             "work (an environment such as lerobot's pins its own torch), but no test ran them "
                             f"together; the tested set: {report['install']['fix']}")
    elif dataset is not None and not dataset.get("ok"):
        report["exit_code"] = EXIT_CAMERA
        report["verdict"] = f"DATASET UNREADABLE on {host}: {dataset.get('error')}"
    elif bad_cameras:
        report["exit_code"] = EXIT_CAMERA
        report["verdict"] = f"{len(bad_cameras)} camera(s) cannot be decoded on {host}: " + "; ".join(
            f"{k} ({cams[k]['layer']}: {cams[k]['fix']})" for k in bad_cameras)
    else:
        what = (f"all {len(dataset['cameras'])} cameras decodable ("
                + ", ".join(f"{k.rsplit('.', 1)[-1]}: {c['route']}" for k, c in dataset["cameras"].items()) + ")"
                if dataset else "install OK")
        report["exit_code"], report["verdict"] = EXIT_OK, f"OK on {host}: {what}"
        if report["gpu"]["layer"]:
            report["verdict"] += (f"; WARNING: {report['gpu']['present']} GPU(s) present but not used for decode "
                                  f"({report['gpu']['layer']}: {report['gpu']['problem']})")
        if report["install"]["idle"]:
            report["verdict"] += (f"; WARNING: {'; '.join(report['install']['idle'])}; fix: "
                                  f"{report['install']['fix']}")
    moved = report["install"]["conflicts"]
    if moved.get("found"):  # another package's requirement the install broke: said in every verdict
        report["verdict"] += f"; WARNING: {moved['problem']}; fix: {moved['fix']}"
    report["seconds"] = round(time.perf_counter() - t0, 2)
    return report
