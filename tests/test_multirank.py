"""Real processes: torchrun starts ranks on CPU (gloo); the ranks split the epoch and resume from one state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _torchrun(nproc: int, out: Path, *args) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                           str(HERE / "multirank_worker.py"), *map(str, args[:1]), str(out), *map(str, args[1:])],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.mark.parametrize("nproc", [2, 3])
def test_torchrun_ranks_split_the_epoch_and_resume_from_one_checkpoint(small_dataset, tmp_path, nproc):
    ranks = _torchrun(nproc, tmp_path, small_dataset, 2)
    assert {r["world_size"] for r in ranks} == {nproc}
    assert len({r["len"] for r in ranks}) == 1 and len({len(r["epoch0"]) for r in ranks}) == 1, "equal batch counts"
    own = []
    for r in ranks:
        flat = [i for b in r["epoch0"] for i in b]
        seen = list(dict.fromkeys(flat))  # a rank's own frames first; padding repeats them
        own.append(set(seen))
        assert set(flat) == set(seen)
    assert sum(len(s) for s in own) == len(set().union(*own)), "ranks are disjoint"
    total = json.loads((Path(small_dataset) / "meta/info.json").read_text())["total_frames"]
    assert set().union(*own) == set(range(total)), "together the ranks cover the epoch"
    for r in ranks:
        assert r["states_equal"], "every rank's state_dict is the same checkpoint"
        assert r["head"] + r["tail"] == r["epoch0"], f"rank {r['rank']} resumed exactly"


@pytest.mark.parametrize("before,after", [(2, 3), (3, 2)])
def test_torchrun_elastic_resume_keeps_exactly_once(small_dataset, tmp_path, before, after):
    state = tmp_path / "state.json"
    head = _torchrun(before, tmp_path / "before", small_dataset, 2, "save", state)
    tail = _torchrun(after, tmp_path / "after", small_dataset, 0, "load", state)
    seen_before = [i for r in head for b in r["head"] for i in b]
    assert len(seen_before) == len(set(seen_before)) == before * 2 * 3
    assert len({r["len"] for r in tail}) == 1, "equal batch counts on the new world size"
    own_after = [i for r in tail for i in dict.fromkeys(i for b in r["tail"] for i in b)]
    assert len(own_after) == len(set(own_after)) and not set(own_after) & set(seen_before)
    total = json.loads((Path(small_dataset) / "meta/info.json").read_text())["total_frames"]
    assert sorted(set(own_after) | set(seen_before)) == list(range(total)), "no frame lost or repeated"
