"""One rank of the multi-rank test (started by torchrun from tests/test_multirank.py; not a test itself).

Each rank streams an epoch uninterrupted, then again with a stop after `stop` batches and a resume from
rank 0's state (one checkpoint file serves all ranks), and writes what it saw to OUT/rank<r>.json.
"""

import json
import sys

import torch.distributed as dist

from dali_stream import StreamLoader


def main(dataset: str, out: str, stop: int) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    args = dict(batch_size=3, episode_pool_size=2, seed=5, device="cpu", num_workers=1, drop_last=False)

    full = StreamLoader(dataset, **args)
    epoch0 = [b["index"].tolist() for b in full]

    first = StreamLoader(dataset, **args)
    head = []
    for b in first:
        head.append(b["index"].tolist())
        if len(head) == stop:
            break
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, first.state_dict())
    second = StreamLoader(dataset, **args)
    second.load_state_dict(json.loads(json.dumps(states[0])))  # rank 0's checkpoint, on every rank
    tail = [b["index"].tolist() for b in second]
    dist.barrier()
    with open(f"{out}/rank{rank}.json", "w") as fh:
        json.dump({"rank": rank, "world_size": dist.get_world_size(), "epoch0": epoch0, "head": head, "tail": tail,
                   "states_equal": all(s == states[0] for s in states), "len": len(full)}, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
