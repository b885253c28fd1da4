from __future__ import annotations

import pytest

from dali_stream.errors import ConfigError
from dali_stream.plan.world import resolve_world


def test_explicit_beats_torchrun_beats_slurm():
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_NTASKS": "8"}
    assert resolve_world(env=env).rank == 3
    assert resolve_world(env=env).world_size == 4
    assert resolve_world(env=env).local_rank == 1
    assert resolve_world(rank=2, env=env).rank == 2


def test_slurm_when_no_torchrun():
    w = resolve_world(env={"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2"})
    assert (w.rank, w.world_size, w.local_rank, w.node_rank) == (5, 8, 1, 2)


def test_default_is_single_process():
    w = resolve_world(env={})
    assert (w.rank, w.world_size) == (0, 1)


def test_bad_values_name_the_variable():
    with pytest.raises(ConfigError, match="RANK='x'"):
        resolve_world(env={"RANK": "x", "WORLD_SIZE": "2"})
    with pytest.raises(ConfigError, match=r"`rank` must be in \[0, world_size=2\). Found: 2"):
        resolve_world(env={"RANK": "2", "WORLD_SIZE": "2"})


def test_ranks_per_node_from_torchrun_slurm_or_the_argument():
    """`local_world_size`: what a node's ranks share (memory, disk, cores), read by everything that needs it."""
    assert resolve_world(env={"RANK": "3", "WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}).local_world_size == 4
    slurm = {"SLURM_PROCID": "5", "SLURM_NTASKS": "7", "SLURM_LOCALID": "0", "SLURM_NODEID": "2",
             "SLURM_TASKS_PER_NODE": "3(x2),1"}
    assert resolve_world(env=slurm).local_world_size == 1  # node 2 of "3,3,1"
    assert resolve_world(env={**slurm, "SLURM_NODEID": "1"}).local_world_size == 3
    assert resolve_world(local_world_size=2, env=slurm).local_world_size == 2
    assert resolve_world(env={}).local_world_size == 1
    assert resolve_world(env={"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_TASKS_PER_NODE": "garbled"}
                         ).local_world_size == 1
    with pytest.raises(ConfigError, match="LOCAL_WORLD_SIZE"):
        resolve_world(env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "x"})
