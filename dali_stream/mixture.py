"""A dataset mixture as the user describes it: members (a dataset each, with its weight, key map and own
settings), the epoch's size and how vectors of different lengths meet. No IO here: `catalog.Catalog` opens the
members when a `StreamLoader` is built.

    from dali_stream import Member, Mixture, StreamLoader

    mix = Mixture([
        Member("lerobot/aloha_sim_insertion_human", weight=2.0, name="aloha"),
        Member("/data/lab_arm", keys={"observation.images.top": "observation.images.front"}),
        "s3://bucket/droid_subset",                 # a plain source: weight 1, its own key names
    ], samples_per_epoch=200_000)
    loader = StreamLoader(mix, batch_size=32, resize=(224, 224))

Weights: member m's share of an epoch's samples is proportional to its frames times its weight (weight 1
everywhere: every frame once, as if the members were one dataset; `plan.mixture_epoch`). Shares (`Member(share=0.5)`, given
to every member): the parts of the epoch's samples themselves, whatever the members' frames. `samples_per_epoch`: the epoch's
samples over all ranks (default: the members' frames).
"""

from __future__ import annotations

import dataclasses
import math
import posixpath
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, Mapping, Optional, Sequence, Tuple, Union, get_args

from .config_groups import frozen_reduce
from .config_values import as_float, as_int, episode_indices, is_int, offsets
from .errors import ConfigError

Vectors = Literal["pad", "exact"]
VECTORS: tuple[str, ...] = get_args(Vectors)
# Columns every LeRobot v3 frame row carries; a member cannot rename them (lerobot's DEFAULT_FEATURES).
INDEX_KEYS = ("timestamp", "frame_index", "episode_index", "index", "task_index")


@dataclass(frozen=True)
class Member:
    """One dataset of a mixture.

    `source`: a dataset root, fsspec URL or Hub id, as `StreamLoader` takes. `weight`: its share of the epoch
    relative to its frames (2.0: each of its frames drawn twice as often as another member's). `keys`: its
    feature keys renamed onto the mixture's (`{"observation.images.top": "observation.images.front"}`; a key
    mapped to None is left out); unnamed keys keep their names. `name`: how batches and tools name it (default:
    the source's last path part). The rest are the `StreamLoader` settings that belong to one dataset:
    `episodes`/`max_episodes` (its split), `delta_timestamps` (its own offsets in seconds for some keys, the
    same number per key as the loader's: e.g. a 10 fps member's action chunk), `tolerance_s`, `revision`,
    `data_files_root`, `storage_options` (merged over the loader's). `share`: the member's share of the epoch's
    samples itself, whatever its frames (0.5: half of every epoch; given to every member or to none, in place of
    `weight`; divided by the members' sum, so 5/3/2 is 0.5/0.3/0.2)."""

    __reduce__ = frozen_reduce

    source: str
    weight: float = 1.0
    keys: Mapping[str, Optional[str]] = field(default_factory=dict)
    name: Optional[str] = None
    episodes: Optional[Tuple[int, ...]] = None
    max_episodes: Optional[int] = None
    delta_timestamps: Optional[Mapping[str, Tuple[float, ...]]] = None
    tolerance_s: Optional[float] = None
    revision: Optional[str] = None
    data_files_root: Optional[str] = None
    storage_options: Optional[Mapping[str, Any]] = None
    share: Optional[float] = None

    def __post_init__(self) -> None:
        fix = object.__setattr__
        if not isinstance(self.source, str) or not self.source:
            raise ConfigError(f"a mixture member's source must be a dataset root, URL or Hub id (a string). Found: "
                              f"{self.source!r}")
        fix(self, "source", str(self.source))
        w = as_float(self.weight)  # numbers as Python's, numpy's too (config_values), as the loader's settings
        if not isinstance(w, float) or not math.isfinite(w) or w <= 0:
            raise ConfigError(f"member {self.source!r}: `weight` must be a finite number > 0. Found: {self.weight!r}")
        fix(self, "weight", w)
        s = as_float(self.share)
        if s is not None:
            if not isinstance(s, float) or not math.isfinite(s) or s <= 0:
                raise ConfigError(f"member {self.source!r}: `share` must be a finite number > 0 (its part of every "
                                  f"epoch's samples, e.g. 0.5). Found: {self.share!r}")
            if self.weight != 1.0:
                raise ConfigError(f"member {self.source!r}: give `share` (its part of the epoch's samples) or "
                                  f"`weight` (relative to its frames), not both. Found: share={s!r}, "
                                  f"weight={self.weight!r}")
            fix(self, "share", s)
        if not isinstance(self.keys, Mapping):
            raise ConfigError(f"member {self.source!r}: `keys` must map its feature keys to the mixture's (e.g. "
                              f"{{'observation.images.top': 'observation.images.front'}}). Found: {self.keys!r}")
        for own, to in self.keys.items():
            if not isinstance(own, str) or not (to is None or isinstance(to, str) and to):
                raise ConfigError(f"member {self.source!r}: keys[{own!r}] = {to!r}; map a feature key to a key "
                                  "name of the mixture, or to None to leave it out")
            if own in INDEX_KEYS or to in INDEX_KEYS and to != own:
                raise ConfigError(f"member {self.source!r}: keys maps {own!r} to {to!r}; the index columns "
                                  f"{list(INDEX_KEYS)} are every dataset's own and keep their names")
        targets = [t for t in self.keys.values() if t is not None]
        doubled = sorted({t for t in targets if targets.count(t) > 1})
        if doubled:
            raise ConfigError(f"member {self.source!r}: keys maps several of its features onto {doubled}; each "
                              "mixture key takes at most one feature of a member")
        fix(self, "keys", MappingProxyType(dict(self.keys)))
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise ConfigError(f"member {self.source!r}: `name` must be a non-empty string. Found: {self.name!r}")
        if self.episodes is not None:
            fix(self, "episodes", episode_indices(self.episodes, f"member {self.source!r}: "))
        m = as_int(self.max_episodes)
        if m is not None and (not is_int(m) or m < 1):
            raise ConfigError(f"member {self.source!r}: `max_episodes` must be a positive integer. Found: "
                              f"{self.max_episodes!r}")
        fix(self, "max_episodes", m)
        t = as_float(self.tolerance_s)
        if t is not None and (not isinstance(t, float) or not math.isfinite(t) or t < 0):
            raise ConfigError(f"member {self.source!r}: `tolerance_s` must be a number >= 0. Found: {self.tolerance_s!r}")
        fix(self, "tolerance_s", t)
        if self.delta_timestamps is not None:
            if not isinstance(self.delta_timestamps, Mapping):
                raise ConfigError(f"member {self.source!r}: `delta_timestamps` must map feature keys to offsets "
                                  f"in seconds. Found: {self.delta_timestamps!r}")
            fix(self, "delta_timestamps", MappingProxyType({str(k): offsets(k, v)
                                                            for k, v in self.delta_timestamps.items()}))
        if self.storage_options is not None:
            if not isinstance(self.storage_options, Mapping):
                raise ConfigError(f"member {self.source!r}: `storage_options` must be a dict of fsspec options. "
                                  f"Found: {self.storage_options!r}")
            fix(self, "storage_options", MappingProxyType(dict(self.storage_options)))

    def mixture_key(self, own: str) -> Optional[str]:
        """The mixture's name for this member's feature `own` (None: left out)."""
        return self.keys.get(own, own)

    def default_name(self) -> str:
        return default_name(self.source)


@dataclass(frozen=True)
class Mixture:
    """Several LeRobot datasets as one source for `StreamLoader` (see the module doc).

    `members`: `Member`s, or plain sources (weight 1). `samples_per_epoch`: the epoch's samples over all ranks
    (default: the members' frames). `vectors`: "pad" (a feature whose vectors differ in length between members,
    6- and 7-dof state, comes padded with zeros to the longest, with `<key>_dim_is_pad`) or "exact" (a
    `ConfigError` names the members and lengths instead). Member names must be unique: duplicates of a default
    name get "#2", "#3", ... appended."""

    members: Tuple[Member, ...]
    samples_per_epoch: Optional[int] = None
    vectors: Vectors = "pad"

    def __post_init__(self) -> None:
        members = self.members
        if isinstance(members, (str, bytes, Member)) or not isinstance(members, Sequence):
            raise ConfigError(f"`members` must be a list of Member (or dataset sources). Found: {members!r}")
        out = [m if isinstance(m, Member) else Member(m) if isinstance(m, str) else _bad_member(m) for m in members]
        if not out:
            raise ConfigError("a Mixture needs at least one member")
        named = [str(m.name) for m in out if m.name is not None]
        dup = sorted({n for n in named if named.count(n) > 1})
        if dup:
            raise ConfigError(f"member names {dup} are given twice; each member's name must be unique")
        taken = set(named)
        final = []
        for m in out:
            if m.name is None:
                base = name = m.default_name()
                k = 1
                while name in taken:
                    k += 1
                    name = f"{base}#{k}"
                taken.add(name)
                m = dataclasses.replace(m, name=name)
            final.append(m)
        object.__setattr__(self, "members", tuple(final))
        shared = [m.share is not None for m in final]
        if any(shared) and not all(shared):
            raise ConfigError(f"members {[m.name for m in final if m.share is not None]} give a `share` and "
                              f"{[m.name for m in final if m.share is None]} do not; give every member a share "
                              "(parts of the epoch's samples) or none (weights relative to frames)")
        spe = as_int(self.samples_per_epoch)
        if spe is not None and (not is_int(spe) or spe < 1):
            raise ConfigError(f"`samples_per_epoch` must be a positive integer (samples over all ranks). Found: "
                              f"{self.samples_per_epoch!r}")
        object.__setattr__(self, "samples_per_epoch", spe)
        if self.vectors not in VECTORS:
            raise ConfigError(f"`vectors` must be one of {VECTORS}. Found: {self.vectors!r}")

    @property
    def names(self) -> list[str]:
        return [m.name for m in self.members]  # type: ignore[misc]

    def describe(self) -> dict[str, Any]:
        """JSON-ready: the members (source, name, weight, keys) and the epoch's settings."""
        return {"members": [{"name": m.name, "source": m.source, "weight": m.weight, "keys": dict(m.keys),
                             **({} if m.share is None else {"share": m.share})} for m in self.members],
                "samples_per_epoch": self.samples_per_epoch, "vectors": self.vectors}


def default_name(source: str) -> str:
    """A dataset's name from its source: the last path part ("lerobot/pusht" and "/data/pusht/" give "pusht")."""
    return posixpath.basename(source.rstrip("/")) or source


def _bad_member(value: Any) -> Member:
    raise ConfigError(f"a mixture member must be a Member or a dataset source (a string). Found: {value!r}")


Source = Union[str, Mixture, Sequence[Union[str, Member]]]


def as_mixture(source: Any) -> Mixture | None:
    """`source` as a Mixture when it is one (or a list of members / sources); None for a single dataset."""
    if isinstance(source, Mixture):
        return source
    if isinstance(source, Member):
        return Mixture((source,))
    if isinstance(source, (list, tuple)):
        return Mixture(tuple(source))
    return None


MIXTURE_FILE_KEYS = ("members", "samples_per_epoch", "vectors")
MEMBER_FILE_KEYS = tuple(f.name for f in dataclasses.fields(Member))


def load_mixture(path: str) -> Mixture:
    """A Mixture from a JSON file (what the command line takes in place of a dataset):

        {"members": [{"source": "/data/arm6", "weight": 2, "name": "arm6"},
                     {"source": "lerobot/pusht", "keys": {"observation.image": "observation.images.front"}},
                     "s3://bucket/droid"],
         "samples_per_epoch": 100000}

    A member is a source string or an object of `Member`'s fields. A relative local path is taken relative to
    the file's folder when it exists there (else as given: a Hub id such as "lerobot/pusht")."""
    import json
    import os

    try:
        with open(path) as fh:
            raw = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"mixture file {path}: {exc}; write a JSON object with a 'members' list") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("members"), list):
        raise ConfigError(f"mixture file {path} must hold a JSON object with a 'members' list (sources, or objects "
                          f"with a 'source' and optional {list(MEMBER_FILE_KEYS[1:])}). Found: {str(raw)[:200]}")
    unknown = sorted(set(raw) - set(MIXTURE_FILE_KEYS))
    if unknown:
        raise ConfigError(f"mixture file {path} has unknown entries {unknown}; it takes {list(MIXTURE_FILE_KEYS)}")
    here = os.path.dirname(os.path.abspath(path))

    def located(source: Any) -> Any:
        if isinstance(source, str) and "://" not in source and not os.path.isabs(source):
            beside = os.path.join(here, source)
            if os.path.exists(beside):
                return beside
        return source

    members = []
    for entry in raw["members"]:
        if isinstance(entry, str):
            members.append(Member(located(entry)))
            continue
        if not isinstance(entry, dict) or "source" not in entry:
            raise ConfigError(f"mixture file {path}: a member must be a source string or an object with a 'source'. "
                              f"Found: {entry!r}")
        bad = sorted(set(entry) - set(MEMBER_FILE_KEYS))
        if bad:
            raise ConfigError(f"mixture file {path}: member {entry['source']!r} has unknown entries {bad}; a member "
                              f"takes {list(MEMBER_FILE_KEYS)}")
        members.append(Member(**{**entry, "source": located(entry["source"])}))
    return Mixture(tuple(members), raw.get("samples_per_epoch"), raw.get("vectors", "pad"))


def is_mixture_file(source: Any) -> bool:
    """Whether the command line's DATASET argument names a mixture file (a .json file)."""
    return isinstance(source, str) and source.endswith(".json")
