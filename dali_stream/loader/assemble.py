"""A loader's stages built from its settings, in one place: the source opened, the node placed, each camera's route
chosen, the derived settings resolved (`loader.resolve`), then the fetch store, the decoders, the open-decoder
engines, the decoded-frame cache, the transform processes and the batch builder made from them.

`assemble(config, source)` returns them as `Stages`; `StreamLoader` holds them and runs epochs over them
(`loader.schedule`, `loader.deliver`). Nothing here iterates.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..config import LoaderConfig
from ..decode.cpu import DecoderCache
from ..decode.device import place
from ..decode.engine import OpenDecoders
from ..decode.frame_cache import EpisodeHeld, FrameCache, frame_bytes, kept_as, kept_bytes, room_warning, stamper
from ..decode.node import Node, rank_cores
from ..decode.open_episodes import EpisodeFrames, Released
from ..decode.route import ROUTES, EngineRoute, Route, names
from ..errors import ConfigError, InstallError
from ..fetch.store import EpisodeStore
from ..graph.batches import BatchBuilder, BuildSpec
from ..graph.buffers import BufferPool
from ..graph.dali_on_workers import DaliFrames
from ..graph.engine_pictures import engine_camera
from ..graph.imageops import ImageOps
from ..graph.resizer import Resizer
from ..graph.source_kit import SourceKit
from ..graph.sources import FrameSource, Workers
from ..graph.transforms import TransformPool
from ..meta.catalog import Catalog
from ..pairing import check_dali, dali_missing, dali_present
from ..plan.epoch import PlanConfig
from ..plan.mixture_epoch import Mix
from ..plan.world import World, resolve_world
from ..source.local_disk import user_cache_dir
from ..source.storage import is_local
from .lifecycle import runtime_error
from .memory import available_bytes
from .resolve import Facts, Resolved, resolve
from .routing import camera_routes
from .source_setup import check_camera_sizes, open_source, planner_mix, table_kinds, windows

log = logging.getLogger("dali_stream")


@dataclass
class Stages:
    """What `assemble` built (module doc). `decode_routes`: camera key -> route (`decode.route`; `routes` their names,
    as `loader.routes` reports them), `route_reasons` why; `member_routes`: a mixture's members' own choices (names); `device`: where batches land ("cpu", "cuda:N"),
    `dali_device` the CUDA index the graph runs on (None: CPU only); `squeeze`: camera key -> one step (no window axis)."""

    config: LoaderConfig
    image_ops: ImageOps
    catalog: Catalog
    meta: Any
    world: World
    plan_config: PlanConfig
    mix: Mix | None
    node: Node
    device: str
    dali_device: int | None
    decode_routes: dict[str, Route]
    route_reasons: dict[str, str]
    member_routes: Any
    resolved: Resolved
    decoders: DecoderCache
    store: EpisodeStore
    engines: dict[Route, OpenDecoders]
    frames: FrameCache | None
    episodes: EpisodeFrames | None
    transforms: TransformPool | None
    builder: BatchBuilder
    squeeze: Mapping[str, bool]

    @property
    def routes(self) -> dict[str, str]:
        """Camera key -> its route's name (`loader.routes`)."""
        return names(self.decode_routes)

    @property
    def plan_lengths(self) -> np.ndarray:
        """The lengths the planner sees: the selected episodes' (the others 0: never drawn, never fetched)."""
        return self.catalog.lengths


def assemble(cfg: LoaderConfig, source: Any) -> Stages:
    check_dali()
    without_dali(cfg)
    image_ops = ImageOps.make(cfg.image_dtype, resize=cfg.resize, crop=cfg.crop, mean=cfg.mean, std=cfg.std,
                              channels_last=cfg.memory_format == "channels_last")
    # One dataset, or a mixture's members as one list of episode positions (`catalog`); `meta`: a DatasetMeta, or a
    # mixture's MixtureMeta (its features and merged stats in the mixture's keys)
    catalog, meta = open_source(source, cfg)
    world = resolve_world(rank=cfg.rank, world_size=cfg.world_size, env=os.environ)
    plan_deltas, member_deltas = windows(catalog, cfg)  # each member at its own fps
    node, placement = place(cfg.device, world.local_rank)
    chosen = camera_routes(cfg, catalog, node, plan_deltas)
    routes = chosen.routes
    check_installed(routes)
    resolved = resolve(cfg, facts(catalog, routes, node, placement.torch_device, world))
    plan_config = PlanConfig(batch_size=cfg.batch_size, pool_size=resolved.pool, seed=cfg.seed,
                             drop_last=resolved.drop_last, delta_indices=plan_deltas, shuffle=cfg.shuffle,
                             drop_n_first_frames=cfg.drop_n_first_frames, drop_n_last_frames=cfg.drop_n_last_frames,
                             partition=cfg.partition)
    dali_imports(resolved)
    check_camera_sizes(catalog, image_ops)
    in_tables = [k for k, r in routes.items() if r.in_tables]
    if in_tables and cfg.augment is not None:
        raise ConfigError(f"augment= runs in the DALI graph, which cameras {in_tables} never enter: the dataset stores "
                          "them as images in its tables, laid out on the workers; use image_transforms (lerobot's, per "
                          "sample) for them, or convert the dataset to videos (lerobot-edit-dataset --operation.type "
                          "convert_image_to_video)")
    decoders = DecoderCache(resolved.max_decoders, cfg.check_frames)
    engines = open_engines(catalog, routes, resolved, placement.dali_device)
    log.info("batches on %s; %d worker threads, %d fetch threads, at most %d idle CPU decoders, cache %d MiB; "
             "rank %d of %d", placement.torch_device, resolved.num_workers, resolved.fetch_workers,
             resolved.max_decoders, cfg.cache_bytes >> 20, world.rank, world.world_size)
    transforms = None if cfg.image_transforms is None else TransformPool(cfg.image_transforms,
                                                                          resolved.transform_processes)
    # decoded frames kept for later epochs (decode.frame_cache), resized first by the workers where set
    resizers = {k: Resizer(image_ops.resize, image_ops.crop) for k in resolved.shaped_on_workers}
    dali_frames = DaliFrames()  # DALI's CPU decoder on the workers, for the cameras the cache keeps
    dali_workers = {k: dali_frames for k in resolved.dali_on_workers}
    frames = frame_cache(cfg, catalog, routes, resolved, resizers, image_ops, world) if resolved.frame_cache else None
    # the pool's open episodes' frames, each camera decoded once per episode (decode.open_episodes), released with
    # the episode's decoders when the plan retires it
    episodes = EpisodeFrames(resolved.episode_frames, resolved.episode_frames_each) if resolved.episode_frames else None
    store = EpisodeStore(catalog, cfg.tolerance_s, cfg.cache_bytes, Released(decoders, episodes),
                         resolved.fetch_workers,
                         resolved.segment_bytes, index_bytes=cfg.index_bytes, footer_bytes=cfg.footer_bytes,
                         epoch_episodes=resolved.epoch_episodes, table_cache_dir=resolved.table_cache_dir,
                         table_cache_bytes=cfg.table_cache_bytes,
                         held=None if frames is None else EpisodeHeld(frames, catalog, routes))
    table_dtypes = table_kinds(catalog, store,  # one dataset: its first selected episode's rows, as read (no images)
                               lambda: store.tables.episode(int(np.flatnonzero(catalog.lengths > 0)[0]),
                                                            frozenset(catalog.members[0].meta.image_keys)))
    buffers = BufferPool(resolved.host_buffers)  # host-frame buffers alive at once (`Resolved.host_buffers`)
    kit = SourceKit(catalog, engines, Workers(decoders, resolved.global_shuffle, episodes), resizers,
                    dali_workers, image_ops, resolved.host_cameras, resolved.kept_chw, buffers, cfg.depth_output_unit,
                    frames)
    sources: dict[str, FrameSource] = kit.sources(routes)
    builder = BatchBuilder(catalog, store, sources,
                           BuildSpec(plan_config.delta_indices, cfg.tolerance_s, tuple(catalog.table_keys),
                                     table_dtypes, resolved.augment_seed,
                                     resolved.join_streams, one_group=resolved.host_batches,
                                     text_keys=tuple(catalog.text_keys)))
    dali_cameras = builder.dali_keys
    if dali_cameras:
        log.info("cameras %s: %s", dali_cameras,
                 f"a batch in at most {resolved.join_streams} groups, each group's clips joined into one stream "
                 f"(join_streams: {resolved.reasons['join_streams']})" if resolved.join_streams else
                 f"one clip per sample ({resolved.reasons['join_streams']})")
    return Stages(config=cfg, image_ops=image_ops, catalog=catalog, meta=meta, world=world, plan_config=plan_config,
                  mix=planner_mix(catalog, member_deltas), node=node, device=placement.torch_device,
                  dali_device=placement.dali_device, decode_routes=routes, route_reasons=chosen.reasons,
                  member_routes={m: names(r) for m, r in chosen.members.items()}, resolved=resolved, decoders=decoders, store=store, engines=engines,
                  frames=frames, episodes=episodes, transforms=transforms, builder=builder,
                  squeeze={k: len(plan_config.delta_indices.get(k, (0,))) == 1 for k in routes})


def facts(catalog: Catalog, routes: dict[str, Route], node: Node, torch_device: str, world: World) -> Facts:
    """What `resolve` reads besides the settings (`loader.resolve_base.Facts`), from what the loader found: the
    catalog, each camera's route, the node, where batches land and the world."""
    return Facts(routes=routes, gpu=node.gpu is not None,
                 gpu_engines=node.gpu.nvdec_engines if node.gpu is not None else None,
                 cuda_batches=torch_device.startswith("cuda"),
                 local=all(is_local(m.meta.data_fs) for m in catalog.members),
                 episodes=int(np.count_nonzero(catalog.lengths)), world_size=world.world_size,
                 local_world_size=world.local_world_size, cpu_count=os.cpu_count() or 1,
                 rank_cores=rank_cores(world.local_world_size), mixture=catalog.is_mixture,
                 frame_bytes={k: frame_bytes(catalog.fields[k].shape[0], catalog.fields[k].shape[1]) for k in routes},
                 user_cache_dir=user_cache_dir())


def frame_cache(cfg: LoaderConfig, catalog: Catalog, routes: Mapping[str, Route], resolved: Resolved,
                resizers: Mapping[str, Resizer], image_ops: ImageOps, world: World) -> FrameCache:
    """The decoded-frame cache (`decode.frame_cache`) for the cameras whose routes it serves, each labelled by what it
    keeps (as decoded, or resized first by the workers; in the batch's order: `Resolved.kept_chw`); warned where
    the node's memory would not hold it, and where cameras it cannot serve are decoded every epoch."""
    labels = {k: kept_as(r, resizers[k].label() if k in resizers else None, k in resolved.kept_chw)
              for k, r in routes.items() if r.cached}
    frames = FrameCache(cfg.frame_cache_bytes, cfg.frame_cache_dir,
                        stamper([m.meta.data_fs for m in catalog.members]), labels)
    decoded = kept_bytes(catalog, labels, image_ops if resolved.shaped_on_workers else None)
    why = room_warning(cfg.frame_cache_bytes, decoded, world.local_world_size, available_bytes())
    if why:
        warnings.warn(why, stacklevel=4)
    uncached = {k: r for k, r in routes.items() if not r.cached}
    if uncached:
        named = ", ".join(f"{k!r} (route {r})" for k, r in uncached.items())
        served = ", ".join(n for n, r in ROUTES.items() if r.cached)
        warnings.warn(f"the decoded-frame cache keeps frames decoded on the workers (routes {served}): cameras "
                      f"{named} are decoded every epoch. decode='cpu' routes every RGB camera through torchcodec",
                      stacklevel=4)
    return frames


def open_engines(catalog: Catalog, routes: Mapping[str, Route], resolved: Resolved,
                 device_index: int | None) -> dict[Route, OpenDecoders]:
    """Each open-decoder engine route's engine (`decode.route.EngineRoute.make_engine`), in the form `resolved` gives
    it, passed on as it is (`Resolved.engine_form`: each form's count; no form is named here); each camera's NVDEC
    surface size from meta/info.json."""
    sizes = {engine_camera(k, m.name, catalog.is_mixture): (m.camera(k).height, m.camera(k).width)
             if m.camera(k).height and m.camera(k).width else None
             for m in catalog.members for k in catalog.video_keys if k in m.own}
    engines: dict[Route, OpenDecoders] = {}
    for route in dict.fromkeys(r for r in routes.values() if isinstance(r, EngineRoute)):
        engines[route] = route.make_engine(device_index=device_index, sizes=sizes, **resolved.engine_form(route.name))
        log.info("%s: %s, their decoders kept open", route, engines[route])
    return engines


def without_dali(cfg: LoaderConfig) -> None:
    """On an install without NVIDIA DALI (the CPU install) every camera decodes on the workers and batches skip the
    graph; what only DALI's graph does is refused here, naming the extra that brings it."""
    if dali_present():
        return
    asked = [f"{name}=" for name in ("resize", "crop", "augment") if getattr(cfg, name) is not None]
    if asked:
        raise InstallError(dali_missing(" and ".join(asked)))


def dali_imports(resolved: Resolved) -> None:
    """DALI must import where it runs: its torch plugin for a graph, DALI itself for its CPU decoder on the workers."""
    needs = "nvidia.dali.plugin.pytorch" if not resolved.host_batches else "nvidia.dali" if resolved.dali_on_workers \
        else None
    if needs is not None:
        exc = runtime_error(needs)
        if exc is not None:
            raise InstallError(f"NVIDIA DALI does not import ({type(exc).__name__}: {exc}); `dali-stream diagnose` "
                               "names the broken layer and the constraint set that fixes it")


def check_installed(routes: dict[str, Route]) -> None:
    """The routes chosen can run here: torchcodec's cameras need torchcodec to import, depth cameras PyAV."""
    pyav = [k for k, r in routes.items() if r.depth or r.in_tables]
    exc = runtime_error("av") if pyav else None
    if exc is not None:
        raise InstallError(f"cameras {sorted(pyav)} (depth, or images in the tables) decode through PyAV, which does "
                           f"not import ({type(exc).__name__}: {exc}); pip install 'av>=14.2'")
    cpu = [k for k, r in routes.items() if r.torchcodec]
    exc = runtime_error("torchcodec.decoders") if cpu else None
    if exc is not None:
        raise InstallError(f"cameras {sorted(cpu)} decode with torchcodec, which does not import ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''}); torchcodec must match torch and "
                           "find FFmpeg 4-7 (apt-get install -y ffmpeg): `dali-stream diagnose` names the fix")
