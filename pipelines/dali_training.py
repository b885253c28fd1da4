"""Your own DALI pipeline on LeRobot episodes, into a training loop: `dali_stream.dali`.

    python pipelines/dali_training.py [DATASET] [--batches 20 --batch-size 8 --size 64 --device cpu]

The pipeline is yours: `dali_stream.dali.read(source)` gives the episodes' frames (uint8, HWC; FHWC for a window),
columns, padding masks and the plan's random numbers as DALI inputs; here every camera goes through `fn.resize`
and `fn.crop_mirror_normalize` (ImageNet's mean and std), the rest as it comes. `DALIGenericIterator` hands the
batches to a small policy's training loop, which saves `source.state_dict()` at the end
(`--checkpoint FILE`) and resumes from it (`--resume FILE`): the next batch after the saved one, exactly.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pipelines._common import ensure_sample  # noqa: E402

SETTINGS = ("batch_size", "decode", "device", "num_workers", "episode_pool_size")
MEAN = [0.485 * 255, 0.456 * 255, 0.406 * 255]
STD = [0.229 * 255, 0.224 * 255, 0.225 * 255]


def make_pipeline(source, size: int, num_threads: int = 2):
    """The user's pipeline: every camera resized to size x size and normalised to float32 CHW (FCHW for a window)."""
    from nvidia.dali import fn, pipeline_def, types

    import dali_stream.dali as dsd

    @pipeline_def
    def training(source):
        inputs = dsd.read(source)
        for key in source.cameras:
            frames = fn.resize(inputs[key], size=[size, size], antialias=True)
            layout = source.schema[key].layout.replace("HWC", "CHW")
            inputs[key] = fn.crop_mirror_normalize(frames, dtype=types.FLOAT, output_layout=layout, mean=MEAN,
                                                   std=STD)
        return dsd.outputs(inputs)

    return training(source, batch_size=source.batch_size, device_id=source.device_id, num_threads=num_threads)


def train(source, pipe, batches: int, state_file: str | None = None) -> dict:
    """A small policy (a linear map from pooled camera features and the state to the action) trained on `batches`
    batches of the pipeline; what it did, as a dict."""
    import torch
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    iterator = DALIGenericIterator(pipe, **source.iterator_args())
    cameras, device = source.cameras, str(source.loader.device)
    first = None
    policy = optimizer = None
    losses, shapes, seen, step = [], {}, [], 0
    t0 = time.perf_counter()
    while step < batches:
        for (batch,) in iterator:  # one `for`: one epoch
            # each camera's channels averaged over the picture ((B, C), or (B, T x C) for a window), and the state
            features = torch.cat([batch[k].flatten(-2).mean(-1).flatten(1) for k in cameras]
                                 + [batch["observation.state"].flatten(1)], dim=1)
            target = batch["action"].flatten(1)
            if policy is None:
                policy = torch.nn.Linear(features.shape[1], target.shape[1]).to(device)
                optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
                shapes = {k: list(v.shape) for k, v in batch.items()}
            loss = torch.nn.functional.mse_loss(policy(features), target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            seen.append(batch["index"].tolist())
            first = first if first is not None else time.perf_counter() - t0
            step += 1
            if step >= batches:
                break
    elapsed = time.perf_counter() - t0
    state = source.state_dict()  # the batches DALI prepared ahead are not counted: a resume gets them
    if state_file:
        Path(state_file).write_text(json.dumps(state))
    return {"batches": step, "samples_per_s": round(sum(map(len, seen)) / elapsed, 1), "first_loss": losses[0],
            "last_loss": losses[-1], "shapes": shapes, "routes": source.loader.routes, "indices": seen,
            "state": {"epoch": state["epoch"], "batches_consumed": state["batches_consumed"]}}


def main(argv=None) -> dict:
    from dali_stream import open_meta
    from dali_stream.dali import Source
    from dali_stream.tools.flags import add_loader_flags, loader_settings

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dataset", nargs="?", default=".demo/sample", help="dataset root (default: the sample, written "
                   "there on first use)")
    p.add_argument("--batches", type=int, default=20)
    p.add_argument("--size", type=int, default=64, help="the cameras' side after fn.resize")
    p.add_argument("--checkpoint", help="write the source's state here at the end")
    p.add_argument("--resume", help="continue from a state written by --checkpoint")
    add_loader_flags(p, SETTINGS, batch_size=8)
    args = p.parse_args(argv)
    dataset = ensure_sample(args.dataset) if args.dataset == ".demo/sample" else args.dataset
    meta = open_meta(dataset)  # read once: the source takes it in place of the path
    with Source(meta, delta_timestamps={"action": [i / meta.fps for i in range(4)]},  # a 4-step action chunk
                **loader_settings(args, SETTINGS)) as source:
        if args.resume:
            source.load_state_dict(json.loads(Path(args.resume).read_text()))
        summary = train(source, make_pipeline(source, args.size), args.batches, args.checkpoint)
    print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
