"""torchcodec 0.17's low-level decoding (demuxer, packet decoder and colour converter as separate calls, each
releasing the GIL) against the decoder the loader uses (`decode.cpu.open_decoder`: `VideoDecoder`, exact seeks,
`get_frames_at`), on the loader's own segments.

    .venv/bin/python benchmarks/torchcodec_blocks.py dump             # the segments, from this checkout's loader
    VENV/bin/python benchmarks/torchcodec_blocks.py measure [--rounds 3] [--out FILE]

`dump` writes, for each shape, the distinct segments (in-memory MP4, as the store cuts them) of the cameras the
loader decodes with torchcodec over its first batches, and each sample's frame indices in them, under
`.demo/torchcodec-blocks/`: the README sample's shape (96x128 H.264 and AV1), LIBERO's (two 256x256 AV1 cameras)
and the bench's `av1-quick` (two 640x480 AV1 cameras, GOP 2). `measure` needs torchcodec only (no dali_stream):
run it with a venv holding torchcodec 0.17 (PyPI's, beside PyPI's torch 2.15) to compare both ways, or with this
project's venv (torchcodec 0.13) for `VideoDecoder` alone. Ways, each timed on 1 thread and on 2 threads at once
(segments dealt out), frames per second:

- `whole`: each segment's every frame, front to back (what the open episodes' frames do at small shapes):
  `get_frames_at(all)` against demux -> decode -> convert every frame;
- `samples`: each sample's frames of its segment, a warm decoder per segment (what a 480p episode gets):
  `get_frames_at(idx)` against a seek to the keyframe at or before the first (`FrameIndex.key_frame_seconds_for`),
  decoding forward and converting only the frames asked for.

Every frame of both ways is compared first, and the largest pixel difference and time gap are reported beside the
rates (`check`: both 0 in the committed results).
Configurations alternate within a round (`_common.alternate`); median (range) over rounds.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

from _common import alternate, bench_sample, spread

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / ".demo" / "torchcodec-blocks"
SHAPES = {  # name -> (dataset folder under ROOT, batches of the loader's plan to take segments from)
    "sample-96x128": (".demo/host-path-sample", 12),
    "libero-256x256": (".demo/host-path-libero", 12),
    "av1-quick-640x480": (".demo/bench-av1-quick", 6),
}


def dump() -> None:
    """The shapes' segments and samples, from this checkout's loader (torchcodec cameras only)."""
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from host_path import dataset

    from dali_stream import StreamLoader
    from dali_stream.tools.bench_gpu import window_work

    for name, (folder, batches) in SHAPES.items():
        path = ROOT / folder
        if not (path / "meta/info.json").exists():
            if name == "av1-quick-640x480":
                bench_sample("av1-quick")
            else:
                dataset(name)
        loader = StreamLoader(str(path), device="cpu", seed=1, episode_frames_bytes=0)
        keys = [k for k, r in loader.routes.items() if r == "torchcodec"]
        work, _ = window_work(loader, [(0, i) for i in range(min(batches, len(loader)))], keys)
        out = FOLDER / name
        out.mkdir(parents=True, exist_ok=True)
        segments: dict = {}
        for key, segs, idx in work:
            for seg, frames in zip(segs, idx):
                entry = segments.setdefault(seg.uid, {"key": key, "data": seg.data, "samples": []})
                entry["samples"].append([int(i) for i in frames])
        index = []
        for n, entry in enumerate(segments.values()):
            (out / f"{n}.mp4").write_bytes(entry["data"])
            index.append({"file": f"{n}.mp4", "camera": entry["key"], "samples": entry["samples"]})
        (out / "index.json").write_text(json.dumps(index))
        print(f"{name}: {len(index)} segments, {sum(len(e['samples']) for e in index)} samples -> {out}")
        loader.close()


# ---- measure: torchcodec alone --------------------------------------------------------------------------------


def _frames_at(data: bytes, indices: list[int], decoder=None):
    from torchcodec.decoders import VideoDecoder

    decoder = decoder or VideoDecoder(data, seek_mode="exact", dimension_order="NHWC")
    batch = decoder.get_frames_at(indices=indices)
    return decoder, batch.data, batch.pts_seconds


class Blocks:
    """One segment through the low-level blocks: its frame index (scanned once), a packet decoder, a converter."""

    def __init__(self, data: bytes) -> None:
        from torchcodec.decoders import ColorConverter, Demuxer

        self.demuxer = Demuxer(data)
        self.stream = self.demuxer.streams[0]
        self.index = self.stream.scan()
        self.decoder = self.stream.make_decoder(device="cpu")
        self.converter = ColorConverter(device="cpu")
        self.pts = self.index.pts_seconds

    def frames(self, indices: list[int]):
        """The frames at `indices` (sorted, distinct), HWC uint8, and their times: from the keyframe at or before the
        first, decoded forward, only those asked for converted."""
        import torch

        want = {round(float(self.pts[i]), 6): n for n, i in enumerate(indices)}
        self.demuxer.seek(self.index.key_frame_seconds_for(float(self.pts[indices[0]])))
        self.decoder.reset()
        out: list = [None] * len(indices)
        left = len(indices)

        def take(raw) -> None:
            nonlocal left
            n = want.get(round(float(raw.pts_seconds), 6))
            if n is not None and out[n] is None:
                out[n] = self.converter.convert(raw).data.permute(1, 2, 0)
                left -= 1

        for packet in self.demuxer:
            for raw in self.decoder.decode(packet):
                take(raw)
            if not left:
                break
        if left:
            for raw in self.decoder.drain():
                take(raw)
        return torch.stack(out), self.pts[indices]


def _load(name: str) -> list[dict]:
    folder = FOLDER / name
    index = json.loads((folder / "index.json").read_text())
    for entry in index:
        entry["data"] = (folder / entry["file"]).read_bytes()
    return index


def _work(index: list[dict], way: str, what: str, warm: dict) -> int:
    """Decode every segment of `index` (`what`: whole, or sample by sample with a warm decoder each) `way`
    (decoder, blocks); the frames decoded."""
    n = 0
    for entry in index:
        if what == "whole":
            count = entry["count"]
            if way == "decoder":
                _frames_at(entry["data"], list(range(count)))
            else:
                Blocks(entry["data"]).frames(list(range(count)))
            n += count
        else:
            state = warm[(way, id(entry))]
            for sample in entry["samples"]:
                wanted = sorted(set(sample))
                if way == "decoder":
                    _frames_at(entry["data"], wanted, state)
                else:
                    state.frames(wanted)
                n += len(wanted)
    return n


def _timed(index: list[dict], way: str, what: str, threads: int, warm: dict) -> float:
    parts = [index[t::threads] for t in range(threads)]
    done = [0] * threads

    def run(t: int) -> None:
        done[t] = _work(parts[t], way, what, warm)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(done) / (time.perf_counter() - t0)


def _check(index: list[dict], ways: list[str]) -> dict:
    """Both ways give the same frames and times, whole and per sample: the largest pixel difference and time gap."""
    import torch

    worst = {"pixels": 0, "seconds": 0.0, "frames": 0}
    if len(ways) < 2:
        return worst
    for entry in index:
        asks = [list(range(entry["count"]))] + [sorted(set(s)) for s in entry["samples"]]
        for ask in asks:
            _, a, ta = _frames_at(entry["data"], ask)
            b, tb = Blocks(entry["data"]).frames(ask)
            worst["pixels"] = max(worst["pixels"], int((a.to(torch.int16) - b.to(torch.int16)).abs().max()))
            worst["seconds"] = max(worst["seconds"], float((ta.double() - tb.double()).abs().max()))
            worst["frames"] += len(ask)
    return worst


def measure(rounds: int, out: str | None) -> None:
    import torch
    import torchcodec
    from torchcodec import decoders

    torch.set_num_threads(1)
    ways = ["decoder"] + (["blocks"] if hasattr(decoders, "Demuxer") else [])  # the blocks: torchcodec >= 0.17
    result: dict = {"torch": torch.__version__, "torchcodec": torchcodec.__version__, "rounds": rounds, "shapes": {}}
    for name in SHAPES:
        index = _load(name)
        for entry in index:
            entry["count"] = len(decoders.VideoDecoder(entry["data"], seek_mode="exact"))
        check = _check(index, ways)
        warm = {}
        for entry in index:
            warm[("decoder", id(entry))] = _frames_at(entry["data"], [0])[0]
            if "blocks" in ways:
                warm[("blocks", id(entry))] = Blocks(entry["data"])
        configs = [(what, way, threads) for what in ("whole", "samples") for threads in (1, 2) for way in ways]
        got = alternate(configs, rounds, lambda c: _timed(index, c[1], c[0], c[2], warm),
                        lambda line: print(f"{name} {line} frames/s", flush=True))
        shape = {"segments": len(index), "frames": sum(e["count"] for e in index), "check": check}
        for c, rates in got.items():
            shape[" ".join(map(str, c))] = spread(rates)
        if "blocks" in ways:
            for what in ("whole", "samples"):
                for threads in (1, 2):
                    shape[f"blocks/decoder {what} {threads}"] = spread(
                        b / a for a, b in zip(got[(what, "decoder", threads)], got[(what, "blocks", threads)]))
        result["shapes"][name] = shape
    text = json.dumps(result, indent=2)
    print(text)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    sub.add_parser("dump")
    m = sub.add_parser("measure")
    m.add_argument("--rounds", type=int, default=3)
    m.add_argument("--out")
    args = ap.parse_args()
    if args.what == "dump":
        dump()
    else:
        measure(args.rounds, args.out)


if __name__ == "__main__":
    main()
