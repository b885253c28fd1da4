"""The resume state: what `StreamLoader.state_dict()` writes, and the checks `load_state_dict` runs on it.

A state is a small JSON-serialisable dict. `parse_state` checks every entry's presence, type and range and
returns a `SavedState`, or raises a `StateError` naming the entry, the value and the fix: a state must
never load partly or be read as something else (2.5 batches, a missing epoch).

`dataset` is the dataset's fingerprint (`meta.DatasetMeta.fingerprint`): what the plans depend on. Plans
are drawn from the number, order and lengths of the episodes; the fingerprint holds those (as a digest)
plus fps and the camera keys, and no video is read to make it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from ..errors import StateError

# 2: the dataset fingerprint holds a digest of the episodes' indices and lengths; 3: plans drawn by lanes
# (plan.passes.Lanes, computed per batch), so a position of an earlier version's plans names other batches
STATE_VERSION = 3
FIX = "pass the dict StreamLoader.state_dict() returned, unchanged (json.load of the saved file gives it back)"
CONFIG_KEYS = ("seed", "batch_size", "episode_pool_size", "drop_last", "delta_indices", "dataset", "selection")


@dataclass(frozen=True)
class SavedState:
    seed: int
    epoch: int
    batches_consumed: int
    batch_size: int
    episode_pool_size: int | str  # or "all": a global shuffle
    drop_last: bool
    world_size: int
    elastic: tuple[tuple[int, ...], ...]  # (world_size, batches[, ranks_per_node]) segments
    delta_indices: dict[str, list[int]]
    dataset: dict[str, Any]
    selection: dict[str, Any]  # episodes subset digest, shuffle, dropped first/last frames (and partition="node")
    ranks_per_node: int = 1  # the saving world's, where its plans depended on it (partition="node")


def _int(state: Mapping, key: str, low: int) -> int:
    value = state[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise StateError(f"state[{key!r}] must be an integer >= {low}. Found: {value!r}; {FIX}")
    return value


def parse_state(state: Any) -> SavedState:
    if not isinstance(state, Mapping):
        raise StateError(f"a state must be the dict StreamLoader.state_dict() returned. Found: {type(state).__name__}")
    version = state.get("version")
    if version != STATE_VERSION:
        why = (" (saved by dali_stream 0.1, whose dataset fingerprint cannot tell datasets with equal totals apart)"
               if version == 1 else " (saved before plans were drawn by lanes: its position would name other "
               "batches)" if version == 2 else "")
        raise StateError(f"state version {version!r} is not {STATE_VERSION}{why}; pass a dict saved by "
                         "StreamLoader.state_dict() of this dali_stream version, or start the run afresh")
    missing = [k for k in ("seed", "epoch", "batches_consumed", "batch_size", "episode_pool_size", "drop_last",
                           "world_size", "delta_indices", "dataset", "selection") if k not in state]
    if missing:
        raise StateError(f"state has no {missing} entries; {FIX}")
    if not isinstance(state["drop_last"], bool):
        raise StateError(f"state['drop_last'] must be true or false. Found: {state['drop_last']!r}; {FIX}")
    deltas = state["delta_indices"]
    if not isinstance(deltas, Mapping) or not all(
            isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v)
            for v in deltas.values()):
        raise StateError(f"state['delta_indices'] must map keys to lists of integer frame offsets. Found: "
                         f"{deltas!r}; {FIX}")
    if not isinstance(state["selection"], Mapping):
        raise StateError(f"state['selection'] must be a dict (episodes, shuffle, trimming). Found: "
                         f"{state['selection']!r}; {FIX}")
    if not isinstance(state["dataset"], Mapping):
        raise StateError(f"state['dataset'] must be the dataset's fingerprint (a dict). Found: "
                         f"{state['dataset']!r}; {FIX}")
    elastic = state.get("elastic", [])
    if not isinstance(elastic, list) or not all(
            isinstance(seg, (list, tuple)) and len(seg) in (2, 3)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in seg)
            and seg[0] >= 1 and seg[1] >= 0 and (len(seg) == 2 or seg[2] >= 1) for seg in elastic):
        raise StateError(f"state['elastic'] must be a list of [world_size, batches] pairs (or [world_size, batches, "
                         f"ranks_per_node]). Found: {elastic!r}; {FIX}")
    return SavedState(seed=_int(state, "seed", 0), epoch=_int(state, "epoch", 0),
                      batches_consumed=_int(state, "batches_consumed", 0), batch_size=_int(state, "batch_size", 1),
                      episode_pool_size=(state["episode_pool_size"] if state["episode_pool_size"] == "all"
                                         else _int(state, "episode_pool_size", 1)), drop_last=state["drop_last"],
                      world_size=_int(state, "world_size", 1), elastic=tuple(tuple(int(v) for v in seg)
                                                                             for seg in elastic),
                      delta_indices=dict(deltas), dataset=dict(state["dataset"]),
                      selection=dict(state["selection"]),
                      ranks_per_node=_int(state, "ranks_per_node", 1) if "ranks_per_node" in state else 1)
