"""A real SLURM on localhost (slurmctld + slurmd + munge from Debian's slurm-wlm, started by the test):
slurm/train.sbatch with 2 tasks, slurm/diagnose_nodes.sbatch and slurm/bench_matrix.sh."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "tests" / "support" / "slurm" / "localcluster.sh"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("slurmctld") is None or shutil.which("munged") is None,
    reason="needs root and Debian's slurm-wlm (make test installs it when it runs as root)")


@pytest.fixture(scope="module")
def slurm():
    base = Path(tempfile.mkdtemp(prefix="dali-stream-slurm-", dir="/tmp"))
    base.chmod(0o755)  # munged runs as the munge user and must reach its socket folder
    up = subprocess.run(["bash", str(CLUSTER), "start", str(base / "cluster")], capture_output=True, text=True,
                        timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    env = {**os.environ, "SLURM_CONF": str(base / "cluster" / "slurm.conf"), "DALI_STREAM_REPO": str(REPO),
           "DALI_STREAM_PYTHON": sys.executable, "OMP_NUM_THREADS": "1", "DALI_STREAM_CPU_ONLY": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"):
        env.pop(key, None)
    yield base, env
    subprocess.run(["bash", str(CLUSTER), "stop", str(base / "cluster")], timeout=60)
    shutil.rmtree(base, ignore_errors=True)


def _sbatch(env, cwd, *args):
    return subprocess.run(["sbatch", "--wait", *map(str, args)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=cwd)


def test_train_sbatch_two_tasks(slurm, small_dataset):
    base, env = slurm
    logs = base / "train-log"
    proc = _sbatch(env, base, "-N1", "-n2", "--overcommit", "-o", base / "train.out", REPO / "slurm/train.sbatch",
                   small_dataset, "--dummy", "--epochs", "1", "--batch-size", "2", "--pool", "2",
                   "--sample-log", logs, "--checkpoint-dir", base / "ckpt")
    out = (base / "train.out").read_text()
    assert proc.returncode == 0, proc.stderr + out[-3000:]
    assert "2 tasks on 1 node(s)" in out and "done:" in out
    ranks = [[json.loads(line)["indices"] for line in (logs / f"rank{r}.jsonl").read_text().splitlines()]
             for r in range(2)]
    assert len(ranks[0]) == len(ranks[1]) > 0, "equal steps per rank"
    own = [{i for b in r for i in b} for r in ranks]
    assert own[0].isdisjoint(own[1]), "ranks train on disjoint shares"


def test_diagnose_nodes_sbatch(slurm, small_dataset):
    base, env = slurm
    env = {**env, "DIAGNOSE_OUT": str(base / "diagnose")}
    proc = _sbatch(env, REPO, "-N1", "-o", base / "diagnose.out", REPO / "slurm/diagnose_nodes.sbatch", small_dataset)
    out = (base / "diagnose.out").read_text()
    assert proc.returncode == 0, proc.stderr + out[-3000:]
    (report,) = (base / "diagnose").glob("*.json")
    assert json.loads(report.read_text())["exit_code"] == 0 and "nodes x cameras" in out


def test_bench_matrix_chain(slurm, small_dataset):
    base, env = slurm
    out = base / "bench"
    env = {**env, "BENCH_NO_GPU_REQUEST": "1"}
    proc = subprocess.run(["bash", str(REPO / "slurm/bench_matrix.sh"), "--serial", str(small_dataset), str(out),
                           "--duration-s", "0.5", "--warmup-batches", "1", "--no-baseline", "--no-limit",
                           "--batch-size", "2", "--pool", "2"], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr
    last = proc.stdout.strip().splitlines()[-1].split()[-1]
    wait = subprocess.run(["srun", f"--dependency=afterany:{last}", "-n1", "true"], capture_output=True, text=True,
                          timeout=600, env=env)
    assert wait.returncode == 0, wait.stderr
    results = [json.loads(p.read_text()) for p in out.glob("bench-*.json")]
    assert len(results) == 4 and sum(1 for r in results if r.get("skipped")) == 2
    assert (out / "chart.png").exists()
