"""Where a loader is in its run, and the resume state that says it: the epoch, the batches the caller received,
the runs of this epoch on other world sizes, and whether the next `for` continues or starts the next epoch. Plans
are a pure function of (seed, epoch, world, position): this rank's plan of an epoch is recomputed, never saved."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import ConfigError, StateError
from ..plan.epoch import EpochPlan, resume_plan
from ..plan.selection import digest as selection_digest
from ..plan.state import CONFIG_KEYS, FIX, STATE_VERSION, parse_state
from ..plan.world import World

if TYPE_CHECKING:
    import numpy as np

    from ..config import LoaderConfig
    from ..meta.catalog import Catalog
    from ..plan.epoch import PlanConfig
    from ..plan.mixture_epoch import Mix
    from .assemble import Stages

UNEVEN_SHARES = 0.8  # warn when the smallest rank share is below this fraction of the largest


@dataclass(frozen=True)
class Planning:
    """The parts of a loader's stages (`loader.assemble.Stages`) its plans and resume state are made of: the
    settings, the world, the episodes (`catalog`), the planner's settings and a mixture's (`mix`), and `drop_last`
    as resolved."""

    config: LoaderConfig
    world: World
    catalog: Catalog
    plan_config: PlanConfig
    mix: Mix | None
    drop_last: bool

    @classmethod
    def of(cls, st: Stages) -> "Planning":
        return cls(st.config, st.world, st.catalog, st.plan_config, st.mix, st.resolved.drop_last)

    @property
    def plan_lengths(self) -> np.ndarray:
        """The lengths the planner sees (`Stages.plan_lengths`)."""
        return self.catalog.lengths


class Position:
    """The run's position over `planning` (`Planning`): `epoch`, `consumed` (batches the caller received of
    it), `chain` ((world_size, batches[, ranks_per_node]) runs of this epoch on other worlds), `continues` (the next
    `for` goes on at (epoch, consumed) instead of a new epoch)."""

    def __init__(self, planning: Planning) -> None:
        self.st = planning
        self.epoch = 0
        self.consumed = 0
        self.continues = True
        self.chain: list[tuple[int, ...]] = []
        self._plans: dict[tuple, EpochPlan] = {}

    def plan(self, epoch: int) -> EpochPlan:
        """This rank's plan of `epoch`; for an epoch resumed on another world size, the rest of it."""
        chain = tuple(self.chain) if epoch == self.epoch else ()
        plan = self._plans.get((epoch, chain))
        if plan is None:
            st = self.st
            plan = resume_plan(st.plan_lengths, st.plan_config, st.world, epoch, list(chain), st.mix)
            self._plans = {(epoch, chain): plan}
        return plan

    def start_epoch(self, epoch: int) -> None:
        self.epoch, self.consumed, self.chain = epoch, 0, []

    def next_run(self) -> tuple[int, int]:
        """(epoch, first batch) a new `for` runs: the one left off, else the next epoch."""
        if not self.continues:
            self.start_epoch(self.epoch + 1)
        if self.consumed > 0 and self.consumed >= self.plan(self.epoch).num_batches:
            self.start_epoch(self.epoch + 1)
        self.continues = False
        return self.epoch, self.consumed

    def ended(self, epoch: int) -> None:
        """Epoch `epoch` was run to its end: the next `for` runs the next one."""
        self.start_epoch(epoch + 1)
        self.continues = True

    def next_len(self) -> int:
        """Batches in the epoch the next `for` runs, on this rank."""
        return self.plan(self.epoch if self.continues else self.epoch + 1).num_batches

    def check_first_epoch(self) -> None:
        """Epoch 0 against the world, at construction rather than at batch 0: no batch at all is an error, uneven
        rank shares a warning (said once, by rank 0)."""
        cfg, world = self.st.config, self.st.world
        plan = self.plan(0)
        sizes = plan.share_sizes
        if plan.num_batches == 0:  # lerobot's DataLoader would have yielded the partial batch
            where = (f"the smallest rank share holds {min(sizes)} frames ({len(sizes)} ranks)" if len(sizes) > 1
                     else f"the dataset's selected episodes hold {sum(sizes)} frames")
            raise ConfigError(f"an epoch would yield no batch: batch_size={cfg.batch_size} but {where}, and "
                              f"drop_last=True ({'the default when shuffling' if cfg.drop_last is None else 'given'}) "
                              "drops a partial batch; use a smaller batch_size, or drop_last=False (the epoch then "
                              "yields the partial batch, as a DataLoader's default does)")
        if len(sizes) > 1 and min(sizes) < UNEVEN_SHARES * max(sizes) and world.rank == 0:
            dropped = ("frames of the larger shares are dropped" if self.st.drop_last
                       else "the smaller shares are padded with repeats")
            warnings.warn(
                f"ranks get uneven shares of epoch 0: {min(sizes)} to {max(sizes)} frames over {len(sizes)} ranks "
                f"(episodes are whole per rank); every rank yields {plan.num_batches} batches, so {dropped}; use "
                "fewer ranks or a dataset with more, shorter episodes", stacklevel=3)

    def state(self) -> dict[str, Any]:
        """`StreamLoader.state_dict()`."""
        st, cfg = self.st, self.st.config
        epoch, consumed, chain = self.epoch, self.consumed, self.chain
        if consumed > 0 and consumed >= self.plan(epoch).num_batches:  # taken at an epoch's end
            epoch, consumed, chain = epoch + 1, 0, []
        by_node = st.plan_config.partition == "node"  # its plans depend on the nodes: recorded (else as before)
        return {"version": STATE_VERSION, "seed": cfg.seed, "epoch": epoch, "batches_consumed": consumed,
                "batch_size": cfg.batch_size, "episode_pool_size": cfg.episode_pool_size,
                "drop_last": st.drop_last, "world_size": st.world.world_size,
                **({"ranks_per_node": st.world.local_world_size} if by_node else {}),
                "elastic": [list(seg) for seg in chain],
                "delta_indices": self._saved_deltas(),
                "dataset": st.catalog.fingerprint(),
                "selection": {**self._selected(), "shuffle": cfg.shuffle,
                              "drop_n_first_frames": cfg.drop_n_first_frames,
                              "drop_n_last_frames": cfg.drop_n_last_frames,
                              **({"partition": "node"} if by_node else {})}}

    def _selected(self) -> dict[str, Any]:
        """The selected episodes a state records (their digest and count): one dataset's, or each member's."""
        catalog = self.st.catalog
        chosen = [{"episodes_sha256": selection_digest(m.episodes), "episodes": len(m.episodes)}
                  for m in catalog.members]
        return {"members": chosen} if catalog.is_mixture else chosen[0]

    def _saved_deltas(self) -> dict[str, list[int]]:
        """The windows' frame offsets a state records: per key, or for a mixture per "member/key"."""
        st = self.st
        if st.mix is None:
            return {k: list(v) for k, v in st.plan_config.delta_indices.items()}
        return {f"{m.name}/{k}": list(v) for m, deltas in zip(st.catalog.members, st.mix.delta_indices)
                for k, v in deltas.items() if v is not None}

    def load(self, state: Mapping[str, Any]) -> None:
        """`StreamLoader.load_state_dict()`, once the loader has checked that no epoch is being iterated."""
        st = self.st
        saved = parse_state(state)
        mine = self.state()
        for key in CONFIG_KEYS:
            if getattr(saved, key) != mine[key]:
                raise StateError(
                    f"state was saved with {key}={getattr(saved, key)!r} but this loader has {key}={mine[key]!r}; "
                    "resume needs the same dataset, seed, batch size, pool size and windows: construct "
                    "the loader with the saved values"
                )
        epoch, consumed, chain = saved.epoch, saved.batches_consumed, list(saved.elastic)
        saved_world, per_node = saved.world_size, saved.ranks_per_node
        by_node = st.plan_config.partition == "node"
        same_world = saved_world == st.world.world_size and (not by_node or per_node == st.world.local_world_size)
        # Every rank of a world has the same batch count, so this rank's plan validates a same-world state
        # and is kept for the iteration; an elastic state is checked against a rank of the saved world.
        world = st.world if same_world else World(rank=0, world_size=saved_world, local_world_size=per_node)
        plan = resume_plan(st.plan_lengths, st.plan_config, world, epoch, chain, st.mix)
        if consumed > plan.num_batches:
            raise StateError(f"state position epoch={epoch}, batches_consumed={consumed} is outside the epoch "
                             f"({plan.num_batches} batches on {saved_world} ranks): the state was edited or comes "
                             f"from another run; {FIX}, or start afresh without load_state_dict")
        if not same_world and consumed > 0:
            segment = (saved_world, consumed, per_node) if by_node else (saved_world, consumed)
            chain, consumed = chain + [segment], 0  # elastic: the rest of the epoch on this world
        self.epoch, self.consumed, self.chain, self.continues = epoch, consumed, chain, True
        self._plans = {(epoch, tuple(chain)): plan} if same_world else {}
