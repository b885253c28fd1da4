"""Data wait, live, per rank (issue 37): how long the training loop waited for each batch, from asking to getting.
A loop slower than the loader waits ~0 once the loader is ahead; a loop that does nothing but ask waits for
every batch. Fractions, not times, are asserted, with wide margins (a loaded CI machine)."""

from __future__ import annotations

import time

import pytest

from dali_stream import StreamLoader
from dali_stream.wait import DataWait


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


def test_the_figure_rises_when_the_loader_is_slower_than_the_loop(small_dataset):
    settings = dict(batch_size=4, decode="cpu", device="cpu", num_workers=2, image_dtype="uint8")
    with StreamLoader(str(small_dataset), **settings) as loader:
        for n, _ in enumerate(loader):  # a loop that only asks: every batch is waited for
            if n == 12:
                break
        hungry = loader.data_wait()
    with StreamLoader(str(small_dataset), **settings) as loader:
        for n, _ in enumerate(loader):  # a training step much longer than the loader needs per batch
            time.sleep(0.15)
            if n == 12:
                break
        fed = loader.data_wait()
    assert hungry["batches"] == 13 and fed["batches"] == 13
    assert hungry["recent"]["wait_fraction"] > 0.7, hungry
    assert fed["recent"]["wait_fraction"] < 0.3, fed
    assert fed["recent"]["p50_ms"] < hungry["recent"]["p50_ms"]
