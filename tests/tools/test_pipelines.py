"""The recipes in pipelines/: importable, right windows and padding, and runnable as scripts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dali_stream.tools.paint import read_ids

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from pipelines import action_chunk, sarm, single_frame  # noqa: E402

FRONT, TOP = "observation.images.front", "observation.images.top"


def test_sarm_window_is_8_steps_1s_apart_clamped_to_the_start(small_dataset):
    loader = sarm.make_loader(str(small_dataset), batch_size=4, episode_pool_size=2, device="cpu",
                              image_dtype="uint8")
    batch = next(iter(loader))
    assert batch[FRONT].shape == (4, 8, 3, 96, 128) and batch["observation.state"].shape == (4, 8, 6)
    for i, (ep, fr) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
        steps = [fr - 30 * (7 - s) for s in range(8)]  # 1 s = 30 frames back per step
        for key in (FRONT, TOP):
            assert [read_ids(f) for f in batch[key][i]] == [(ep, max(0, f)) for f in steps]
            assert batch[f"{key}_is_pad"][i].tolist() == [f < 0 for f in steps]


def test_action_chunk_and_single_frame(small_dataset):
    batch = next(iter(action_chunk.make_loader(str(small_dataset), chunk=5, batch_size=3, device="cpu")))
    assert batch["action"].shape == (3, 5, 6) and batch["action_is_pad"].shape == (3, 5)
    assert batch[FRONT].shape == (3, 3, 96, 128)
    batch = next(iter(single_frame.make_loader(str(small_dataset), batch_size=3, device="cpu")))
    assert batch["action"].shape == (3, 6) and not any(k.endswith("_is_pad") for k in batch)


@pytest.mark.parametrize("script,key,shape,extra", [
    ("single_frame.py", FRONT, [2, 3, 96, 128], []),
    ("sarm.py", TOP, [2, 8, 3, 96, 128], ["--memory-format", "channels_last"]),  # same shapes, HWC memory
    ("action_chunk.py", "action", [2, 16, 6], []),
    ("augment.py", FRONT, [2, 3, 96, 128], []),
])
def test_recipe_runs_as_a_script(small_dataset, script, key, shape, extra):
    proc = subprocess.run([sys.executable, str(REPO / "pipelines" / script), str(small_dataset), "--batches", "3",
                           "--batch-size", "2", "--device", "cpu", *extra], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert summary["batches"] == 3 and summary["samples_per_s"] > 0 and summary["shapes"][key] == shape
    assert summary["routes"] == {FRONT: "torchcodec", TOP: "torchcodec"}


def test_augmentation_in_the_graph_is_deterministic_under_resume(small_dataset):
    """The augment= recipe changes the pixels, differently per sample and epoch, and a resumed run gets exactly
    the uninterrupted run's augmented batches (parameters come from the plan, not DALI's RNG)."""
    import torch

    from dali_stream import StreamLoader
    from pipelines import augment

    args = dict(batch_size=3, episode_pool_size=2, seed=6, device="cpu", image_dtype="uint8",
                delta_timestamps={FRONT: [-1 / 30, 0.0]})
    full = [b for b in augment.make_loader(str(small_dataset), **args)]
    plain = next(iter(StreamLoader(str(small_dataset), **args)))
    assert torch.equal(full[0]["index"], plain["index"])
    assert not torch.equal(full[0][TOP], plain[TOP]) and full[0][TOP].shape == plain[TOP].shape
    first = augment.make_loader(str(small_dataset), **args)
    for i, _ in enumerate(first):
        if i == 2:
            break
    resumed = augment.make_loader(str(small_dataset), **args)
    resumed.load_state_dict(first.state_dict())
    rest = [b for b in resumed]
    assert len(rest) == len(full) - 3
    for a, b in zip(rest, full[3:]):
        for key in (FRONT, TOP):
            assert torch.equal(a[key], b[key]), key
    nxt = next(iter(augment.make_loader(str(small_dataset), **args)))  # epoch 0 again: the same draw
    assert torch.equal(nxt[TOP], full[0][TOP])
