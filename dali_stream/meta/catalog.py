"""What a loader reads from: one dataset, or a mixture's members, as one list of episode positions.

The planner, the fetchers and the batch builder see episode *positions* `0 .. E-1`: member after member, each
member's episodes in its table order (`Catalog.offsets`). `Catalog.locate(pos)` gives the member and its own
position; `Catalog.fields` the batch's keys (`schema.Field`: each member's own key for it, or None). A single
dataset is a catalog of one member under its own keys, so every stage runs the same code for both.

`Catalog.open(mixture, ...)` opens every member's metadata once (in parallel: a 50-member mixture of local
datasets opens in well under 2 s; `benchmarks/` measures it), applies each member's episode selection, and
merges their features into one schema (`schema.merge_features`); `MixtureMeta` is what `loader.meta` is then:
features, merged stats and fps in the mixture's keys, as lerobot's policy factories read them.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import ConfigError, DaliStreamError
from ..mixture import Member, Mixture, default_name
from ..source.storage import RemoteOptions
from .dataset import Camera, DatasetMeta, LerobotMetadata
from .schema import APPROXIMATE_STATS, TEXT, Field, merge_features, merge_stats

OPEN_THREADS = 16  # members' metadata opened at once (remote members wait on the network)


@dataclass
class Opened:
    """One member, opened: its metadata, where its positions start, its selection and its keys."""

    index: int
    name: str
    meta: DatasetMeta
    offset: int  # its first episode position in the catalog
    lengths: np.ndarray  # (its episodes,) frames the planner sees: 0 for episodes not selected
    episodes: np.ndarray  # the selected episode indices, ascending
    own: dict[str, str]  # mixture key -> its own feature key (the keys it has)
    weight: float = 1.0
    tolerance_s: float | None = None  # None: the loader's
    delta_timestamps: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # its own offsets (seconds)
    share: float | None = None  # its part of the epoch's samples (`Member.share`); None: by frames x weight

    @property
    def cameras(self) -> list[str]:
        """Its own camera keys that the batch uses (fetched for each of its episodes)."""
        return [o for o in self.own.values() if o in self.meta.cameras]

    @property
    def table_keys(self) -> list[str]:
        """Its own columns of the frame tables the batch uses (numbers, text: `DatasetMeta.text_keys`, and cameras
        stored as images: `image_keys`)."""
        return [o for o in self.own.values()
                if o in self.meta.table_keys or o in self.meta.text_keys or o in self.meta.image_keys]

    @property
    def frames(self) -> int:
        return int(self.lengths.sum())

    def camera(self, key: str) -> Camera:
        """Its camera behind mixture key `key`."""
        return self.meta.cameras[self.own[key]]


class Catalog:
    """Episode positions over one dataset or a mixture's members (module doc)."""

    def __init__(self, members: list[Opened], fields: dict[str, Field], mixture: Mixture | None) -> None:
        self.members = members
        self.fields = fields
        self.mixture = mixture
        self.offsets = np.array([m.offset for m in members], dtype=np.int64)
        self.lengths = np.concatenate([m.lengths for m in members]).astype(np.int64)
        self.member_of = np.repeat(np.arange(len(members)), [len(m.lengths) for m in members]).astype(np.int64)
        self.video_keys = [k for k, f in fields.items() if f.visual and f.dtype == "video"]
        self.image_keys = [k for k, f in fields.items() if f.dtype == "image"]  # cameras stored in the tables
        self.table_keys = [k for k, f in fields.items() if not f.visual and f.dtype != TEXT]
        self.text_keys = [k for k, f in fields.items() if f.dtype == TEXT]  # a Python value per sample

    # ---- construction -------------------------------------------------------------------------------
    @classmethod
    def single(cls, meta: DatasetMeta, lengths: np.ndarray, episodes: np.ndarray) -> "Catalog":
        """One dataset under its own keys (its planner lengths and selected episodes from `plan.selection`)."""
        meta.refuse_depth_images(meta.features)
        keys = [*meta.video_keys, *meta.image_keys, *meta.table_keys, *meta.text_keys]
        fields = {}
        for k in keys:
            cam = meta.cameras.get(k)
            shape = (cam.height, cam.width, cam.channels) if cam is not None else \
                tuple(int(x) for x in (meta.features[k].get("shape") or ()))
            dtype = "video" if cam is not None else TEXT if k in meta.text_keys else str(meta.features[k].get("dtype"))
            fields[k] = Field(k, cam is not None or k in meta.image_keys, dtype,
                              shape, (k,), (shape,), meta.features[k].get("names"),
                              cam is not None and cam.depth is not None)
        member = Opened(0, default_name(meta.source), meta, 0, np.asarray(lengths, dtype=np.int64),
                        np.asarray(episodes, dtype=np.int64), {k: k for k in keys})
        return cls([member], fields, None)

    @classmethod
    def whole(cls, meta: DatasetMeta) -> "Catalog":
        """One dataset with every episode (tools that read a whole dataset: `verify`)."""
        return cls.single(meta, meta.lengths, meta.episodes["episode_index"])

    @classmethod
    def open(cls, mixture: Mixture, select, remote: RemoteOptions | None = None) -> "Catalog":
        """Open every member (`select(episode_index, lengths, episodes, max_episodes)` -> (lengths, episodes): the
        planner's selection, `plan.selection.select`) and merge their features; `remote`: the loader's remote
        options, each member's `storage_options` merged over them."""
        remote = remote or RemoteOptions()

        def one(member: Member) -> DatasetMeta:
            try:
                return DatasetMeta.open(member.source, member.data_files_root,
                                        remote=remote.over(member.storage_options), revision=member.revision)
            except DaliStreamError as exc:
                raise type(exc)(f"mixture member {member.name!r}: {exc}") from None

        with ThreadPoolExecutor(min(OPEN_THREADS, len(mixture.members)), thread_name_prefix="dali-stream-open") as pool:
            metas = list(pool.map(one, mixture.members))
        opened = []
        offset = 0
        for i, (member, meta) in enumerate(zip(mixture.members, metas)):
            unknown = sorted(set(member.keys) - set(meta.features))
            if unknown:
                raise ConfigError(f"mixture member {member.name!r}: keys renames {unknown}, which are not features of "
                                  f"{member.source!r}; its features: {sorted(meta.features)}")
            try:
                lengths, episodes = select(meta.episodes["episode_index"], meta.lengths,
                                           None if member.episodes is None else list(member.episodes),
                                           member.max_episodes)
            except ConfigError as exc:
                raise ConfigError(f"mixture member {member.name!r}: {exc}") from None
            meta.refuse_depth_images([k for k in meta.features if member.mixture_key(k) is not None], member.name)
            own: dict[str, str] = {}
            for k in (*meta.video_keys, *meta.image_keys, *meta.table_keys, *meta.text_keys):
                to = member.mixture_key(k)
                if to is not None and to in own:
                    raise ConfigError(f"mixture member {member.name!r}: {own[to]!r} and {k!r} both come under the "
                                      f"mixture key {to!r}; map one of them elsewhere (or to None) with keys=")
                if to is not None:  # the index columns keep their names: Member refuses to rename them
                    own[to] = k
            opened.append(Opened(i, str(member.name), meta, offset, lengths, episodes, own, member.weight,
                                 member.tolerance_s, dict(member.delta_timestamps or {}), member.share))
            offset += meta.num_episodes
        renamed = [{o: t for t, o in m.own.items()} for m in opened]  # own key -> mixture key (None: left out)
        fields = merge_features([m.meta.features for m in opened],
                                [{k: rename.get(k) for k in m.meta.features} for m, rename in zip(opened, renamed)],
                                [m.name for m in opened], mixture.vectors,
                                [{k: (c.height, c.width) for k, c in m.meta.cameras.items()} for m in opened])
        return cls(opened, fields, mixture)

    # ---- positions ----------------------------------------------------------------------------------
    @property
    def is_mixture(self) -> bool:
        return self.mixture is not None

    @property
    def num_episodes(self) -> int:
        return int(len(self.lengths))

    def locate(self, pos: int) -> tuple[Opened, int]:
        """The member holding episode position `pos`, and the position in its own episodes table."""
        if len(self.members) == 1:  # one dataset (per sample and camera on every batch: no numpy call)
            return self.members[0], int(pos) - self.members[0].offset
        m = int(np.searchsorted(self.offsets, pos, side="right")) - 1
        member = self.members[m]
        return member, int(pos) - member.offset

    def member_index(self, positions: np.ndarray) -> np.ndarray:
        """The member of each position."""
        return self.member_of[np.asarray(positions, dtype=np.int64)]

    def describe(self, pos: int) -> str:
        """"episode 12" for a single dataset, "member 'droid' episode 12" for a mixture (for messages)."""
        member, local = self.locate(pos)
        episode = member.meta.episode_index(local)
        return f"member {member.name!r} episode {episode}" if self.is_mixture else f"episode {episode}"

    def episodes_text(self, positions) -> str:
        """"episodes [1, 3]" for a single dataset's positions; a mixture's per member: "episodes [1, 3] of member
        'a', [2] of member 'b'" (for messages)."""
        by_member: dict[int, set[int]] = {}
        for pos in positions:
            member, local = self.locate(int(pos))
            by_member.setdefault(member.index, set()).add(member.meta.episode_index(local))
        if not self.is_mixture:
            return f"episodes {sorted(by_member.get(0, set()))}"
        return "episodes " + ", ".join(f"{sorted(eps)} of member {self.members[m].name!r}"
                                       for m, eps in sorted(by_member.items()))

    # ---- what a saved state must agree on -----------------------------------------------------------------
    def fingerprint(self) -> dict[str, Any]:
        """A single dataset's fingerprint (`DatasetMeta.fingerprint`); a mixture's: each member's name, weight,
        fingerprint and key map, and the epoch's size (the members' selections: the state's `selection`)."""
        if not self.is_mixture:
            return self.members[0].meta.fingerprint()
        assert self.mixture is not None
        return {"mixture": [{"name": m.name, "weight": m.weight, "dataset": m.meta.fingerprint(),
                             "keys": {k: m.own[k] for k in sorted(m.own)},
                             **({} if m.share is None else {"share": m.share})} for m in self.members],
                "samples_per_epoch": self.mixture.samples_per_epoch, "vectors": self.mixture.vectors}


class MixtureMeta(LerobotMetadata):
    """`loader.meta` of a mixture: the mixture's features, stats and fps as lerobot's `LeRobotDatasetMetadata`
    offers them (`make_policy(cfg, ds_meta=loader.meta)`, `make_pre_post_processors(..., dataset_stats=
    loader.meta.stats)`), and each member's own metadata (`members`).

    `features`: one entry per mixture key (a padded vector has the longest member's length and names; a camera
    the size batches have: `resize`/`crop` when given). `fps`: the first member's (members may differ: each
    resolves `delta_timestamps`, which are seconds, at its own fps). `stats`: the members' stats merged in the
    mixture's keys (`schema.merge_stats`; quantiles are approximate, `stats_approximate` says which)."""

    def __init__(self, catalog: Catalog, image_shape: Sequence[int] | None = None) -> None:
        self.catalog = catalog
        self.members = [m.meta for m in catalog.members]
        self.member_names = [m.name for m in catalog.members]  # `names`, as lerobot's, holds the features' names
        self.fields = catalog.fields
        self.fps = self.members[0].fps
        self.video_keys = list(catalog.video_keys)
        self.table_keys = list(catalog.table_keys)
        self.text_keys = list(catalog.text_keys)
        self.source = "mixture(" + ", ".join(f"{m.name}={m.meta.source}" for m in catalog.members) + ")"
        self.repo_id = self.source
        self.features: dict[str, dict[str, Any]] = {}
        for key, f in catalog.fields.items():
            if f.visual or f.dtype == TEXT:  # as the first member having it declares it
                first = next(m for m, o in enumerate(f.own) if o is not None)
                feature = dict(self.members[first].features[str(f.own[first])])
                if image_shape is not None and f.visual and not f.depth:  # depth cameras (and text) keep theirs
                    feature["shape"] = [image_shape[0], image_shape[1], 3]
                    feature["names"] = ["height", "width", "channels"]
                self.features[key] = feature
            else:
                self.features[key] = {"dtype": f.dtype, "shape": list(f.shape), "names": f.names}
        self.info = {"codebase_version": "v3.0", "fps": self.fps, "features": self.features,
                     "robot_type": "mixture", "total_episodes": self.num_episodes, "total_frames": self.total_frames,
                     "total_tasks": sum(m.total_tasks for m in self.members)}
        self.stats_approximate = APPROXIMATE_STATS

    @property
    def num_episodes(self) -> int:
        return sum(len(m.episodes) for m in self.catalog.members)

    @property
    def total_frames(self) -> int:
        return sum(m.frames for m in self.catalog.members)

    @property
    def stats(self) -> dict[str, dict[str, np.ndarray]]:
        """The members' stats merged (depth cameras' in the loader's `depth_output_unit`, `DatasetMeta.stats`)."""
        return merge_stats([m.stats for m in self.members], self.fields)

    @property
    def member_stats(self) -> dict[str, dict[str, dict[str, np.ndarray]]]:
        """Each member's own `meta/stats.json`, by member name, under the mixture's keys (the features it has)."""
        return {m.name: {key: m.meta.stats[own] for key, own in m.own.items() if own in m.meta.stats}
                for m in self.catalog.members}

    def fingerprint(self) -> dict[str, Any]:
        return self.catalog.fingerprint()

