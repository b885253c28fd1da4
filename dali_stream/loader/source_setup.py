"""The loader's set-up that depends on what it reads: one dataset or a mixture (`catalog.Catalog`).

`open_source` opens the source into a catalog and the `loader.meta` users see; `windows` turns
`delta_timestamps` (seconds) into each member's frame offsets at its own fps; `planner_mix` the planner's view
of a mixture (`plan.mixture_epoch.Mix`);
`table_kinds` the batch's dtype and dimensions per table key; `check_camera_sizes` refuses cameras of
different sizes under one key without `resize=`/`crop=`. For a single dataset each does what the loader did
before mixtures existed.
"""

from __future__ import annotations

import difflib
import os
import warnings
from typing import Any, Callable, Mapping

import numpy as np

from ..config import LoaderConfig
from ..errors import ConfigError
from ..meta.catalog import Catalog, MixtureMeta
from ..meta.dataset import DatasetMeta
from ..mixture import as_mixture
from ..plan.epoch import delta_indices, frame_counts
from ..plan.mixture_epoch import Mix, member_mass
from ..plan.selection import select
from ..plan.world import resolve_world
from ..source.storage import RemoteOptions
from .resolve_fetch import remote_concurrency

PER_MEMBER = ("episodes", "max_episodes", "revision", "data_files_root")  # settings a mixture takes per member


# settings that open a dataset: `open_meta`'s, not the loader's, for an opened one
OPENING = ("revision", "data_files_root", "storage_options", "remote_max_retries", "remote_timeout_s",
           "remote_deadline_s", "remote_concurrency", "disk_cache_dir", "disk_cache_bytes")


def _selected(meta: DatasetMeta, cfg: LoaderConfig) -> list[int] | None:
    """The episodes `episodes` and `episode_filter` select (None: every one)."""
    wanted = None if cfg.episodes is None else list(cfg.episodes)
    if cfg.episode_filter is None:
        return wanted
    kept = []
    for row in meta.episode_rows():
        try:
            keep = cfg.episode_filter(row)
        except Exception as exc:
            raise ConfigError(f"episode_filter raised {type(exc).__name__}: {exc} on episode {row['episode_index']} "
                              f"of {meta.source!r}; an episode's row has the keys {sorted(row)}") from exc
        if keep:
            kept.append(int(row["episode_index"]))
    if wanted is not None:
        kept = sorted(set(kept) & {int(e) for e in wanted})
    if not kept:
        raise ConfigError(f"episode_filter keeps no episode of {meta.source!r}"
                          f"{' among `episodes`' if wanted is not None else ''} ({meta.num_episodes} episodes); "
                          "loosen the predicate")
    return kept


def _per_member_only(cfg: LoaderConfig) -> None:
    """A mixture refuses the settings it takes per member (`PER_MEMBER`) given to the loader."""
    if cfg.episode_filter is not None:
        raise ConfigError("episode_filter applies to one dataset; a mixture's members take their episodes one by one: "
                          "Member(source, episodes=[...])")
    given = [name for name in PER_MEMBER if getattr(cfg, name) is not None]
    if given:
        raise ConfigError(f"{given} apply to one dataset; a mixture takes them per member: "
                          f"Member(source, {given[0]}=...)")


def remote_options(cfg: LoaderConfig) -> RemoteOptions:
    """The settings that say how remote files are opened and read, as one value (`source.storage.RemoteOptions`);
    this rank's requests in flight as `Resolved.remote_concurrency` has them (`loader.resolve_fetch`), worked out
    here by the same resolver since the source opens before the routes `resolve` needs are chosen."""
    concurrency, _ = remote_concurrency(cfg, resolve_world(env=os.environ).local_world_size)
    return RemoteOptions(dict(cfg.storage_options or {}), cfg.remote_max_retries, cfg.remote_timeout_s,
                         cfg.remote_deadline_s, cfg.disk_cache_dir, cfg.disk_cache_bytes, concurrency)


def open_meta(source: Any, cfg: LoaderConfig) -> Any:
    """`dali_stream.open_meta`: a source's metadata as `loader.meta` will be, before any loader (a DatasetMeta, or
    a MixtureMeta for a Mixture or a list of sources/members)."""
    mixture = as_mixture(source)
    if mixture is None:
        return DatasetMeta.open(source, cfg.data_files_root, remote=remote_options(cfg), revision=cfg.revision)
    _per_member_only(cfg)
    catalog = Catalog.open(mixture, select, remote_options(cfg))
    return MixtureMeta(catalog, cfg.crop or cfg.resize)


def open_source(source: Any, cfg: LoaderConfig) -> tuple[Catalog, Any]:
    """(catalog, loader.meta): a DatasetMeta for one dataset, a MixtureMeta for a Mixture (or a list of
    sources/members); `source` may be what `open_meta` returned, which is then not opened again."""
    if isinstance(source, (DatasetMeta, MixtureMeta)):
        defaults = LoaderConfig()
        given = [name for name in OPENING if getattr(cfg, name) != getattr(defaults, name)]
        if given:
            raise ConfigError(f"{given} open a dataset: give them to dali_stream.open_meta(source, ...), which "
                              f"opened {source.source if isinstance(source, DatasetMeta) else 'this mixture'!r}; "
                              "the loader reads through what it opened")
        if isinstance(source, MixtureMeta):
            _per_member_only(cfg)  # open_meta checked it for a source it opens
        meta = source
    else:
        meta = open_meta(source, cfg)
    for opened in (meta.members if isinstance(meta, MixtureMeta) else [meta]):
        opened.depth_output_unit = cfg.depth_output_unit  # its depth cameras' stats follow, as lerobot's dataset does
    if isinstance(meta, DatasetMeta):
        _known_keys(cfg.delta_timestamps, meta.features, f"features of {source!r}")
        lengths, episodes = select(meta.episodes["episode_index"], meta.lengths, _selected(meta, cfg),
                                   cfg.max_episodes)
        catalog = Catalog.single(meta, lengths, episodes)
        _not_text(cfg.delta_timestamps, catalog)
        return catalog, meta
    catalog = meta.catalog
    _known_keys(cfg.delta_timestamps, catalog.fields, "keys of the mixture")
    _not_text(cfg.delta_timestamps, catalog)
    return catalog, MixtureMeta(catalog, cfg.crop or cfg.resize)


def _not_text(deltas: Mapping[str, Any], catalog: Catalog) -> None:
    """A text key (strings, lerobot's language annotations) is one value a sample: no window of them."""
    text = sorted(set(deltas) & set(catalog.text_keys))
    if text:
        raise ConfigError(f"delta_timestamps asks windows of {text}, which are text (a string or lerobot's language "
                          "annotations: one value a sample, the sample's frame's); leave them out of delta_timestamps")


def _known_keys(deltas: Mapping[str, Any], known: Mapping[str, Any], what: str) -> None:
    unknown = sorted(set(deltas) - set(known))
    if unknown:
        close = {k: difflib.get_close_matches(k, list(known), n=1) for k in unknown}
        hint = "; ".join(f"did you mean {c[0]!r} for {k!r}?" for k, c in close.items() if c)
        raise ConfigError(f"delta_timestamps has keys {unknown} that are not {what}{'; ' + hint if hint else ''}; "
                          f"they are: {sorted(known)}")


def windows(catalog: Catalog, cfg: LoaderConfig) -> tuple[dict[str, tuple[int, ...]], tuple]:
    """(the plan's delta indices, each member's): frame offsets per windowed key. A member resolves the seconds
    (its own `delta_timestamps` where given) at its own fps and tolerance; a member lacking a key gets None."""
    if not catalog.is_mixture:
        meta = catalog.members[0].meta
        for key, seconds in cfg.delta_timestamps.items():
            _not_frame_counts(key, seconds, meta.fps, catalog.members[0].lengths)
        return delta_indices(cfg.delta_timestamps, meta.fps, cfg.tolerance_s), ()
    per_member = []
    for member in catalog.members:
        unknown = sorted(set(member.delta_timestamps) - set(cfg.delta_timestamps))
        if unknown:
            raise ConfigError(f"mixture member {member.name!r}: delta_timestamps gives offsets for {unknown}, which the "
                              f"loader's delta_timestamps does not window ({sorted(cfg.delta_timestamps)}); a member "
                              "only restates the loader's keys in its own seconds")
        mine: dict[str, tuple[int, ...] | None] = {}
        for key, seconds in cfg.delta_timestamps.items():
            if catalog.fields[key].own[member.index] is None:
                mine[key] = None
                continue
            own = member.delta_timestamps.get(key, seconds)
            if len(own) != len(seconds):
                raise ConfigError(f"mixture member {member.name!r}: delta_timestamps[{key!r}] has {len(own)} offsets, "
                                  f"the loader's {len(seconds)}; every member's window of a key has the same steps")
            _not_frame_counts(key, own, member.meta.fps, member.lengths,
                              f"mixture member {member.name!r} ({member.meta.fps:g} fps): ")
            tolerance = member.tolerance_s if member.tolerance_s is not None else cfg.tolerance_s
            try:
                mine[key] = delta_indices({key: own}, member.meta.fps, tolerance)[key]
            except ConfigError as exc:
                raise ConfigError(f"mixture member {member.name!r} ({member.meta.fps:g} fps): {exc}; or give the "
                                  f"member its own offsets: Member(..., delta_timestamps={{{key!r}: [...]}})") from None
        per_member.append(mine)
    plan: dict[str, tuple[int, ...]] = {}
    for key in cfg.delta_timestamps:
        plan[key] = next(d for d in (m[key] for m in per_member) if d is not None)
    return plan, tuple(per_member)


def _not_frame_counts(key: str, seconds: Any, fps: float, lengths: np.ndarray, who: str = "") -> None:
    """A warning for offsets that look like frame counts (`plan.epoch.frame_counts`). `lengths`: the selected
    episodes' (0: not selected)."""
    told = frame_counts(key, seconds, fps, int(np.max(lengths)) if len(lengths) else 0)
    if told is not None:
        warnings.warn(who + told, stacklevel=5)  # at the StreamLoader(...) call


def planner_mix(catalog: Catalog, member_deltas: tuple) -> Mix | None:
    """The planner's view of a mixture (None for a single dataset)."""
    if not catalog.is_mixture:
        return None
    assert catalog.mixture is not None
    return Mix(catalog.member_of, tuple(m.weight for m in catalog.members), catalog.mixture.samples_per_epoch,
               member_deltas, _shares(catalog))


def _shares(catalog: Catalog) -> tuple[float, ...] | None:
    """The members' shares (`Member.share`: given to all or none), or None where weights set the epoch."""
    shares = [m.share for m in catalog.members]
    return None if None in shares else tuple(float(s or 0.0) for s in shares)


def epoch_shares(catalog: Catalog) -> np.ndarray:
    """Each member's part of an epoch's samples, summing to 1 (`plan.mixture_epoch.member_mass` of its selected frames,
    normalised: what `member_targets` rounds)."""
    mass = member_mass(np.array([m.frames for m in catalog.members]), tuple(m.weight for m in catalog.members),
                       _shares(catalog))
    return mass / mass.sum() if mass.sum() > 0 else mass


def check_camera_sizes(catalog: Catalog, image_ops) -> None:
    """Every member's camera fits the image ops; a key whose members' cameras differ in size needs
    `resize=` or `crop=` (batches are dense), or, for a depth camera, which they leave as it is, another key."""
    for key in [*catalog.video_keys, *catalog.image_keys]:
        f = catalog.fields[key]
        said = ", ".join(f"{catalog.members[m].name}: {h}x{w}" for m, (h, w) in f.sizes.items())
        if f.depth:
            if len(set(f.sizes.values())) > 1:
                raise ConfigError(f"depth camera {key!r} has different sizes in the mixture's members ({said}); a "
                                  "batch holds one size per key and depth cameras are not resized: map them to "
                                  "different keys with Member(keys={...}), or leave one out with a None")
            continue
        for m, (h, w) in f.sizes.items():
            image_ops.check_camera(key, h, w)
        if len(set(f.sizes.values())) > 1 and image_ops.resize is None and image_ops.crop is None:
            raise ConfigError(f"camera {key!r} has different sizes in the mixture's members ({said}); a batch holds "
                              "one size per key: pass resize=(height, width) (or crop=) to bring them to one, or map "
                              "them to different keys with Member(keys={...})")


def table_kinds(catalog: Catalog, store, first_rows: Callable[[], dict[str, np.ndarray]]
                ) -> dict[str, tuple[np.dtype, int]]:
    """Table key -> (numpy dtype, dimensions per frame) of the batch. One dataset: from its first selected
    episode's rows (`first_rows`, as before mixtures). A mixture: the field's dtype (float32, int64 or bool),
    and the dimensions of the first member that has the key, read from its data file's schema."""
    if not catalog.is_mixture:
        rows = first_rows()
        return {k: (v.dtype, v.ndim - 1) for k, v in rows.items() if k in catalog.table_keys}
    kinds: dict[str, tuple[np.dtype, int]] = {}
    for member in catalog.members:
        missing = [k for k in catalog.table_keys if k not in kinds and k in member.own]
        if not missing:
            continue
        first = int(np.flatnonzero(member.lengths > 0)[0]) if (member.lengths > 0).any() else 0
        ndims = store.files[member.index].tables.ndims(first)
        for key in missing:
            kinds[key] = (np.dtype(catalog.fields[key].dtype), 1 if catalog.fields[key].padded else ndims[member.own[key]])
    return kinds
