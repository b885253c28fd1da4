"""Cameras stored as images in the frame tables (lerobot's `use_videos=False`, as LIBERO is published for pi0): what
the decoded-frame cache (`frame_cache_bytes`) gives later epochs.

    .venv/bin/python benchmarks/table_images.py [--episodes 80] [--frames 15] [--size 256] [--rounds 3]
                                                [--epochs 3] [--cache-fraction 0.85] [--out F]

Writes a dataset of two cameras (`observation.images.image`, `observation.images.wrist_image`, `--size` square,
the sample writer's camera-like scenes) stored as PNG in the frame tables, one row group per episode as lerobot's
recorder writes them. Then streams `--epochs` epochs of it in two configurations, alternated `--rounds` times (a new
loader each run, batches of 32 as float32 (3, H, W), lerobot's default; `cache_bytes`, the fetched episodes' bound,
`--cache-fraction` of the data files' bytes, which the pool's open episodes and those of the batches in flight fit:
as for a dataset larger than its 4 GiB default, LIBERO's 273,465 frames, an epoch fetches its episodes' rows again):

- `plain`: no cache: every epoch decodes every PNG;
- `cached`: `frame_cache_bytes=4 GiB` (the dataset's decoded images fit): epoch 1 decodes them, later ones read them,
  and read an episode's rows without the image columns where every image of it is held.

Reported per configuration and epoch: samples a second (median and range over rounds), the PNGs decoded and the
table bytes read (compressed, `stats()["fetch"]["table_bytes_read"]`), and the fetched episodes' peak bytes; and,
within each round, `cached` against `plain` epoch by epoch and `cached`'s later epochs against its first.
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _common import alternate, spread, within_rounds, write_result

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CAMERAS = ("observation.images.image", "observation.images.wrist_image")
BATCH = 32


def write_dataset(root: Path, episodes: int, frames: int, size: int) -> Path:
    """The sample writer's tables and scenes, its cameras turned into PNG columns of the frame tables (video_path
    null, no videos/), as lerobot records with `use_videos=False`."""
    import av
    import pyarrow as pa

    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample
    from tests.support.columns import add_columns

    spec = SampleSpec(episodes=episodes, min_length=frames, max_length=frames, episodes_per_file=episodes // 2,
                      height=size, width=size, content="scene", seed=4,
                      cameras=parse_cameras(",".join(f"{k.rsplit('.', 1)[-1]}:h264" for k in CAMERAS)))
    write_sample(root, spec)
    shutil.rmtree(root / "videos")
    info = json.loads((root / "meta/info.json").read_text())
    for key in CAMERAS:
        del info["features"][key]
    info["video_path"] = None
    (root / "meta/info.json").write_text(json.dumps(info))

    def png(rgb) -> bytes:
        codec = av.CodecContext.create("png", "w")
        codec.width, codec.height, codec.pix_fmt = size, size, "rgb24"
        return b"".join(bytes(p) for p in codec.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")))

    def columns(rows: pa.Table) -> dict:
        ids = list(zip(rows.column("episode_index").to_pylist(), rows.column("frame_index").to_pylist()))
        kind = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
        return {key: pa.array([{"bytes": png(rgb), "path": f"frame_{e:06d}_{f:06d}.png"}
                               for (e, f), rgb in zip(ids, spec.frames(ids, c))], kind)
                for c, key in enumerate(CAMERAS)}

    image = {"dtype": "image", "shape": [size, size, 3], "names": ["height", "width", "channels"]}
    add_columns(root, {key: image for key in CAMERAS}, columns, first=True)
    return root


def run(root: Path, config: str, epochs: int, cache_bytes: int) -> dict:
    from dali_stream import StreamLoader

    cache = {"frame_cache_bytes": 4 << 30} if config == "cached" else {}
    out: dict[str, list] = {"samples_per_s": [], "decoded": [], "table_bytes": []}
    with StreamLoader(str(root), batch_size=BATCH, device="cpu", seed=5, cache_bytes=cache_bytes, **cache) as loader:
        for _ in range(epochs):
            before = loader.stats()["build"]["decoded_frames"]
            read = loader.stats()["fetch"]["table_bytes_read"]
            t0, n = time.perf_counter(), 0
            for batch in loader:
                n += len(batch["index"])
            out["samples_per_s"].append(n / (time.perf_counter() - t0))
            out["decoded"].append(loader.stats()["build"]["decoded_frames"] - before)
            out["table_bytes"].append(loader.stats()["fetch"]["table_bytes_read"] - read)
        out["fetched_peak"] = loader.stats()["bounded"]["fetched_episodes"]["peak"]
    return out


def parser(doc: str, epochs: int, cache_fraction: float, out: str) -> argparse.ArgumentParser:
    """The flags of the dataset and of the runs (this script's and `image_spill.py`'s)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--episodes", type=int, default=80)
    p.add_argument("--frames", type=int, default=15, help="frames an episode")
    p.add_argument("--size", type=int, default=256, help="the cameras' height and width (LIBERO's: 256)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=epochs)
    p.add_argument("--cache-fraction", type=float, default=cache_fraction,
                   help="cache_bytes (the fetched episodes' bound) as a fraction of the data files' bytes")
    p.add_argument("--out", default=out)
    return p


def written(tmp: str, args: argparse.Namespace) -> tuple[Path, int, int]:
    """The dataset `args` ask for, written under `tmp`: its root, its data files' bytes and the runs' cache_bytes."""
    root = write_dataset(Path(tmp) / "images", args.episodes, args.frames, args.size)
    data_bytes = sum(f.stat().st_size for f in root.glob("data/*/*.parquet"))
    return root, data_bytes, int(data_bytes * args.cache_fraction)


def main(argv=None) -> int:
    args = parser(__doc__, 3, 0.85, "benchmarks/results/cpu-2core-table-images/result.json").parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        root, png_bytes, cache_bytes = written(tmp, args)
        got = alternate(("plain", "cached"), args.rounds, lambda config: run(root, config, args.epochs, cache_bytes))

    def per_epoch(runs: list[dict], e: int) -> list[dict]:
        return [{"samples_per_s": r["samples_per_s"][e]} for r in runs]

    result = {
        "command": "python benchmarks/table_images.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": f"{platform.node()} {platform.machine()}",
        "episodes": args.episodes, "frames_per_episode": args.frames, "size": args.size, "cameras": list(CAMERAS),
        "batch_size": BATCH, "rounds": args.rounds, "data_files_bytes": png_bytes, "cache_bytes": cache_bytes,
        "configs": {c: {f"epoch_{e + 1}": {"samples_per_s": spread([r["samples_per_s"][e] for r in runs]),
                                           "pngs_decoded": [r["decoded"][e] for r in runs],
                                           "table_bytes_read": [r["table_bytes"][e] for r in runs]}
                        for e in range(args.epochs)} | {"fetched_episodes_peak_bytes": [r["fetched_peak"] for r in runs]}
                    for c, runs in got.items()},
        "cached_to_plain": {f"epoch_{e + 1}": within_rounds(per_epoch(got["cached"], e), per_epoch(got["plain"], e),
                                                            "samples_per_s") for e in range(args.epochs)},
        "cached_to_its_epoch_1": {f"epoch_{e + 1}": within_rounds(per_epoch(got["cached"], e),
                                                                  per_epoch(got["cached"], 0), "samples_per_s")
                                  for e in range(1, args.epochs)},
    }
    print(write_result(args.out, result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
