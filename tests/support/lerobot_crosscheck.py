"""Cross-check StreamLoader against lerobot itself (a developer tool, not part of `make test`).

lerobot needs Python >= 3.12 while our CI runs 3.11, so the check runs in two interpreters:

    # 1. in a Python 3.12 venv with `pip install lerobot==0.6.1`: lerobot reads every sample
    python tests/support/lerobot_crosscheck.py dump DATASET lerobot_items.npz
    # 2. in this project's .venv: StreamLoader streams an epoch, each sample is compared with lerobot's
    .venv/bin/python tests/support/lerobot_crosscheck.py compare DATASET lerobot_items.npz

(`--episodes 1,4,5` a subset, `--depth-unit m` depth cameras in metres: the same on both sides.)

Tabular values, cameras stored as images in the tables and depth cameras' depth (lerobot's depth maps, in
millimetres) must be bit-exact (dtype, shape, value); video frames must show the same painted (episode, frame) and be
within decoder rounding of lerobot's pixels (where a lossy re-encode blurred the painted ids, as
lerobot-edit-dataset's can, by the pixels alone); how many are bit for bit equal is reported (on the CPU route all
of them where both sides decode with the same FFmpeg). `loader.dataset[i]` is compared at 50 to 99 positions: bit
for bit on every key torchcodec decodes or the tables hold. Exit status 0 only when every sample agrees.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

FPS = 30


def deltas(fps: float, video_keys: list[str], depth_keys: list[str] = (), image_keys: list[str] = ()
           ) -> dict[str, list[float]]:
    """Windows on the tables, the first video camera, every depth camera and every camera stored as images in the
    tables (compared bit for bit: PNG is lossless)."""
    out = {"action": [i / fps for i in range(-2, 6)], "observation.state": [-3 / fps, 0.0]}
    if video_keys:
        out[video_keys[0]] = [-2 / fps, 0.0, 3 / fps]
    return out | {key: [-1 / fps, 0.0, 2 / fps] for key in depth_keys} | {key: [-1 / fps, 0.0]
                                                                             for key in image_keys}


def image_keys(info: dict) -> list[str]:
    """The cameras stored as images in the frame tables (lerobot's `use_videos=False`)."""
    return [k for k, f in info["features"].items() if f["dtype"] == "image"]


def depth_keys(info: dict) -> list[str]:
    """The depth cameras (lerobot's `is_depth_map`; read here without dali_stream, which lerobot's venv lacks)."""
    return [k for k, f in info["features"].items() if f["dtype"] == "video" and (f.get("info") or {}).get(
        "is_depth_map")]


def _info(root: Path) -> dict:
    return json.loads((root / "meta/info.json").read_text())


def dump(root: Path, out: Path, episodes: list[int] | None = None, depth_unit: str = "mm") -> None:
    import torch
    from lerobot.datasets.lerobot_dataset import LeRobotDataset

    info = _info(root)
    video_keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    ds = LeRobotDataset("local/crosscheck", root=root, delta_timestamps=deltas(info["fps"], video_keys,
                                                                             depth_keys(info), image_keys(info)),
                        video_backend="pyav", episodes=episodes, depth_output_unit=depth_unit)
    arrays, tasks = {}, []
    for i in range(len(ds)):
        item = ds[i]
        for key, value in item.items():
            if isinstance(value, torch.Tensor):
                arrays[f"{i}|{key}"] = value.numpy()
            elif key == "task":
                tasks.append(value)
    np.savez_compressed(out, **arrays, __tasks__=np.array(tasks, dtype=object), __len__=np.array(len(ds)))
    print(f"lerobot {__import__('lerobot').__version__}: dumped {len(ds)} samples of {root} to {out}")


def compare(root: Path, dumped: Path, episodes: list[int] | None = None, depth_unit: str = "mm") -> int:
    from dali_stream import StreamLoader
    from dali_stream.tools.paint import UnreadableIds, read_ids

    unreadable = [0]

    def ids(frame):
        """The painted ids, or None where a lossy re-encode (lerobot-edit-dataset's, at crf 30) blurred them: such
        frames agree by their pixels alone."""
        try:
            return read_ids(frame)
        except UnreadableIds:
            unreadable[0] += 1
            return None

    info = _info(root)
    data = np.load(dumped, allow_pickle=True)
    n = int(data["__len__"])
    tasks = data["__tasks__"]
    # lerobot's dataset[i] counts the samples of the episodes it loads; the loader's samples carry their `index`
    position = {int(data[f"{i}|index"]): i for i in range(n)}
    video_keys = [k for k, f in info["features"].items() if f["dtype"] == "video"]
    depth = depth_keys(info)
    loader = StreamLoader(str(root), batch_size=8, delta_timestamps=deltas(info["fps"], video_keys, depth,
                                                                                        image_keys(info)),
                          episode_pool_size=4, decode="auto", device="cpu", drop_last=False, episodes=episodes,
                          depth_output_unit=depth_unit)
    problems, seen = [], 0
    exact = [0, 0]  # video samples compared, and those bit for bit equal (the same decoder and lerobot's x / 255)
    for batch in loader:
        for j in range(len(batch["task"])):
            index = position.get(int(batch["index"][j]), -1)
            seen += 1
            if index < 0:
                problems.append(f"index {int(batch['index'][j])}: a sample lerobot's dataset does not hold")
                continue
            lerobot_keys = {k.split("|", 1)[1] for k in data.files if k.startswith(f"{index}|")}
            ours = set(batch) - {"task"}
            if lerobot_keys != ours:
                problems.append(f"index {index}: keys differ: only lerobot {sorted(lerobot_keys - ours)}, "
                                f"only ours {sorted(ours - lerobot_keys)}")
            if batch["task"][j] != tasks[index]:
                problems.append(f"index {index}: task {batch['task'][j]!r} != {tasks[index]!r}")
            for key in sorted(lerobot_keys & ours):
                want, got = data[f"{index}|{key}"], batch[key][j].numpy()
                if key in video_keys and key not in depth:
                    w8 = np.rint(want * 255).astype(np.uint8) if want.dtype != np.uint8 else want
                    g8 = np.rint(got * 255).astype(np.uint8)
                    wf, gf = (w8, g8) if w8.ndim == 4 else (w8[None], g8[None])
                    if got.shape != want.shape or [ids(f) for f in wf] != [ids(f) for f in gf]:
                        problems.append(f"index {index} {key}: shape {got.shape} vs {want.shape} or frames differ")
                    elif np.abs(g8.astype(np.int16) - w8).mean() > 4:
                        problems.append(f"index {index} {key}: pixels differ beyond decoder rounding")
                    exact[0] += 1
                    exact[1] += int(got.dtype == want.dtype and np.array_equal(got, want))
                elif got.dtype != want.dtype or got.shape != want.shape or not np.array_equal(got, want):
                    problems.append(f"index {index} {key}: ours {got.dtype}{got.shape} {got.ravel()[:4]} vs "
                                    f"lerobot {want.dtype}{want.shape} {want.ravel()[:4]}")
    if seen != n:
        problems.append(f"streamed {seen} samples but lerobot has {n}")
    picked = range(0, n, max(1, n // 50))  # `loader.dataset[i]`, lerobot's random access, at 50 to 99 positions
    for i in picked:
        item = loader.dataset[i]
        for key, got in item.items():
            want = tasks[i] if key == "task" else data[f"{i}|{key}"]
            exact_here = key not in video_keys or key in depth or loader.routes.get(key) == "torchcodec"
            if key == "task" or not exact_here:
                same = got == want if key == "task" else got.shape == want.shape
            else:
                got = got.numpy()
                same = got.dtype == want.dtype and got.shape == want.shape and np.array_equal(got, want)
            if not same:
                problems.append(f"dataset[{i}] {key}: not lerobot's dataset[{i}]")
    for line in problems[:30]:
        print(line)
    print(f"compared {seen} samples x {len(ours)} keys with lerobot's, and dataset[i] at {len(picked)} positions: "
          f"{len(problems)} problems; "
          f"video cameras' samples bit for bit equal: {exact[1]} of {exact[0]}; "
          f"routes {loader.routes}" + (f"; {unreadable[0]} frames' painted ids unreadable (re-encoded): compared by "
                                       "pixels" if unreadable[0] else ""))
    return 1 if problems else 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("mode", choices=("dump", "compare"))
    p.add_argument("dataset", type=Path)
    p.add_argument("items", type=Path)
    p.add_argument("--episodes", type=lambda text: [int(e) for e in text.split(",")],
                   help="a subset, e.g. 1,4,5: lerobot's episodes= against the loader's (the same list both times)")
    p.add_argument("--depth-unit", choices=("mm", "m"), default="mm",
                   help="depth cameras' depth_output_unit on both sides (the same both times)")
    args = p.parse_args(argv)
    if args.mode == "dump":
        dump(args.dataset, args.items, args.episodes, args.depth_unit)
        return 0
    return compare(args.dataset, args.items, args.episodes, args.depth_unit)


if __name__ == "__main__":
    sys.exit(main())
