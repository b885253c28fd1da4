"""One rank of the multi-rank tests (started by torchrun from tests/loader/test_multirank.py; not a test itself).

    multirank_worker.py DATASET OUT STOP             # full epoch, then stop after STOP batches + resume
    multirank_worker.py DATASET OUT STOP save STATE  # stop after STOP batches, rank 0 writes the state
    multirank_worker.py DATASET OUT 0 load STATE     # load STATE (any world size) and finish the epoch
    multirank_worker.py DATASET OUT STOP load STATE NEXT  # load STATE, stop after STOP batches, rank 0 writes NEXT

Each rank writes what it saw to OUT/rank<r>.json: each sample's `index`, or for a mixture (DATASET a mixture
file, `dali_stream.mixture.load_mixture`) dataset_index * 1_000_000 + index.
"""

import json
import sys

import torch.distributed as dist

from dali_stream import StreamLoader
from dali_stream.mixture import is_mixture_file, load_mixture

ARGS = dict(batch_size=3, episode_pool_size=2, seed=5, device="cpu", num_workers=1, drop_last=False)


def _indices(loader, stop=None):
    out = []
    for b in loader:
        out.append((b["index"] + 1_000_000 * b["dataset_index"] if "dataset_index" in b else b["index"]).tolist())
        if stop is not None and len(out) == stop:
            break
    return out


def main(dataset: str, out: str, stop: int, mode: str = "", state_path: str = "", next_path: str = "") -> None:
    dist.init_process_group("gloo")
    dataset = load_mixture(dataset) if is_mixture_file(dataset) else dataset
    rank, world = dist.get_rank(), dist.get_world_size()
    report = {"rank": rank, "world_size": world}
    if mode == "save":
        loader = StreamLoader(dataset, **ARGS)
        report["head"] = _indices(loader, stop)
        if rank == 0:
            with open(state_path, "w") as fh:
                json.dump(loader.state_dict(), fh)
    elif mode == "load":
        loader = StreamLoader(dataset, **ARGS)
        with open(state_path) as fh:
            loader.load_state_dict(json.load(fh))
        report["len"] = len(loader)
        report["own"] = loader.epoch_plan(loader.state_dict()["epoch"]).num_frames  # its own draws; then padding
        report["tail"] = _indices(loader, stop or None)
        if next_path and rank == 0:
            with open(next_path, "w") as fh:
                json.dump(loader.state_dict(), fh)
    else:
        full = StreamLoader(dataset, **ARGS)
        report["epoch0"] = _indices(full)
        report["len"] = len(full)
        first = StreamLoader(dataset, **ARGS)
        report["head"] = _indices(first, stop)
        states = [None] * world
        dist.all_gather_object(states, first.state_dict())
        second = StreamLoader(dataset, **ARGS)
        second.load_state_dict(json.loads(json.dumps(states[0])))  # rank 0's checkpoint, on every rank
        report["tail"] = _indices(second)
        report["states_equal"] = all(s == states[0] for s in states)
    dist.barrier()
    with open(f"{out}/rank{rank}.json", "w") as fh:
        json.dump(report, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), *sys.argv[4:])
