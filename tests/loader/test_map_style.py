"""Map-style access at a training loop's pace: `loader.dataset.__getitems__(indices)` (what torch's DataLoader asks
its dataset for a batch) builds the samples together, on the second loader's fetched episodes and kept decoders,
each sample as `loader.dataset[i]` gives it alone."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dali_stream import StreamLoader
from dali_stream.augment import random_resized_crop_and_jitter
from tests.decode.test_frame_cache import assert_same

WINDOWS = {"action": [-1 / 30, 0.0, 1 / 30], "observation.images.front": [-2 / 30, 0.0]}


def _jitter(frames):
    """A transform drawing from torch's global RNG, as torchvision's v2 transforms do."""
    return (frames + torch.rand(frames.shape[:-2]).unsqueeze(-1).unsqueeze(-1)).clamp(0, 1)


@pytest.mark.parametrize("setup", [
    dict(delta_timestamps=WINDOWS, image_transforms=_jitter),  # host frames, windows, transforms seeded per sample
    dict(decode="dali-cpu", resize=(40, 48), augment=random_resized_crop_and_jitter),  # the DALI graph, its hook
], ids=["host-windows-transforms", "graph-augment"])
def test_samples_asked_together_are_the_samples_asked_alone(small_dataset, setup):
    """Samples asked together (more than one build's worth, repeats, episodes' edges, out of order) equal each one
    asked alone by a loader of its own: every key and value, random numbers included (they follow the sample, not
    the samples beside it)."""
    loader = StreamLoader(str(small_dataset), batch_size=4, device="cpu", seed=3, **setup)
    n = len(loader.dataset)
    asked = [5, n - 1, 0, 5, 17, 3, n // 2, 1, 2, 9, n - 2, 40]
    together = loader.dataset.__getitems__(asked)
    alone = StreamLoader(str(small_dataset), batch_size=4, device="cpu", seed=3, **setup)
    assert [int(s["index"]) for s in together] == asked
    assert_same(together, [alone.dataset[i] for i in asked])
    assert loader.dataset.stats()["builds"] == 2  # 12 samples: two builds of at most 8
    assert loader.dataset.__getitems__([]) == []
    loader.close()
    alone.close()


def test_a_dataloaders_batch_is_one_build_of_one_stream_a_camera(small_dataset):
    """torch's DataLoader around `loader.dataset` (batch 8, shuffled): every frame once, each batch one build of
    the second loader, its episodes fetched once (kept in its store), each camera's samples of a batch joined into
    one stream (one decoder opened per camera and batch, not one per sample)."""
    loader = StreamLoader(str(small_dataset), batch_size=4, device="cpu", decode="cpu")
    wrapped = torch.utils.data.DataLoader(loader.dataset, batch_size=8, shuffle=True,
                                          generator=torch.Generator().manual_seed(0))
    seen = torch.cat([b["index"] for b in wrapped])
    assert sorted(seen.tolist()) == list(range(len(loader.dataset)))
    stats = loader.dataset.stats()
    assert stats["builds"] == len(wrapped)
    assert stats["decoders"]["opened"] <= len(wrapped) * len(loader.meta.video_keys), stats["decoders"]
    assert stats["fetch"]["episodes"] == loader.num_episodes, stats["fetch"]
    loader.close()


def test_picked_plans_draw_the_samples_asked():
    """The planner's side (pure): sample i is the i-th frame of the selected episodes, unselected ones skipped;
    batches of at most batch_size in the order asked, each admitting and retiring its own episodes."""
    from dali_stream.plan.epoch import EpochPlan, PlanConfig
    from dali_stream.plan.picked import PickedPlan
    from dali_stream.plan.world import World

    lengths = np.array([3, 0, 2, 4])
    plan = EpochPlan(lengths, PlanConfig(batch_size=2, pool_size=None, delta_indices={"a": (-1, 0, 1)}), World(), 0)
    picked = PickedPlan(plan, [8, 0, 3, 4, 5], 2)
    assert picked.num_batches == 3
    first, second, last = (picked.batch(i) for i in range(3))
    assert first.episodes.tolist() == [3, 0] and first.frames.tolist() == [3, 0]
    assert second.episodes.tolist() == [2, 2] and second.frames.tolist() == [0, 1]
    assert last.episodes.tolist() == [3] and last.frames.tolist() == [0] and last.samples.tolist() == [5]
    assert first.admitted == first.retired == (3, 0) and second.admitted == (2,)
    assert first.windows["a"].is_pad.tolist() == [[False, False, True], [True, False, False]]
    with pytest.raises(IndexError):
        picked.batch(3)


@pytest.mark.parametrize("kind", ["dataset", "mixture"])
def test_a_dataloader_with_spawned_workers_gives_the_same_samples(small_dataset, embodiments, kind):
    """torch's DataLoader with spawned workers (macOS's default; "forkserver", Linux's from Python 3.14, pickles the
    dataset the same way): the samples and their settings pickle (a mixture's members too), each worker opens its own
    loader from them, and the batches equal those built in this process, random transforms included."""
    import pickle

    from dali_stream import LoaderConfig, Member, Mixture

    if kind == "dataset":
        source, setup = str(small_dataset), dict(delta_timestamps=WINDOWS, image_transforms=_jitter)
    else:
        source = Mixture([Member(str(embodiments["arm6"]), name="arm6"),
                          Member(str(embodiments["arm7"]), name="arm7",
                                 keys={"observation.images.top": "observation.images.front"})])
        setup = {}
    loader = StreamLoader(source, batch_size=4, device="cpu", seed=3, **setup)
    assert pickle.loads(pickle.dumps(loader.config)) == loader.config
    assert isinstance(pickle.loads(pickle.dumps(LoaderConfig(delta_timestamps=WINDOWS))), LoaderConfig)
    some = torch.utils.data.Subset(loader.dataset, list(range(0, len(loader.dataset), 3))[:24])
    here = list(torch.utils.data.DataLoader(some, batch_size=8, num_workers=0))
    spawned = list(torch.utils.data.DataLoader(some, batch_size=8, num_workers=2, multiprocessing_context="spawn"))
    assert len(here) == len(spawned) == 3
    assert_same(spawned, here)
    loader.close()
