"""`dali-stream bench`'s measurements around the DALI routes: limits that do not depend on the loader,
the peers a user would pick instead of dali_stream, NVDEC utilisation, and a model-sized load beside the loader.

- **Stream limit** (`stream_limits`): per DALI route (nvdec, dali-cpu), whole video files of the window's cameras
  decoded one after another by DALI's decoder, one decoder per file (the first `FILE_FRAMES` frames of each, so
  an hour-long file fits the GPU): frames/s with no per-sample decoder and no loader. Divided by the frames the
  loader's decoder works through per sample (clip frames up to the last asked, `BatchBuilder.dali_counts`) it is
  the samples/s that decoder could deliver: `nvdec_limit`, and `nvdec_limit_ratio` = loader / that.
- **Open-engine limit** (`engine_limits`): per open-decoder engine route (nvdec-open, cpu-open), the first
  `ENGINE_FRAMES` frames of the window's episode segments, whole, on the loader's own engine (its threads, its
  decoders kept open): frames/s with no per-sample clip and no loader; divided by the packets the engine fed per
  sample it is the samples/s it could deliver (for nvdec-open the independent NVDEC limit on open decoders).
- **Peers** (`peers`): the same frames of the window's batches for the NVDEC cameras through torchcodec on CUDA
  (lerobot's `video_decode_device="cuda"`: a decoder per segment and batch, as lerobot opens one per sample) and
  through PyNvVideoCodec (`SimpleDecoder`, its decoder reused across segments by `reconfigure_decoder`), each
  frame's painted ids checked where the dataset has them. A peer that cannot run here says why.
- **NVDEC utilisation** (`NvdecUtilisation`): `nvidia-smi dmon -s u` on the loader's GPU during the loader's run.
- **GPU load** (`GpuLoad`): bfloat16 matmuls of `LOAD_SIZE` on their own CUDA stream in a thread, alone and then
  beside the loader: a decode that stalls the device (DALI's decoder `cudaFree`s per sample, a device-wide
  synchronisation) shows as a lower rate beside the loader.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import threading
import time
from typing import Any

import numpy as np

from .sample_data import SAMPLE_KEY

FILE_FRAMES = 900  # frames decoded from the start of each file for the stream limit
LIMIT_FILES = 4  # files per route (the window's first distinct ones)
ENGINE_FRAMES = 60  # frames of each episode segment the open-engine limit decodes (held at once: bounded memory)
LOAD_SIZE = 8192  # the GPU load's square matrices (bfloat16): ~1.1 TFLOP per product


def window_work(loader, window, keys):
    """(key, segments, frame indices) per camera in `keys` and batch of the window, and the window's samples."""
    work, samples = [], 0
    for epoch, index in window:
        plan = loader.batch_plan(epoch, index)
        samples += plan.size
        for key in keys:
            segs, idx = loader.locate(plan, key)
            work.append((key, segs, idx))
    return work, samples


def _frames_per_sample(loader, keys) -> float:
    """Frames DALI's decoder works through per sample for cameras `keys`, over everything the loader built."""
    dali = loader.stats()["build"]["dali"]
    counts = [dali.get(k, {"samples": 0, "frames_fed": 0}) for k in keys]
    samples = max((c["samples"] for c in counts), default=0)
    return sum(c["frames_fed"] for c in counts) / samples if samples else 0.0


def stream_limits(loader, window) -> dict[str, dict[str, Any]]:
    """Per DALI route of the loader: its decoder on whole files (see the module doc)."""
    from ..fetch.segments import packet_index

    out: dict[str, dict[str, Any]] = {}
    for route in sorted({r for r in loader.decode_routes.values() if r.in_dali}, key=lambda r: r.name):
        keys = [k for k, r in loader.decode_routes.items() if r == route]
        work, _ = window_work(loader, window[:8], keys)
        files = list(dict.fromkeys(seg.source for _, segs, _ in work for seg in segs))[:LIMIT_FILES]
        streams = []
        for path in files:
            with loader.meta.data_fs.open(path, "rb") as fh:
                data = fh.read()
            count = min(len(packet_index(data).pts), FILE_FRAMES)
            streams.append((np.frombuffer(data, np.uint8), np.arange(count, dtype=np.int32)))
        seconds = _decode_files(streams, route, loader.dali_device)
        frames = sum(len(f) for _, f in streams)
        per_sample = _frames_per_sample(loader, keys)
        fps = frames / seconds if seconds else 0.0
        out[route.name] = {"cameras": keys, "files": len(files), "frames": frames, "seconds": seconds,
                      "frames_per_s": fps, "frames_per_sample": per_sample,
                      "samples_per_s": fps / per_sample if per_sample else None,
                      "note": f"whole files decoded one after another by DALI's decoder (first {FILE_FRAMES} frames "
                              "of each), divided by the frames the loader's decoder works through per sample"}
    return out


def engine_limits(loader, window) -> dict[str, dict[str, Any]]:
    """Per open-decoder engine route of the loader: its engine on whole segments (see the module doc)."""
    out: dict[str, dict[str, Any]] = {}
    for route, used in loader.stats()["engines"].items():
        keys = [k for k, r in loader.decode_routes.items() if r == route]
        work, _ = window_work(loader, window[:8], keys)
        by_key: dict[str, dict[int, Any]] = {}
        for key, segs, _ in work:
            for seg in segs:
                by_key.setdefault(key, {})[seg.uid] = seg
        frames, seconds = 0, 0.0
        for key, segs in by_key.items():
            chosen = list(segs.values())[:4 * used["threads"]]
            idx = [np.arange(min(len(seg.pts_s), ENGINE_FRAMES)) for seg in chosen]
            loader.decode_on_engine(key, chosen[:1], idx[:1])  # warm: libraries loaded, this camera's decoders open
            t0 = time.perf_counter()
            _, decoded = loader.decode_on_engine(key, chosen, idx)
            seconds += time.perf_counter() - t0
            frames += decoded
        per_sample = used["packets"] / used["samples"] * len(keys) if used["samples"] else 0.0
        fps = frames / seconds if seconds else 0.0
        out[route] = {"cameras": keys, "threads": used["threads"], "frames": frames, "seconds": seconds,
                      "frames_per_s": fps, "frames_per_sample": per_sample,
                      "samples_per_s": fps / per_sample if per_sample else None,
                      "note": f"the first {ENGINE_FRAMES} frames of the window's episode segments, whole, on the "
                              "loader's engine, divided by the packets it fed per sample (all cameras)"}
    return out


def _decode_files(streams, route, device_id) -> float:
    """Seconds DALI's decoder takes for `streams` (data, frames) one after another, the first one decoded once
    before timing (libraries loaded, decoder warm)."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    from ..graph.pipeline import video_decoder

    if not streams:
        return 0.0
    feed = iter([streams[0], *streams])
    gpu = route.on_gpu
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=device_id if gpu else None, prefetch_queue_depth=1)
    with pipe:
        enc, frames = fn.external_source(source=lambda: [[x] for x in next(feed)], num_outputs=2, batch=True,
                                         dtype=[types.UINT8, types.INT32])
        pipe.set_outputs(video_decoder(enc, frames, route))
    pipe.build()
    sync = _device_sync(device_id) if gpu else (lambda: None)
    pipe.run()
    sync()
    t0 = time.perf_counter()
    for _ in streams:
        pipe.run()
        sync()
    seconds = time.perf_counter() - t0
    del pipe
    return seconds


def _device_sync(device_id):
    import torch

    return lambda: torch.cuda.synchronize(device_id)


def peers(loader, window) -> dict[str, dict[str, Any]]:
    """The NVDEC cameras' frames of the window through torchcodec on CUDA and PyNvVideoCodec (module doc)."""

    keys = [k for k, r in loader.decode_routes.items() if r.on_gpu]
    why = (f"batches land on {loader.device}: the GPU peers run beside a loader on CUDA"
           if not loader.device.startswith("cuda") else
           None if keys else "no camera decodes on NVDEC here: nothing for a GPU peer to compare")
    if why is not None:
        return {name: {"available": False, "why": why} for name in ("torchcodec_cuda", "pynvvideocodec")}
    work, samples = window_work(loader, window, keys)
    return {"torchcodec_cuda": _peer(_torchcodec_cuda, work, samples, loader),
            "pynvvideocodec": _peer(_pynvvideocodec, work, samples, loader)}


def _peer(decode, work, samples: int, loader) -> dict[str, Any]:
    """Run one peer over `work` twice (the first pass warms it), timing the second; painted ids checked."""
    from .paint import read_ids

    run, painted = None, False
    try:
        run = decode(work, loader)
        run(None)
        wrong = [0]

        def check(frames_by_sample):
            for want, images in frames_by_sample:
                wrong[0] += sum(read_ids(img) != w for img, w in zip(images, want))

        t0 = time.perf_counter()
        run(None)
        seconds = time.perf_counter() - t0
        painted = bool(loader.meta.info.get(SAMPLE_KEY))
        if painted:
            run(check)  # untimed: the ids, where the dataset has them painted
    except Exception as exc:  # noqa: BLE001 - a peer that cannot run here is reported, never skipped silently
        return {"available": False, "why": f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"}
    finally:
        getattr(run, "cleanup", lambda: None)()
    return {"available": True, "samples_per_s": samples / seconds if seconds else None, "seconds": seconds,
            "wrong_frames": wrong[0] if painted else None}


def _wanted(loader, segs, idx):
    """Per sample, the (episode, frame) ids its frames should show (segment frame -> episode frame by time)."""
    out = []
    for seg, i in zip(segs, idx):
        pos = int(np.flatnonzero(loader.meta.episodes["episode_index"] == seg.episode)[0])
        start = float(loader.meta.cameras[seg.camera].from_timestamp[pos])
        frames = np.rint((seg.pts_s[i] - start) * loader.meta.fps).astype(int)
        out.append([(seg.episode, int(f)) for f in frames])
    return out


def _torchcodec_cuda(work, loader):
    import torch
    from torchcodec.decoders import VideoDecoder

    device = loader.device if ":" in loader.device else f"cuda:{torch.cuda.current_device()}"
    VideoDecoder(work[0][1][0].data, device=device)  # raises here when this torchcodec has no CUDA decoder

    def run(check):
        for _, segs, idx in work:
            images = []
            for seg, i in zip(segs, idx):
                frames = VideoDecoder(seg.data, device=device, seek_mode="exact",
                                      dimension_order="NHWC").get_frames_at(indices=[int(x) for x in i]).data
                images.append(frames.cpu().numpy() if check else frames)
            torch.cuda.synchronize(device)
            if check:
                check(zip(_wanted(loader, segs, idx), images))
    return run


def _pynvvideocodec(work, loader):
    import PyNvVideoCodec as nvc  # type: ignore[import-not-found]
    import torch

    gpu = int(loader.device.split(":")[1]) if ":" in loader.device else torch.cuda.current_device()
    folder = tempfile.mkdtemp(prefix="dali-stream-pynvc-")
    paths: dict[int, str] = {}
    for _, segs, _ in work:  # SimpleDecoder reads files: the segments written before timing
        for seg in segs:
            if seg.uid not in paths:
                paths[seg.uid] = os.path.join(folder, f"{seg.uid}.mp4")
                with open(paths[seg.uid], "wb") as fh:
                    fh.write(seg.data)
    first = paths[work[0][1][0].uid]
    decoder = nvc.SimpleDecoder(first, gpu_id=gpu, output_color_type=nvc.OutputColorType.RGB)
    current = [first]

    def run(check):
        for _, segs, idx in work:
            images = []
            for seg, i in zip(segs, idx):
                if current[0] != paths[seg.uid]:
                    decoder.reconfigure_decoder(paths[seg.uid])
                    current[0] = paths[seg.uid]
                frames = decoder.get_batch_frames_by_index([int(x) for x in i])
                images.append([torch.from_dlpack(f).cpu().numpy() for f in frames] if check else frames)
            torch.cuda.synchronize(gpu)
            if check:
                check(zip(_wanted(loader, segs, idx), images))
    run.cleanup = lambda: shutil.rmtree(folder, ignore_errors=True)
    return run


class NvdecUtilisation:
    """`nvidia-smi dmon -s u` on one GPU while the `with` block runs: NVDEC utilisation (%) once a second."""

    def __init__(self, gpu_index: int | None) -> None:
        self.gpu_index = gpu_index
        self.values: list[int] = []
        self.why: str | None = None
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "NvdecUtilisation":
        if self.gpu_index is None:
            self.why = "no GPU in use"
        elif shutil.which("nvidia-smi") is None:
            self.why = "nvidia-smi not found on PATH"
        else:
            self.proc = subprocess.Popen(["nvidia-smi", "dmon", "-s", "u", "-i", str(self.gpu_index)],
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            threading.Thread(target=self._read, daemon=True).start()
        return self

    def _read(self) -> None:
        column = None
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            parts = line.split()
            if line.startswith("#") and "dec" in parts:
                column = parts.index("dec") - 1  # "# gpu sm mem enc dec ...": the '#' is a column of its own
            elif column is not None and len(parts) > column and parts[column].isdigit():
                self.values.append(int(parts[column]))

    def __exit__(self, *exc) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def result(self) -> dict[str, Any]:
        if self.why is not None or not self.values:
            return {"available": False, "why": self.why or "nvidia-smi dmon reported no NVDEC samples"}
        return {"available": True, "mean_pct": float(np.mean(self.values)), "max_pct": int(max(self.values)),
                "samples": len(self.values), "source": "nvidia-smi dmon -s u (dec column), once a second"}


class GpuLoad:
    """bfloat16 matmuls of LOAD_SIZE on their own CUDA stream in a thread, counted (module doc)."""

    def __init__(self, device: str) -> None:
        import torch

        if not device.startswith("cuda") or not torch.cuda.is_available():
            from ..errors import ConfigError

            raise ConfigError(f"--gpu-load runs a matmul loop on the loader's CUDA device, but batches land on "
                              f"{device!r} here (torch sees {torch.cuda.device_count()} CUDA devices): run it on a GPU "
                              "node with --device cuda")
        self.size = LOAD_SIZE
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device)
        with torch.cuda.stream(self.stream):
            self.a = torch.randn(LOAD_SIZE, LOAD_SIZE, device=self.device, dtype=torch.bfloat16)
            self.b = torch.randn(LOAD_SIZE, LOAD_SIZE, device=self.device, dtype=torch.bfloat16)
        self.done = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        import torch

        with torch.cuda.stream(self.stream):
            while not self._stop.is_set():
                for _ in range(4):
                    torch.matmul(self.a, self.b)
                self.stream.synchronize()
                self.done += 4

    def measure(self, seconds: float) -> float:
        """TFLOP/s of the loop running alone for `seconds`."""
        with self:
            time.sleep(seconds)
        return self.tflops

    def alone(self, seconds: float) -> dict[str, Any]:
        """The record `bench` keeps of the load (`gpu_load`): what it is and its TFLOP/s alone for `seconds`."""
        return {"matrix": self.size, "dtype": "bfloat16", "alone_tflops": self.measure(seconds)}

    @staticmethod
    def beside(record: dict[str, Any], tflops: float | None) -> dict[str, Any]:
        """`record` (`alone`) with the TFLOP/s the load kept beside the loader, and its ratio to alone."""
        alone = record["alone_tflops"]
        return {**record, "beside_loader_tflops": tflops,
                "ratio": tflops / alone if tflops is not None and alone else None}

    def __enter__(self) -> "GpuLoad":
        self.done, self._t0 = 0, time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="dali-stream-gpu-load")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        assert self._thread is not None
        self._thread.join()
        self.seconds = time.perf_counter() - self._t0

    @property
    def tflops(self) -> float:
        return 2 * LOAD_SIZE ** 3 * self.done / self.seconds / 1e12 if self.seconds else 0.0
