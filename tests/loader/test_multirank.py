"""Real processes: torchrun starts ranks on CPU (gloo); the ranks split the epoch and resume from one state."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _torchrun(nproc: int, out: Path, *args) -> list[dict]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(HERE.parents[1])}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    out.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
                           str(HERE.parent / "support" / "multirank_worker.py"), *map(str, args[:1]), str(out), *map(str, args[1:])],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


def test_torchrun_ranks_split_the_epoch_and_resume_from_one_checkpoint(small_dataset, tmp_path):
    """Two ranks over an odd number of frames (the shares differ by one; the shorter is padded; three ranks: the
    mixture's and the elastic test): disjoint shares covering the epoch, and each rank resumes exactly from rank 0's
    state."""
    nproc = 2
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
    assert total % nproc and set().union(*own) == set(range(total)), "together the ranks cover the epoch"
    for r in ranks:
        assert r["states_equal"], "every rank's state_dict is the same checkpoint"
        assert r["head"] + r["tail"] == r["epoch0"], f"rank {r['rank']} resumed exactly"


def test_torchrun_elastic_resume_keeps_exactly_once(small_dataset, tmp_path):
    """Stopped on 2 ranks, resumed on 3 and stopped again, finished on 2: the world grows and shrinks mid-epoch,
    and every frame of the epoch is drawn exactly once over the three runs."""
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    head = _torchrun(2, tmp_path / "two", small_dataset, 2, "save", first)
    middle = _torchrun(3, tmp_path / "three", small_dataset, 1, "load", first, second)
    tail = _torchrun(2, tmp_path / "two-again", small_dataset, 0, "load", second)
    seen_before = [i for r in head for b in r["head"] for i in b]
    assert len(seen_before) == len(set(seen_before)) == 2 * 2 * 3
    seen_middle = [i for r in middle for b in r["tail"] for i in b]
    assert len(seen_middle) == len(set(seen_middle)) == 3 * 1 * 3 and not set(seen_middle) & set(seen_before)
    assert len({r["len"] for r in middle}) == len({r["len"] for r in tail}) == 1, "equal batch counts per world"
    own_after = [i for r in tail for i in dict.fromkeys(i for b in r["tail"] for i in b)]
    assert len(own_after) == len(set(own_after)) and not set(own_after) & (set(seen_before) | set(seen_middle))
    total = json.loads((Path(small_dataset) / "meta/info.json").read_text())["total_frames"]
    assert sorted(set(own_after) | set(seen_middle) | set(seen_before)) == list(range(total)), \
        "no frame lost or repeated"


def _mixture_file(embodiments, tmp_path, weights) -> tuple[Path, dict[int, int]]:
    """arm6 (30 fps, 6-dof, two cameras) and arm7 (10 fps, 7-dof, its top camera as front) as a mixture file;
    the frames of each member by dataset_index."""
    path = tmp_path / "mixture.json"
    path.write_text(json.dumps({"members": [
        {"source": str(embodiments["arm6"]), "name": "arm6", "weight": weights[0]},
        {"source": str(embodiments["arm7"]), "name": "arm7", "weight": weights[1],
         "keys": {"observation.images.top": "observation.images.front"}}]}))
    frames = {m: json.loads((Path(embodiments[n]) / "meta/info.json").read_text())["total_frames"]
              for m, n in enumerate(("arm6", "arm7"))}
    return path, frames


def test_torchrun_ranks_split_a_mixture_disjointly(embodiments, tmp_path):
    """Weight 1, three ranks (two: the weighted mixture's test): the ranks' own samples are disjoint and together
    every frame of both members; resume exact."""
    nproc = 3
    mix, frames = _mixture_file(embodiments, tmp_path, [1.0, 1.0])
    ranks = _torchrun(nproc, tmp_path / "out", mix, 2)
    assert len({r["len"] for r in ranks}) == 1
    own = [set(dict.fromkeys(i for b in r["epoch0"] for i in b)) for r in ranks]
    assert sum(len(s) for s in own) == len(set().union(*own)), "ranks are disjoint"
    assert set().union(*own) == {m * 1_000_000 + i for m, n in frames.items() for i in range(n)}
    for r in ranks:
        assert r["states_equal"] and r["head"] + r["tail"] == r["epoch0"], f"rank {r['rank']} resumed exactly"


def test_torchrun_weighted_mixture_elastic_resume(embodiments, tmp_path):
    """arm7 weighted 3x (its frames repeat): stop on 2 ranks, finish on 3: nothing lost, no draw made twice."""
    from collections import Counter

    mix, _ = _mixture_file(embodiments, tmp_path, [1.0, 3.0])
    state = tmp_path / "state.json"
    head = _torchrun(2, tmp_path / "before", mix, 2, "save", state)
    tail = _torchrun(3, tmp_path / "after", mix, 0, "load", state)
    full = _torchrun(1, tmp_path / "full", mix, 1)[0]["epoch0"]
    drawn = Counter(i for r in head for b in r["head"] for i in b)
    for r in tail:
        samples = [i for b in r["tail"] for i in b]
        drawn.update(samples[:r["own"]])  # past its own draws a rank pads with repeats
    assert drawn == Counter(i for b in full for i in b)
