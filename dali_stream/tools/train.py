"""`dali-stream train`: a policy trained on StreamLoader batches with Accelerate, one StreamLoader per rank,
periodic checkpoints, exact resume.

    dali-stream train DATASET --steps 200 --chunk 16                         # an action chunk of 16
    dali-stream train DATASET --policy act --checkpoint-dir ckpt             # lerobot's ACT (lerobot installed)
    torchrun --nproc-per-node 8 -m dali_stream train DATASET --epochs 2 --checkpoint-dir ckpt
    accelerate launch --num_processes 2 -m dali_stream train DATASET --epochs 2 --checkpoint-dir ckpt
    dali-stream train DATASET --dummy --resume-from ckpt/latest              # pure data loading, resumed

State and action sizes come from the dataset's meta/info.json; `--chunk N` predicts N future actions
(`delta_timestamps` on `action`). Every `--log-every` steps each rank prints its samples/s and how long it waited
for data (`loader.data_wait()`: the share of the last 100 steps' wall time spent waiting, and the p95 wait), with
the max over ranks; the last line reports samples/s of all ranks together.

The loader is NOT passed to `accelerator.prepare` (that would shard it again and drop (W-1)/W of each
rank's batches): StreamLoader already gives every rank its own share, with equal batch counts. Rank and
world size come from Accelerate. Rank 0 writes checkpoints (model, optimizer, step and the loader state,
which is the same on every rank) every `--checkpoint-every` steps and at the run's last step; `--resume-from`
continues exactly with the batches the uninterrupted run would have seen next, on any number of ranks.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

from dali_stream.errors import ConfigError, DatasetError
from dali_stream.tools.flags import add_loader_flags, checked_settings, require_at_least

# Loader settings taken as flags (type, default and help from dali_stream.LoaderConfig).
LOADER_SETTINGS = ("batch_size", "episode_pool_size", "num_workers", "decode", "seed", "tolerance_s", "memory_format",
                   "frame_cache_bytes", "frame_cache_dir", "disk_cache_dir", "table_cache_dir", "table_cache_bytes")

class Policy:
    """A small real policy: pooled camera features + state -> action (built lazily to import torch late)."""

    @staticmethod
    def build(num_cameras: int, state_dim: int, action_dim: int, depth: bool = False):
        """`depth`: some camera is a depth camera ((B, 1, H, W) millimetres): a convolution of its own, on metres."""
        import torch

        class _Policy(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = torch.nn.Conv2d(3, 8, 5, stride=4)
                if depth:
                    self.depth_conv = torch.nn.Conv2d(1, 8, 5, stride=4)
                self.head = torch.nn.Sequential(torch.nn.Linear(8 * num_cameras + state_dim, 64), torch.nn.ReLU(),
                                                torch.nn.Linear(64, action_dim))

            def forward(self, images, state):
                feats = [(self.depth_conv(img * 1e-3) if img.shape[-3] == 1 else self.conv(img)).mean(dim=(2, 3))
                         for img in images]
                return self.head(torch.cat(feats + [state], dim=1))

        return _Policy()


def feature_size(meta, key: str, source: str) -> int:
    """Elements of feature `key` per frame, from the dataset's meta/info.json (`meta`: `source`'s metadata; e.g. 6
    for a 6-dof state; a mixture's: the longest member's)."""
    features = meta.features
    if key not in features:
        raise DatasetError(f"the built-in policy needs the dataset feature {key!r}; {source} has {sorted(features)}: "
                           "train a lerobot policy that reads these (--policy), or a dataset that has it")
    size = 1
    for dim in features[key].get("shape") or [1]:
        size *= int(dim)
    return size


def per_member_chunks(mixture, meta, chunk: int):
    """`mixture` with each member's action window restated as `chunk` steps at its own fps (`Member(
    delta_timestamps=...)`): the same number of future actions from a 30 fps and a 10 fps arm."""
    import dataclasses

    from dali_stream import Mixture

    members = tuple(dataclasses.replace(m, delta_timestamps={"action": [i / own.fps for i in range(chunk)]})
                    for m, own in zip(mixture.members, meta.members))
    return Mixture(members, mixture.samples_per_epoch, mixture.vectors)


def save_checkpoint(directory: Path, step: int, payload: dict) -> Path:
    import torch

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"step-{step:07d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save(payload, tmp)
    os.replace(tmp, path)  # a kill mid-write never leaves a half checkpoint behind
    return _point_latest(directory, path)


def _point_latest(directory: Path, path: Path) -> Path:
    """Point `directory/latest` at checkpoint `path` (replaced atomically), and return `path`."""
    latest = directory / "latest.tmp"
    latest.write_text(path.name)
    os.replace(latest, directory / "latest")
    return path


def save_lerobot_checkpoint(directory: Path, step: int, trainer, loader_state: dict, accelerator) -> Path:
    """lerobot's checkpoint layout (dali_stream/tools/lerobot_policy.py) in `step-XXXXXXX/`, written beside and moved into
    place, then the 'latest' pointer: a kill mid-write never leaves a half checkpoint behind."""
    import shutil

    path = directory / f"step-{step:07d}"
    tmp = directory / f".step-{step:07d}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.save(tmp, step, loader_state, accelerator)
    shutil.rmtree(path, ignore_errors=True)
    os.replace(tmp, path)
    return _point_latest(directory, path)


def _override(text: str) -> tuple[str, object]:
    """--lerobot-arg NAME=JSON as (name, value); a value that is not JSON is taken as a string."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise ConfigError(f"--lerobot-arg {text!r}: expected NAME=VALUE, e.g. pretrained_backbone_weights=null")
    try:
        return name, json.loads(value)
    except ValueError:
        return name, value


def resolve_checkpoint(path: str) -> Path:
    """The checkpoint `--resume-from path` names: a checkpoint itself, or the one a run's directory (or its 'latest'
    pointer) points at; a `FileNotFoundError` with the fix where there is none."""
    p = Path(path)
    if p.name == "latest" or p.is_dir():
        pointer = (p if p.name == "latest" else p / "latest")
        if not pointer.exists():
            raise FileNotFoundError(f"--resume-from {path}: no 'latest' checkpoint pointer there; "
                                    "pass a step-XXXXXXX.pt file or the checkpoint directory of a run")
        p = pointer.parent / pointer.read_text().strip()
    if not p.exists():
        raise FileNotFoundError(f"--resume-from {path}: no checkpoint {p} there; pass the --checkpoint-dir of an "
                                "earlier run (its 'latest' checkpoint) or one of its step-XXXXXXX checkpoints")
    return p


def mixed_runs(directory: str | None, resume: Path | None) -> str | None:
    """A warning where `--checkpoint-dir directory` already holds another run's checkpoints (this run does not
    resume from one of them): its own would be written among them, and 'latest' moved to this run's."""
    if directory is None:
        return None
    folder = Path(directory)
    if resume is not None and resume.resolve().parent == folder.resolve():
        return None
    earlier = sorted(p.name for p in folder.glob("step-*") if not p.name.endswith(".tmp"))
    if not earlier:
        return None
    return (f"warning: --checkpoint-dir {directory} already holds another run's checkpoints ({earlier[0]} .. "
            f"{earlier[-1]}): this run's are written among them (one of the same step replaced) and 'latest' moves to "
            f"this run's newest; --resume-from {directory} goes on with that run, or give a new folder")


def steps_ahead(loader, epochs: int, steps: int | None, step: int) -> int:
    """The optimizer steps this run will take: what is left of the epoch the loader is in, the later epochs (as
    many batches each as the next), at most `steps` in all."""
    state = loader.state_dict()
    per_epoch = len(loader)
    left = per_epoch - state["batches_consumed"] + max(0, epochs - state["epoch"] - 1) * per_epoch
    return left if steps is None else max(0, min(left, steps - step))


class StepBar:
    """Rank 0's progress bar on stderr: steps done of the run's, the loss, samples/s, time left (other ranks none).
    Log lines printed meanwhile go above it."""

    def __init__(self, shown: bool, total: int) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self.progress = Progress(TextColumn("[bold]training"), BarColumn(), MofNCompleteColumn(), TextColumn("steps"),
                                 TimeElapsedColumn(), TimeRemainingColumn(), TextColumn("{task.fields[now]}"),
                                 console=Console(stderr=True), disable=not shown)
        self.task = self.progress.add_task("train", total=total, now="")

    def __enter__(self) -> "StepBar":
        self.progress.start()
        return self

    def step(self, step: int, loss: float | None, rate: float) -> None:
        now = ("" if loss is None else f"loss {loss:.4f}  ") + f"{rate:.0f} samples/s"
        self.progress.update(self.task, advance=1, now=now)

    def __exit__(self, *exc) -> None:
        self.progress.stop()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="dali-stream train", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dataset", help="dataset root, Hub id or URL, or a mixture file (.json: dali_stream.mixture.load_mixture)")
    ap.add_argument("--epochs", type=int, default=1, help="epochs to train (default: 1; --steps stops sooner)")
    add_loader_flags(ap, LOADER_SETTINGS, batch_size=8, episode_pool_size=8)
    ap.add_argument("--dummy", action="store_true", help="no model: measure and test pure data loading")
    ap.add_argument("--checkpoint-dir", default=None,
                    help="where rank 0 writes checkpoints (none without it; a folder of .demo/ keeps them out of a "
                         "checkout)")
    ap.add_argument("--checkpoint-every", type=int, default=50, help="steps between checkpoints (rank 0; default: 50)")
    ap.add_argument("--resume-from", default=None, help="a checkpoint file, or a directory / its 'latest' pointer")
    ap.add_argument("--log-every", type=int, default=20,
                    help="steps between log lines: loss, samples/s, the data wait (default: 20)")
    ap.add_argument("--sample-log", default=None, help="append each step's sample indices to <this>/rank<r>.jsonl")
    ap.add_argument("--steps", type=int, default=None, help="stop after this many optimizer steps in total")
    ap.add_argument("--chunk", type=int, default=1, help="actions predicted per sample (an action chunk, as ACT)")
    ap.add_argument("--policy", default="builtin",
                    help="builtin (the small policy here), or a lerobot policy type (act, diffusion, ...) built by "
                         "lerobot's own factories when lerobot 0.5-0.6 is installed (dali_stream/tools/lerobot_policy.py)")
    ap.add_argument("--mixed-precision", default="no", choices=("no", "fp16", "bf16"),
                    help="Accelerate's mixed precision for the policy's forward and backward")
    ap.add_argument("--lerobot-arg", action="append", default=[], metavar="NAME=JSON",
                    help="a lerobot policy config field, e.g. pretrained_backbone_weights=null (repeatable)")
    args = ap.parse_args(argv)
    settings = checked_settings(args, LOADER_SETTINGS)  # every argument checked before any work
    require_at_least(args, epochs=1, steps=1, chunk=1, log_every=1, checkpoint_every=1)
    resume = resolve_checkpoint(args.resume_from) if args.resume_from else None
    overrides = dict(_override(a) for a in args.lerobot_arg)

    import torch
    from accelerate import Accelerator

    from dali_stream import StreamLoader
    from dali_stream.meta.catalog import MixtureMeta
    from dali_stream.pairing import dali_present
    from dali_stream.tools.sources import dataset_meta

    torch.manual_seed(args.seed)  # the same initial weights on every rank and run (resume compares equal)
    accelerator = Accelerator(cpu=not torch.cuda.is_available(), mixed_precision=args.mixed_precision)
    rank, world = accelerator.process_index, accelerator.num_processes
    meta = dataset_meta(args.dataset)  # opened once: sizes and windows come from it, and the loader reads through it
    fps, cameras = meta.fps, list(meta.video_keys)
    trainer = None
    if args.policy != "builtin":  # lerobot's policy: its delta indices, the dataset's own image sizes
        from dali_stream.tools.lerobot_policy import LerobotTrainer

        trainer = LerobotTrainer(args.policy, meta, str(accelerator.device),
                                 args.steps or 100_000, **overrides)
        deltas, resize = trainer.delta_timestamps, None
    else:
        state_dim, action_dim = (feature_size(meta, k, args.dataset) for k in ("observation.state", "action"))
        deltas = {"action": [i / fps for i in range(args.chunk)]} if args.chunk > 1 else {}
        # small images for the small policy, where DALI resizes them (not on the CPU install: frames as recorded)
        resize = (48, 64) if dali_present() else None
    source = meta
    if trainer is None and args.chunk > 1 and isinstance(meta, MixtureMeta):  # a mixture: each member's chunk is
        source = per_member_chunks(meta.catalog.mixture, meta, args.chunk)  # --chunk steps at its own fps
    loader = StreamLoader(source, **settings,
                          device=str(accelerator.device),
                          rank=rank, world_size=world, resize=resize, drop_last=True, delta_timestamps=deltas)
    if trainer is not None:
        trainer.build(loader.meta)
        prepared = accelerator.prepare(trainer.policy, trainer.optimizer,
                                       *([trainer.scheduler] if trainer.scheduler is not None else []))
        trainer.policy, trainer.optimizer = prepared[0], prepared[1]
        accelerator.print(f"lerobot {args.policy}: {sum(p.numel() for p in trainer.policy.parameters())} parameters, "
                          f"delta_timestamps: {({k: len(v) for k, v in trainer.delta_timestamps.items()})} steps")
    model: Any = None
    optimizer: Any = None
    if not args.dummy and trainer is None:
        model = Policy.build(len(cameras), state_dim, action_dim * args.chunk, bool(getattr(meta, "depth_keys", [])))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        model, optimizer = accelerator.prepare(model, optimizer)
    step = 0
    if resume is not None and trainer is not None:
        step, state = trainer.load(resume, accelerator)
        loader.load_state_dict(state)
        accelerator.print(f"resumed from step {step}: epoch {state['epoch']}, batch {state['batches_consumed']}")
    elif resume is not None:
        ckpt = torch.load(resume, map_location="cpu", weights_only=False)
        loader.load_state_dict(ckpt["loader"])
        step = ckpt["step"]
        if model is not None and ckpt.get("model") is not None:
            accelerator.unwrap_model(model).load_state_dict(ckpt["model"])
            optimizer.load_state_dict(ckpt["optimizer"])
        accelerator.print(f"resumed from step {step}: epoch {ckpt['loader']['epoch']}, batch "
                          f"{ckpt['loader']['batches_consumed']}")
    log = None
    if args.sample_log:
        Path(args.sample_log).mkdir(parents=True, exist_ok=True)
        log = open(Path(args.sample_log) / f"rank{rank}.jsonl", "a")
    start_epoch = loader.state_dict()["epoch"]
    saved = step  # the step the newest checkpoint holds (a resumed run's own)

    def checkpoint(at: int) -> int:
        """Rank 0 writes the checkpoint of step `at` (lerobot's layout for lerobot's policies); `at`."""
        if args.checkpoint_dir is None:
            return at
        if accelerator.is_main_process and trainer is not None:
            save_lerobot_checkpoint(Path(args.checkpoint_dir), at, trainer, loader.state_dict(), accelerator)
        elif accelerator.is_main_process:
            payload = {"step": at, "loader": loader.state_dict(),
                       "model": accelerator.unwrap_model(model).state_dict() if model is not None else None,
                       "optimizer": optimizer.state_dict() if optimizer is not None else None}
            save_checkpoint(Path(args.checkpoint_dir), at, payload)
        return at

    if args.checkpoint_dir is None:
        accelerator.print("no --checkpoint-dir: this run writes no checkpoints (give one to resume it later)")
    warning = mixed_runs(args.checkpoint_dir, resume)
    if warning is not None:
        accelerator.print(warning)
    if args.steps is not None and step >= args.steps:
        accelerator.print(f"warning: nothing to train: the run resumed is at step {step}, and --steps {args.steps} "
                          f"counts every step of a run, the resumed ones included; give --steps above {step}")
    t0, samples = time.perf_counter(), 0
    with StepBar(accelerator.is_main_process, steps_ahead(loader, args.epochs, args.steps, step)) as bar:
        for _ in range(start_epoch, args.epochs):
            if args.steps is not None and step >= args.steps:
                break
            for batch in loader:
                loss_value = None
                if trainer is not None and not args.dummy:
                    loss_value = trainer.step(batch, accelerator)
                elif model is not None:
                    images = [batch[k] for k in cameras]
                    pred = model(images, batch["observation.state"].flatten(1))
                    loss = torch.nn.functional.mse_loss(pred, batch["action"].flatten(1))
                    loss_value = float(loss.detach())
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
                step += 1
                samples += len(batch["task"])
                bar.step(step, loss_value, samples / (time.perf_counter() - t0))
                if log is not None:
                    log.write(json.dumps({"step": step, "indices": batch["index"].tolist()}) + "\n")
                    log.flush()
                if step % args.log_every == 0:  # every rank reaches it at the same step (equal batch counts)
                    rate = samples / (time.perf_counter() - t0)
                    recent = loader.data_wait()["recent"] or {}
                    mine = torch.tensor([[recent.get("wait_fraction") or 0.0, recent.get("p95_ms") or 0.0]],
                                        device=accelerator.device)
                    worst = accelerator.gather(mine).max(dim=0).values.tolist()  # the rank that waits most
                    print(f"[rank {rank}/{world}] step {step} epoch {loader.state_dict()['epoch']} "
                          f"{'' if loss_value is None else f'loss {loss_value:.4f} '}{rate:.1f} samples/s, "
                          f"data wait {100 * float(mine[0, 0]):.0f}% (p95 {float(mine[0, 1]):.0f} ms), max over ranks {100 * worst[0]:.0f}% (p95 {worst[1]:.0f} ms)", flush=True)
                if step % args.checkpoint_every == 0:
                    saved = checkpoint(step)
                if args.steps is not None and step >= args.steps:
                    break
    if saved != step:  # the run's last step, so that --resume-from goes on from where it ended
        saved = checkpoint(step)
    elapsed = time.perf_counter() - t0
    total = accelerator.reduce(torch.tensor([float(samples)], device=accelerator.device), reduction="sum")
    accelerator.wait_for_everyone()
    accelerator.print(f"done: {step} steps; all {world} ranks together {float(total[0]) / max(elapsed, 1e-9):.1f} "
                      f"samples/s ({int(total[0])} samples in {elapsed:.1f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
