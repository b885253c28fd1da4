"""The batches, bit for bit, of a handful of configurations, against digests recorded before the loader's code was
moved (tests/support/golden/batches.json): a refactor that changes what reaches training fails here, key by key.

Configurations: an episode pool, a global shuffle, windows of frames and actions, a mixture, a resume in the middle
of an epoch, and two ranks of one world. Each batch is written as one digest per key (dtype, shape and bytes;
`task` as its strings). The datasets come from the sample writer with fixed seeds; the digests therefore also pin
the writer's encoders and this machine's decoders (FFmpeg through torchcodec and PyAV):
after an intended change to either, re-record with

    DALI_STREAM_RECORD_GOLDEN=1 .venv/bin/python -m pytest tests/loader/test_golden.py

and say in the commit why the batches changed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

from dali_stream import StreamLoader
from dali_stream.mixture import Member, Mixture

GOLDEN = Path(__file__).resolve().parents[1] / "support" / "golden" / "batches.json"
RECORD = os.environ.get("DALI_STREAM_RECORD_GOLDEN") == "1"
FRONT, TOP, WRIST = "observation.images.front", "observation.images.top", "observation.images.wrist"
BASE = dict(batch_size=3, seed=5, device="cpu", num_workers=2, drop_last=False)
WINDOWS = {"action": [0.0, 1 / 30, 2 / 30], FRONT: [-1 / 30, 0.0]}
BATCHES = 5  # per configuration: enough to cross episodes and files, few enough to stay quick


def digest(batch) -> dict[str, str]:
    """Key -> sha256 of its dtype, shape and bytes (`task`: its strings)."""
    out = {}
    for key in sorted(batch):
        value = batch[key]
        h = hashlib.sha256()
        if isinstance(value, (list, tuple)):
            h.update(json.dumps([str(v) for v in value]).encode())
        else:
            array = value.contiguous().numpy() if hasattr(value, "numpy") else np.ascontiguousarray(value)
            h.update(f"{array.dtype}|{array.shape}|".encode())
            h.update(array.tobytes())
        out[key] = h.hexdigest()[:24]
    return out


def first(loader, n: int = BATCHES) -> list[dict[str, str]]:
    out = []
    for batch in loader:
        out.append(digest(batch))
        if len(out) == n:
            break
    return out


def _pool(ds) -> list:
    with StreamLoader(str(ds["small"]), episode_pool_size=4, **BASE) as loader:
        return first(loader)


def _global(ds) -> list:
    with StreamLoader(str(ds["small"]), episode_pool_size="all", **BASE) as loader:
        return first(loader)


def _windows(ds) -> list:
    with StreamLoader(str(ds["small"]), episode_pool_size=4, delta_timestamps=WINDOWS, image_dtype="uint8",
                      **BASE) as loader:
        return first(loader)


def _mixture(ds) -> list:
    mix = Mixture((Member(str(ds["arm6"]), name="arm6", weight=2.0),
                   Member(str(ds["arm7"]), name="arm7", keys={TOP: FRONT})))
    windows = {"action": [0.0, 0.1, 0.2], FRONT: [-0.1, 0.0]}  # whole frames at 30 and at 10 fps
    with StreamLoader(mix, episode_pool_size=3, delta_timestamps=windows, **BASE) as loader:
        return first(loader)


def _resume(ds) -> list:
    """Three batches, the state, then a new loader from that state: its next two batches, then two of the next
    epoch (iterating again after a partial pass starts the next epoch)."""
    args = dict(episode_pool_size=4, delta_timestamps=WINDOWS, **BASE)
    with StreamLoader(str(ds["small"]), **args) as loader:
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
    with StreamLoader(str(ds["small"]), **args) as loader:
        loader.load_state_dict(state)
        out = first(loader, 2)
        return out + first(loader, 2)


def _two_ranks(ds) -> list:
    out = []
    for rank in (0, 1):
        with StreamLoader(str(ds["small"]), episode_pool_size=4, rank=rank, world_size=2, **BASE) as loader:
            out += first(loader, 3)
    return out


CONFIGS = {"pool": _pool, "global": _global, "windows": _windows, "mixture": _mixture, "resume": _resume,
           "two_ranks": _two_ranks}


@pytest.fixture(scope="module")
def datasets(small_dataset, embodiments):
    return {"small": small_dataset, **embodiments}


@pytest.fixture(scope="module")
def golden():
    if RECORD:
        recorded: dict = {}
        yield recorded
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(recorded, indent=1, sort_keys=True) + "\n")
        return
    if not GOLDEN.exists():
        pytest.fail(f"{GOLDEN} is missing: record it (module doc)")
    yield json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", list(CONFIGS))
def test_batches_are_the_recorded_ones(name, datasets, golden):
    got = CONFIGS[name](datasets)
    assert len(got) >= 4
    if RECORD:
        golden[name] = got
        return
    want = golden[name]
    assert len(got) == len(want), f"{name}: {len(got)} batches where {len(want)} were recorded"
    for i, (g, w) in enumerate(zip(got, want)):
        assert set(g) == set(w), f"{name} batch {i}: keys {sorted(set(g) ^ set(w))} differ from the recorded"
        changed = sorted(k for k in w if g[k] != w[k])
        assert not changed, f"{name} batch {i}: {changed} differ from the recorded batches"
