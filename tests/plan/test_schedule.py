"""The run-ahead of an epoch (`loader.schedule`) draws each batch's plan once: the prefetcher's admissions, the
cutting ahead, the build and the prefetcher's retirements all read the same drawn plan."""

from __future__ import annotations

from collections import Counter

import pytest

from dali_stream import StreamLoader
from dali_stream.plan.epoch import EpochPlan


@pytest.mark.parametrize("graph, pool", [(False, 4), (True, 4), (False, "all")])
def test_each_batch_plan_is_drawn_once(small_dataset, monkeypatch, graph, pool):
    drawn: Counter = Counter()
    draw = EpochPlan.batch

    def counted(self, index):
        drawn[(self.epoch, index)] += 1
        return draw(self, index)

    monkeypatch.setattr(EpochPlan, "batch", counted)
    # decode="cpu": every camera on host frames, no DALI graph; "dali-cpu" decoded per sample: the VP9 camera through
    # DALI's graph
    with StreamLoader(str(small_dataset), batch_size=3, device="cpu", num_workers=2, episode_pool_size=pool,
                      decode="dali-cpu" if graph else "cpu", delta_timestamps={"action": [0.0, 1 / 30]},
                      episode_frames_bytes=0 if graph else None) as loader:
        assert loader.host_batches is not graph
        for epoch in range(2):
            batches = sum(1 for _ in loader)
            assert batches == len(loader) > 3
            assert {i for e, i in drawn if e == epoch} == set(range(batches))
    assert drawn and set(drawn.values()) == {1}, sorted(k for k, n in drawn.items() if n > 1)


def test_plans_are_released_once_built(small_dataset):
    """Only the batches in flight keep their plans: at the end of an epoch none is held."""
    with StreamLoader(str(small_dataset), batch_size=3, device="cpu", num_workers=2, decode="cpu") as loader:
        it = iter(loader)
        next(it)
        schedule = it.gi_frame.f_locals["producer"]
        ahead = len(schedule.plans)
        assert 0 < ahead <= schedule.prefetcher.ahead + 1
        for _ in it:
            pass
        assert len(schedule.plans) == 0 and schedule.plans.draws == len(loader)
