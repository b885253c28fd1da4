"""One schema over a mixture's members: which feature of which member each mixture key is, its dtype and
shape, which members lack it and whose vectors are shorter; and the members' stats merged in those keys.

`merge_features` takes each member's `meta/info.json` features and key map (`mixture.Member.keys`) and returns
a `Field` per mixture key; every disagreement that cannot be bridged is a `ConfigError` naming the key, the
members and their values (a camera in one member and a vector in another, floats against integers, vectors of
different lengths with `vectors="exact"`). Cameras of different sizes are recorded (`Field.sizes`); the loader
refuses them without `resize=`.

`merge_stats` is lerobot's count-weighted merge (`aggregate_stats` of lerobot 0.6.1): means weighted by the
members' counts, variances by the parallel algorithm, min of mins, max of maxes; quantiles (q01, q99, ...) as
the count-weighted mean of the members' quantiles, which is what lerobot does and is approximate (exact
quantiles of a union cannot be had from the parts' quantiles): `APPROXIMATE_STATS` lists them. A padded vector's
statistics are merged element by element over the members that have the element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ConfigError
from .depth import is_depth

FLOAT, INT, BOOL = "float32", "int64", "bool"
TEXT = "text"  # strings and lerobot's language annotations: lists in the batch, one value per sample
TEXT_DTYPES = ("string", "language")
_KINDS = {"float16": FLOAT, "float32": FLOAT, "float64": FLOAT, "int8": INT, "int16": INT, "int32": INT,
          "int64": INT, "uint8": INT, "uint16": INT, "uint32": INT, "uint64": INT, "bool": BOOL,
          **dict.fromkeys(TEXT_DTYPES, TEXT)}
VISUAL = ("video", "image")  # cameras: videos, or images stored in the frame tables (lerobot's `use_videos=False`)
APPROXIMATE_STATS = "quantiles (q01, q10, q50, q90, q99, ...): the count-weighted mean of the members' quantiles"


@dataclass(frozen=True)
class Field:
    """A mixture key: per member, its own key (None: the member lacks it) and shape."""

    key: str
    visual: bool  # a camera (video feature) rather than a table column
    dtype: str  # the batch's dtype for tables (float32, int64, bool); "video" or "image" for cameras; "text"
    shape: tuple[int, ...]  # the mixture's shape per frame (vectors: the longest; cameras: the first member's)
    own: tuple[str | None, ...]  # per member: its feature key, or None
    own_shapes: tuple[tuple[int, ...] | None, ...]  # per member: its feature's shape
    names: Any = None  # lerobot's `names` of the longest member's feature
    depth: bool = False  # a depth camera (`meta.depth`) in every member that has it

    @property
    def missing(self) -> bool:
        """Some member lacks the key: the batch carries `<key>_is_missing`."""
        return any(o is None for o in self.own)

    @property
    def padded(self) -> bool:
        """A vector some member has shorter: the batch carries `<key>_dim_is_pad`."""
        return not self.visual and any(s is not None and s != self.shape for s in self.own_shapes)

    @property
    def sizes(self) -> dict[int, tuple[int, int]]:
        """Cameras: member -> (height, width), for the members that have it."""
        return {m: (s[0], s[1]) for m, s in enumerate(self.own_shapes) if s is not None} if self.visual else {}


def _kind(dtype: str) -> str | None:
    return dtype if dtype in VISUAL else _KINDS.get(dtype)


def merge_features(features: Sequence[Mapping[str, Mapping[str, Any]]], key_maps: Sequence[Mapping[str, str | None]],
                   names: Sequence[str], vectors: str = "pad", camera_shapes: Sequence[Mapping[str, tuple[int, int]]]
                   | None = None) -> dict[str, Field]:
    """The mixture's fields, in the first member's key order, then the others' new keys. `camera_shapes[m]`:
    member m's camera -> (height, width) as the loader reads it (`meta.Camera`), else from `shape`."""
    order: list[str] = []
    own: dict[str, list[str | None]] = {}
    for m, (feats, keys) in enumerate(zip(features, key_maps)):
        for key in feats:
            to = keys.get(key, key)
            if to is None:
                continue
            if to not in own:
                own[to] = [None] * len(features)
                order.append(to)
            own[to][m] = key
    out = {}
    for key in order:
        members = [m for m, o in enumerate(own[key]) if o is not None]
        kinds = {m: _kind(str(features[m][own[key][m]].get("dtype"))) for m in members}  # type: ignore[index]
        def where(m: int) -> str:
            o = own[key][m]
            return f"{names[m]} ({o!r})" if o != key else names[m]
        unknown = [m for m in members if kinds[m] is None]
        if unknown:  # columns lerobot does not batch either
            m = unknown[0]
            raise ConfigError(f"mixture key {key!r}: {where(m)} stores it as dtype "
                              f"{features[m][own[key][m]].get('dtype')!r}, which dali_stream does not batch; leave "  # type: ignore[index]
                              f"it out with keys={{{own[key][m]!r}: None}}")
        distinct = sorted(set(kinds.values()), key=str)
        if len(distinct) > 1:
            said = ", ".join(f"{where(m)}: {kinds[m]}" for m in members)
            raise ConfigError(f"mixture key {key!r} is {' and '.join(str(d) for d in distinct)} in different members "
                              f"({said}); map one of them to another key with Member(keys={{...}}), or leave it out "
                              "with a None")
        visual = distinct[0] in VISUAL
        depth = {m: is_depth(features[m][own[key][m]]) for m in members}  # type: ignore[index]
        if visual and len(set(depth.values())) > 1:
            said = ", ".join(f"{where(m)}: {'depth' if depth[m] else 'RGB'}" for m in members)
            raise ConfigError(f"mixture key {key!r} is a depth camera in some members and an RGB camera in others "
                              f"({said}); map one of them to another key with Member(keys={{...}}), or leave it out "
                              "with a None")
        shapes: list[tuple[int, ...] | None] = [None] * len(features)
        for m in members:
            o = own[key][m]
            if visual and camera_shapes is not None and o in camera_shapes[m]:
                shapes[m] = tuple(camera_shapes[m][o])  # type: ignore[index]
            else:
                shapes[m] = tuple(int(x) for x in (features[m][o].get("shape") or ()))  # type: ignore[index]
        present = [shapes[m] for m in members]
        if visual:
            shape = present[0]
        else:
            shape = present[0]
            if len(set(present)) > 1 and distinct[0] != TEXT:
                said = ", ".join(f"{where(m)}: {list(shapes[m] or ())}" for m in members)
                flat = all(s is not None and len(s) == 1 for s in present)
                if not flat:
                    raise ConfigError(f"mixture key {key!r} has shapes {said}; only 1-D vectors of different lengths "
                                      "can be padded: map them to different keys with Member(keys={...})")
                if vectors == "exact":
                    raise ConfigError(f"mixture key {key!r} has vectors of different lengths ({said}) and the "
                                      "mixture asks for exact shapes (vectors='exact'); use vectors='pad' to pad them "
                                      f"with zeros to the longest (the batch then carries {key + '_dim_is_pad'!r}), "
                                      "or map them to different keys with Member(keys={...})")
                shape = max(present, key=lambda s: s[0])  # type: ignore[index]
        longest = next(m for m in members if shapes[m] == shape)
        dtype = str(kinds[members[0]])
        out[key] = Field(key, visual, dtype, tuple(shape or ()), tuple(own[key]), tuple(shapes),
                         features[longest][own[key][longest]].get("names"),  # type: ignore[index]
                         visual and depth[members[0]])
    return out


def merge_stats(member_stats: Sequence[Mapping[str, Mapping[str, np.ndarray]]],
                fields: Mapping[str, Field]) -> dict[str, dict[str, np.ndarray]]:
    """The members' `meta.stats` merged per mixture key (see the module doc); a member without stats for a key
    is left out of that key's merge."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key, f in fields.items():
        parts = [(member_stats[m][o], f.own_shapes[m]) for m, o in enumerate(f.own)
                 if o is not None and o in member_stats[m]]
        if not parts:
            continue
        out[key] = _merge_feature([p for p, _ in parts], [s for _, s in parts], f)
    return out


def _pad(value: Any, length: int | None) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if length is None or arr.ndim != 1 or arr.shape[0] >= length:
        return arr
    return np.concatenate([arr, np.full(length - arr.shape[0], np.nan)])


def _merge_feature(stats: list[Mapping[str, Any]], shapes: list[tuple[int, ...] | None], f: Field) -> dict[str, np.ndarray]:
    length = f.shape[0] if f.padded else None
    needed = ("mean", "std", "count")
    if not all(all(k in s for k in needed) for s in stats):
        return {k: np.asarray(v) for k, v in stats[0].items()} if len(stats) == 1 else {}
    counts = np.array([float(np.asarray(s["count"]).reshape(-1)[0]) for s in stats])
    means = np.stack([_pad(s["mean"], length) for s in stats])
    have = ~np.isnan(means)  # a padded vector's elements a member lacks
    w = np.where(have, counts.reshape((-1,) + (1,) * (means.ndim - 1)), 0.0)
    total = w.sum(0)
    safe = np.where(total > 0, total, 1.0)
    mean = np.nansum(np.where(have, means, 0.0) * w, 0) / safe
    var = np.stack([_pad(np.asarray(s["std"], dtype=np.float64) ** 2, length) for s in stats])
    variance = np.nansum(np.where(have, var + (means - mean) ** 2, 0.0) * w, 0) / safe
    out = {"mean": mean, "std": np.sqrt(variance), "count": np.array([int(counts.sum())])}
    for stat, pick in (("min", np.nanmin), ("max", np.nanmax)):
        if all(stat in s for s in stats):
            out[stat] = pick(np.stack([_pad(s[stat], length) for s in stats]), 0)
    quantiles = [k for k in stats[0] if k.startswith("q") and k[1:].isdigit() and all(k in s for s in stats)]
    for q in quantiles:  # lerobot 0.6.1's count-weighted mean: approximate
        values = np.stack([_pad(s[q], length) for s in stats])
        out[q] = np.nansum(np.where(have, values, 0.0) * w, 0) / safe
    return out
