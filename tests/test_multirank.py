"""Real processes: torchrun starts ranks on CPU (gloo); the ranks split the epoch and resume from one state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("nproc", [2, 3])
def test_torchrun_ranks_split_the_epoch_and_resume_from_one_checkpoint(small_dataset, tmp_path, nproc):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parent)}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                           str(HERE / "multirank_worker.py"), str(small_dataset), str(tmp_path), "2"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(nproc)]
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
