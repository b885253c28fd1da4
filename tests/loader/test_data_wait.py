"""Data wait, live, per rank: how long the training loop waited for each batch, from asking to getting.
A loop slower than the loader waits ~0 once the loader is ahead; a loop that does nothing but ask waits for
every batch. Fractions, not times, are asserted, with wide margins (a loaded CI machine)."""

from __future__ import annotations

import time

import pytest

from dali_stream import StreamLoader
from dali_stream.loader.wait import DataWait


def test_wait_fraction_is_the_waits_share_of_the_steps_wall_time():
    """The bookkeeping on its own: two steps of 0.3 s each, waits of 0.1 and 0.2 s."""
    waits = DataWait(window=10)
    assert waits.stats()["recent"] is None and waits.stats()["wait_fraction"] is None
    waits.got(asked=10.0, now=10.1)  # first batch: 0.1 s wait
    waits.got(asked=10.2, now=10.4)  # the step took 0.1 s, then 0.2 s of waiting
    stats = waits.stats()
    assert stats["batches"] == 2 and stats["wait_s"] == pytest.approx(0.3)
    assert stats["wall_s"] == pytest.approx(0.4) and stats["wait_fraction"] == pytest.approx(0.75)
    assert stats["recent"]["p50_ms"] == pytest.approx(150) and stats["recent"]["max_ms"] == pytest.approx(200)


def _after_first(loader, steps: int, step_s: float) -> tuple[dict, float]:
    """Run `steps` batches after the first with a `step_s` training step; the loader's figures at the end, and the
    share of the wall time after the first batch that was spent waiting (the start-up's wait left out: it is one
    batch built from nothing, long on a loaded machine)."""
    it = iter(loader)
    next(it)
    first = loader.data_wait()
    for _ in range(steps):
        if step_s:
            time.sleep(step_s)
        next(it)
    last = loader.data_wait()
    it.close()
    return last, (last["wait_s"] - first["wait_s"]) / (last["wall_s"] - first["wall_s"])


def test_the_figure_says_who_waits(small_dataset):
    """A loop that only asks waits most of its time; a loop whose steps are long (0.3 s, ~50x what 4 small
    samples take to build) waits a small share once the loader is ahead. Shares, never two timings compared:
    both hold beside a CPU-heavy neighbour on 2 cores."""
    settings = dict(batch_size=4, decode="cpu", device="cpu", num_workers=2, image_dtype="uint8")
    with StreamLoader(str(small_dataset), **settings) as loader:
        hungry, hungry_share = _after_first(loader, 12, 0.0)
    with StreamLoader(str(small_dataset), **settings) as loader:
        fed, fed_share = _after_first(loader, 12, 0.3)
    assert hungry["batches"] == 13 and fed["batches"] == 13
    assert hungry["recent"]["wait_fraction"] > 0.7 and hungry_share > 0.7, hungry
    assert fed_share < 0.2, fed
    assert fed["recent"]["wait_fraction"] < hungry["recent"]["wait_fraction"], (fed, hungry)


def test_the_next_batches_are_handed_to_the_workers_after_the_callers_batch_is_assembled(small_dataset, monkeypatch):
    """Without a graph, batch i is put together for the caller before batches up to i + lookahead are drawn and
    handed to the workers: woken workers would hold the GIL through the hand-out's torch calls (each releases it),
    a switch interval (5 ms) on the caller's clock each time."""
    from dali_stream.loader.deliver import Delivery
    from dali_stream.loader.schedule import Schedule

    events: list[tuple[str, int]] = []
    bring, assemble = Schedule.bring_ahead, Delivery.batch

    def logged_bring(self, index):
        events.append(("bring", index))
        return bring(self, index)

    def logged_batch(self, got, prepared):
        events.append(("assembled", prepared.plan.index))
        return assemble(self, got, prepared)

    monkeypatch.setattr(Schedule, "bring_ahead", logged_bring)
    monkeypatch.setattr(Delivery, "batch", logged_batch)
    with StreamLoader(str(small_dataset), batch_size=4, decode="cpu", device="cpu", num_workers=2,
                      image_dtype="uint8") as loader:
        assert loader.host_batches
        for n, _ in enumerate(loader):
            if n == 5:
                break
    assert events[0] == ("bring", 0)  # the first batch comes into view before anything is built
    for i in range(6):
        assert events.index(("assembled", i)) < events.index(("bring", i), 1), events
