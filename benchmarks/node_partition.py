"""What partition='node' does to the batches, against partition='rank', from the planner alone (nothing decoded).

    .venv/bin/python benchmarks/node_partition.py [--episodes 1000] [--nodes 4] [--ranks-per-node 2] [--epochs 3]
        [--batch 16] [--pool 16] [--out benchmarks/results/cpu-2core-node-partition/node_partition.json]

Episodes of 40-80 frames (seeded), each rank a pool of `--pool` episodes and batches of `--batch`. For each
partition, over `--epochs` epochs: the episodes each node's ranks read (what its disk tier must hold, as a fraction
of the dataset), distinct episodes in a rank's batch and in the global batch (all ranks' batch i together), and
the episode pairs that ever meet in one rank's batch (what a per-rank statistic such as BatchNorm's sees), as a
fraction of those under partition='rank'. The planner is deterministic: one run is the result.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _common import write_result  # noqa: E402

from dali_stream.plan.epoch import EpochPlan, PlanConfig  # noqa: E402
from dali_stream.plan.world import World  # noqa: E402


def measure(lengths, partition: str, nodes: int, per_node: int, epochs: int, batch: int, pool: int) -> dict:
    cfg = PlanConfig(batch_size=batch, pool_size=pool, seed=0, drop_last=True, partition=partition)
    world_size = nodes * per_node
    read = [set() for _ in range(nodes)]
    pairs: set = set()
    rank_distinct, global_distinct = [], []
    for epoch in range(epochs):
        plans = [EpochPlan(lengths, cfg, World(rank=r, world_size=world_size, local_world_size=per_node), epoch)
                 for r in range(world_size)]
        for i in range(plans[0].num_batches):
            together = []
            for r, plan in enumerate(plans):
                episodes = plan.batch(i).episodes.tolist()
                read[r // per_node].update(episodes)
                distinct = sorted(set(episodes))
                rank_distinct.append(len(distinct))
                pairs.update(itertools.combinations(distinct, 2))
                together += episodes
            global_distinct.append(len(set(together)))
    return {"node_reads_fraction": [round(len(r) / len(lengths), 4) for r in read],
            "distinct_episodes_per_rank_batch": float(np.mean(rank_distinct)),
            "distinct_episodes_per_global_batch": float(np.mean(global_distinct)),
            "episode_pairs_met_in_a_rank_batch": len(pairs)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--ranks-per-node", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--pool", type=int, default=16)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/cpu-2core-node-partition/node_partition.json"))
    a = parser.parse_args()
    lengths = np.random.default_rng(0).integers(40, 81, size=a.episodes)
    got = {p: measure(lengths, p, a.nodes, a.ranks_per_node, a.epochs, a.batch, a.pool) for p in ("rank", "node")}
    got["node"]["pairs_vs_rank"] = round(got["node"]["episode_pairs_met_in_a_rank_batch"]
                                         / got["rank"]["episode_pairs_met_in_a_rank_batch"], 4)
    result = {"settings": vars(a) | {"out": None}, "rank": got["rank"], "node": got["node"]}
    write_result(a.out, result)
    for name in ("rank", "node"):
        print(name, got[name])


if __name__ == "__main__":
    main()
