"""`make gpu-check`'s first step: stop at once, with the reason, when this node cannot run the GPU route, instead of
running every later step into the same wall.

Checks, in order, each failure printed with its fix and exit status 4:
1. every module the check needs imports (numpy, torch, nvidia.dali, av, torchcodec's decoders, dali_stream);
2. torch is a CUDA build whose CUDA major version this driver runs (a CUDA 13 torch on a 550 driver would send
   every camera to the CPU with one warning), and torch sees the GPU;
3. dali_stream's node probe finds no problem with the GPU or NVDEC (DALI and torch see the same devices,
   libnvcuvid loads);
4. a loader on a tiny H.264 sample lands its batches on a CUDA device and NVDEC's frames carry their ids;
5. the open-decoder engine starts: PyNvVideoCodec imports (why not, when it does not: `diagnose`'s probe), and a
   loader with nvdec_engine="open" gives the same ids, in a child process (PyNvVideoCodec ends the process on a
   failed driver call); its first batch (libraries loaded, decoders opened, CUDA kernels compiled) and its second
   are timed and printed, so no later timed window pays the warm-up. A failure here fails the check: an open
   engine that cannot start must not show up later as skipped tests.

    python benchmarks/gpu_preflight.py [WORKDIR]
"""

from __future__ import annotations

import importlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def fail(message: str) -> None:
    print(f"gpu-check preflight FAILED: {message}", file=sys.stderr, flush=True)
    sys.exit(4)


def driver_cuda() -> tuple[str, str]:
    """(driver version, highest CUDA version it runs) from nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError):
        return "?", "?"
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", out)
    driver = re.search(r"Driver Version:\s*([\d.]+)", out)
    return (driver.group(1) if driver else "?"), (cuda.group(1) if cuda else "?")


def main() -> None:
    for name in ("numpy", "torch", "nvidia.dali", "av", "torchcodec.decoders", "dali_stream"):
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - any import failure stops the check, with its text
            first = str(exc).splitlines()[0] if str(exc) else ""
            fail(f"import {name}: {type(exc).__name__}: {first[:400]}. Install the node's set (docs/install.md; "
                 f"on an offline node: stage the wheels) and run again; `python -m dali_stream diagnose` "
                 "names the layer when dali_stream itself imports")
    import torch
    from nvidia.dali import __version__ as dali_version

    driver, cuda = driver_cuda()
    built = torch.version.cuda
    if built is None:
        fail(f"torch {torch.__version__} is a CPU-only build: every camera would decode on CPU. Install the CUDA "
             f"build this driver ({driver}, CUDA {cuda}) runs")
    if cuda != "?" and int(built.split(".")[0]) > int(cuda.split(".")[0]):
        fail(f"torch {torch.__version__} is built for CUDA {built}, but driver {driver} runs CUDA up to {cuda}: "
             f"install a torch built for CUDA {cuda.split('.')[0]}.x or older")
    if not torch.cuda.is_available():
        fail(f"torch {torch.__version__} (CUDA {built}) sees no GPU though nvidia-smi does (driver {driver}, "
             f"CUDA {cuda}); check CUDA_VISIBLE_DEVICES and the container's GPU access")
    from dali_stream.decode.node import Node

    node = Node.probe()
    if node.gpu_problem or node.nvdec_problem:
        fail(node.gpu_problem or node.nvdec_problem or "")
    from dali_stream import StreamLoader
    from dali_stream.tools.paint import read_ids
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="gpu-preflight-"))
    root = write_sample(work / "preflight-h264", SampleSpec(
        episodes=2, min_length=8, max_length=12, height=160, width=192, cameras=parse_cameras("front:h264"), seed=1))
    key = "observation.images.front"
    with StreamLoader(str(root), batch_size=4, decode={key: "gpu"}, image_dtype="uint8") as loader:
        if not loader.device.startswith("cuda"):
            fail(f"the loader's device is {loader.device!r}, not a CUDA device; route reasons: {loader.route_reasons}")
        batch = next(iter(loader))
    got = [read_ids(f) for f in batch[key].cpu().numpy()]
    want = [(int(e), int(f)) for e, f in zip(batch["episode_index"], batch["frame_index"])]
    if got != want:
        fail(f"NVDEC's frames do not carry their planned ids on a tiny H.264 sample: {got} for {want}")
    warm = open_engine(root, key)
    print(f"gpu-check preflight: OK — {node.gpu.name if node.gpu else '?'}, driver {driver} (CUDA {cuda}), torch "
          f"{torch.__version__} (CUDA {built}), DALI {dali_version}, loader on {loader.device}, NVDEC ids right; "
          f"open engine ids right, first batch {warm['first_s']:.2f} s (warm-up), second {warm['second_s']:.3f} s",
          flush=True)


OPEN_CHILD = """
import json, sys, time
from dali_stream import StreamLoader
from dali_stream.tools.paint import read_ids
root, key = sys.argv[1], sys.argv[2]
with StreamLoader(root, batch_size=4, decode={key: "gpu"}, nvdec_engine="open", image_dtype="uint8") as loader:
    assert loader.routes[key] == "nvdec-open", loader.route_reasons
    it = iter(loader)
    t0 = time.perf_counter(); first = next(it); t1 = time.perf_counter(); second = next(it); t2 = time.perf_counter()
bad = [(read_ids(f), (int(e), int(i))) for b in (first, second)
       for f, e, i in zip(b[key].cpu().numpy(), b["episode_index"], b["frame_index"]) if read_ids(f) != (int(e), int(i))]
print(json.dumps({"first_s": t1 - t0, "second_s": t2 - t1, "wrong": bad}))
"""


def open_engine(root: Path, key: str) -> dict:
    """Step 5 (module doc): the open-decoder engine on the tiny sample, in a child process; its timings."""
    import json

    from dali_stream.tools.diagnose import _pynvvideocodec

    try:
        found = _pynvvideocodec()
    except ImportError as exc:
        fail(f"the open-decoder engine cannot start: {exc}")
    if found["version"] is None:
        fail("PyNvVideoCodec is not installed, so the open-decoder engine (nvdec_engine='open') cannot be measured "
             "or tested: pip install '.[nvdec]' in the checkout (on an offline node, stage its wheel) and run again")
    try:
        ran = subprocess.run([sys.executable, "-c", OPEN_CHILD, str(root), key], capture_output=True, text=True,
                             timeout=300, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        fail("the open-decoder engine's first two batches took more than 300 s on a tiny sample")
    lines = ran.stdout.strip().splitlines()
    if ran.returncode != 0 or not lines:
        tail = "\n".join((ran.stdout + ran.stderr).strip().splitlines()[-20:])
        fail(f"the open-decoder engine failed on a tiny H.264 sample (exit status {ran.returncode}"
             f"{'; the process ended itself: PyNvVideoCodec exits on a failed CUDA driver call' if not lines else ''})"
             f":\n{tail}")
    result = json.loads(lines[-1])
    if result["wrong"]:
        fail(f"the open-decoder engine's frames do not carry their planned ids: {result['wrong'][:4]}")
    return result


if __name__ == "__main__":
    main()
