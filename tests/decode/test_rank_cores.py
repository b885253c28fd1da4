"""`decode.node.rank_cores`: the cores a rank may use, read from this process's CPU affinity and the container's
CPU quota (cgroup files), in real processes and real files; what `num_workers` is derived from."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dali_stream.decode.node import rank_cores

NODE = os.cpu_count() or 1
ALLOWED = len(os.sched_getaffinity(0))


def test_a_narrowed_affinity_is_the_ranks_whatever_the_ranks_on_the_node():
    """As SLURM's --cpus-per-task or taskset leave it: the process may run on one core, so the rank has one."""
    if NODE < 2:
        pytest.skip("needs a machine of 2 cores or more")
    code = ("import os; os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); "
            "from dali_stream.decode.node import rank_cores; print(rank_cores(), rank_cores(local_world_size=8))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["1", "1"]


def test_the_whole_node_is_shared_by_its_ranks(tmp_path):
    if ALLOWED < NODE:
        pytest.skip("this process's affinity is narrowed already")
    assert rank_cores(root=str(tmp_path)) == NODE
    assert rank_cores(local_world_size=2, root=str(tmp_path)) == max(1, NODE // 2)
    assert rank_cores(local_world_size=4 * NODE, root=str(tmp_path)) == 1  # never none


@pytest.mark.parametrize("files,quota", [({"cpu.max": "150000 100000\n"}, 1), ({"cpu.max": "max 100000\n"}, None),
                                          ({"cpu/cpu.cfs_quota_us": "100000\n", "cpu/cpu.cfs_period_us": "100000\n"}, 1),
                                          ({"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n"}, None)],
                         ids=["v2-quota", "v2-none", "v1-quota", "v1-none"])
def test_a_containers_cpu_quota_bounds_them(tmp_path, files, quota):
    """A container limited to 1.5 CPUs (cgroup v2 `cpu.max`, or v1's quota and period) gives its rank 1 core
    however many the node shows; no quota leaves the affinity's."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert rank_cores(root=str(tmp_path)) == (min(quota, ALLOWED) if quota else rank_cores(root=str(tmp_path / "x")))
