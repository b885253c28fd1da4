"""Who am I in the job: rank, world size, local rank, node and the ranks on this node, resolved from arguments or
the environment.

Precedence: explicit arguments, then torchrun/accelerate variables (RANK, WORLD_SIZE, LOCAL_RANK, GROUP_RANK,
LOCAL_WORLD_SIZE), then SLURM (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID, and this node's entry of
SLURM_TASKS_PER_NODE), then a single process. Ranks per node (`local_world_size`) is what a node's ranks share:
its memory, its disk, its cores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from ..errors import ConfigError


@dataclass(frozen=True)
class World:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    node_rank: int = 0
    local_world_size: int = 1  # ranks on this node, as the launcher says (1 where none does)

    def __post_init__(self) -> None:
        if self.world_size < 1:
            raise ConfigError(f"`world_size` must be at least 1. Found: {self.world_size}")
        if self.local_world_size < 1:
            raise ConfigError(f"ranks on this node (LOCAL_WORLD_SIZE, SLURM_TASKS_PER_NODE) must be at least 1. Found: "
                              f"{self.local_world_size}; check the launcher's variables")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"`rank` must be in [0, world_size={self.world_size}). Found: {self.rank}; "
                "check RANK/WORLD_SIZE (or SLURM_PROCID/SLURM_NTASKS) or the arguments you passed"
            )
        if self.local_rank < 0 or self.node_rank < 0:
            raise ConfigError(
                f"`local_rank` and `node_rank` must be >= 0. Found: {self.local_rank}, {self.node_rank}"
            )


def _env_int(env: Mapping[str, str], name: str) -> int | None:
    raw = env.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise ConfigError(f"environment variable {name}={raw!r} is not an integer; unset it or fix the launcher")


def resolve_world(
    rank: int | None = None,
    world_size: int | None = None,
    local_rank: int | None = None,
    node_rank: int | None = None,
    local_world_size: int | None = None,
    *,
    env: Mapping[str, str],
) -> World:
    """Build a `World` from explicit values first, then torchrun/accelerate, then SLURM variables of `env`
    (the caller passes `os.environ`: the planner reads no process state itself)."""
    layers = (
        ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK"),
        ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID"),
    )
    found: dict[str, int | None] = {"rank": rank, "world_size": world_size, "local_rank": local_rank,
                                    "node_rank": node_rank}
    for names in layers:
        values = dict(zip(("rank", "world_size", "local_rank", "node_rank"), (_env_int(env, n) for n in names)))
        if values["rank"] is None and values["world_size"] is None:
            continue
        for key, value in values.items():
            if found[key] is None:
                found[key] = value
        break
    world_size_v = found["world_size"] if found["world_size"] is not None else 1
    rank_v = found["rank"] if found["rank"] is not None else 0
    node_v = found["node_rank"] if found["node_rank"] is not None else 0
    local = local_world_size if local_world_size is not None else _env_int(env, "LOCAL_WORLD_SIZE")
    if local is None:
        local = slurm_tasks_on(env.get("SLURM_TASKS_PER_NODE"), _env_int(env, "SLURM_NODEID") or 0)
    return World(
        rank=rank_v,
        world_size=world_size_v,
        local_rank=found["local_rank"] if found["local_rank"] is not None else 0,
        node_rank=node_v,
        local_world_size=local or 1,
    )


def slurm_tasks_on(tasks_per_node: str | None, node: int) -> int | None:
    """Node `node`'s tasks from SLURM_TASKS_PER_NODE ("8(x4)", "2(x3),1": counts, each repeated per node); None
    where it is unset or unreadable."""
    if not tasks_per_node:
        return None
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        count, _, times = part.partition("(x")
        if not count.strip().isdigit() or (times and not times.rstrip(")").isdigit()):
            return None
        counts += [int(count)] * (int(times.rstrip(")")) if times else 1)
    return counts[node] if node < len(counts) else None
