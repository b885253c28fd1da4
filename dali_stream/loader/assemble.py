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
from ..decode import proven
from ..decode.cpu import DecoderCache
from ..decode.device import place
from ..decode.engine import OpenDecoders, make_engine
from ..decode.frames import FrameCache, kept_as, kept_bytes, room_warning, stamper
from ..decode.node import Node
from ..decode.route import ROUTES, keys_where, route
from ..decode.routes import choose_routes, nvdec_engine
from ..decode.speed import gpu_slower, unmeasured
from ..errors import InstallError
from ..fetch.store import EpisodeStore
from ..fetch.tables import FRAME_TIME_S
from ..graph.batches import BatchBuilder
from ..graph.dali_frames import DaliFrames
from ..graph.engine_frames import engine_camera
from ..graph.imageops import ImageOps
from ..graph.resizer import Resizer
from ..graph.transforms import TransformPool
from ..meta.catalog import Catalog
from ..pairing import check_dali, dali_missing, dali_present
from ..plan.epoch import PlanConfig
from ..plan.mixture_epoch import Mix
from ..plan.world import World, resolve_world
from ..source.storage import is_local
from .lifecycle import IMPORT_ERRORS
from .memory import available_bytes
from .resolve import Facts, Resolved, nvdec_joins, resolve
from .source_setup import camera_routes, check_camera_sizes, open_source, planner_mix, table_kinds, windows

log = logging.getLogger("dali_stream")


@dataclass
class Stages:
    """What `assemble` built (module doc). `routes`: camera key -> route name (`decode.route`), `route_reasons`
    why; `member_routes`: a mixture's members' own choices; `device`: where batches land ("cpu", "cuda:N"),
    `dali_device` the CUDA index the graph runs on (None: CPU only); `host_batches`: no DALI graph at all
    (every camera on host frames and batches on the CPU); `squeeze`: camera key -> one step (no window axis)."""

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
    routes: dict[str, str]
    route_reasons: dict[str, str]
    member_routes: Any
    resolved: Resolved
    decoders: DecoderCache
    store: EpisodeStore
    engines: dict[str, OpenDecoders]
    frames: FrameCache | None
    transforms: TransformPool | None
    builder: BatchBuilder
    host_batches: bool
    squeeze: Mapping[str, bool]

    @property
    def plan_lengths(self) -> np.ndarray:
        """The lengths the planner sees: the selected episodes' (the others 0: never drawn, never fetched)."""
        return self.catalog.lengths


def assemble(cfg: LoaderConfig, source: Any) -> Stages:
    check_dali()
    without_dali(cfg)
    if "nvidia.dali.plugin.pytorch" in IMPORT_ERRORS:
        exc = IMPORT_ERRORS["nvidia.dali.plugin.pytorch"]
        raise InstallError(f"NVIDIA DALI does not import ({type(exc).__name__}: {exc}); `dali-stream diagnose` "
                           "names the broken layer and the constraint set that fixes it")
    image_ops = ImageOps.make(cfg.image_dtype, resize=cfg.resize, crop=cfg.crop, mean=cfg.mean, std=cfg.std,
                              channels_last=cfg.memory_format == "channels_last")
    # One dataset, or a mixture's members as one list of episode positions (`catalog`); `meta`: a DatasetMeta, or a
    # mixture's MixtureMeta (its features and merged stats in the mixture's keys)
    catalog, meta = open_source(source, cfg)
    world = resolve_world(rank=cfg.rank, world_size=cfg.world_size, env=os.environ)
    plan_deltas, member_deltas = windows(catalog, cfg)  # each member at its own fps
    node, placement = place(cfg.device, world.local_rank)
    routes, reasons, member_routes = _routes(cfg, catalog, node, plan_deltas)
    local = all(is_local(m.meta.data_fs) for m in catalog.members)
    resolved = resolve(cfg, Facts(routes=routes, gpu=node.gpu is not None,
                                  gpu_engines=node.gpu.nvdec_engines if node.gpu is not None else None,
                                  cuda_batches=placement.torch_device.startswith("cuda"), local=local,
                                  episodes=int(np.count_nonzero(catalog.lengths)), world_size=world.world_size,
                                  cpu_count=os.cpu_count() or 1, mixture=catalog.is_mixture))
    plan_config = PlanConfig(batch_size=cfg.batch_size, pool_size=resolved.pool, seed=cfg.seed,
                             drop_last=resolved.drop_last, delta_indices=plan_deltas, shuffle=cfg.shuffle,
                             drop_n_first_frames=cfg.drop_n_first_frames, drop_n_last_frames=cfg.drop_n_last_frames)
    check_camera_sizes(catalog, image_ops)
    decoders = DecoderCache(resolved.max_decoders, cfg.check_frames)
    store = EpisodeStore(catalog, cfg.tolerance_s, cfg.cache_bytes, decoders, resolved.fetch_workers,
                         resolved.segment_bytes, index_bytes=cfg.index_bytes, footer_bytes=cfg.footer_bytes)
    store.epoch_episodes = resolved.epoch_episodes
    engines = {}
    for name, threads in resolved.engine_threads.items():
        engines[name] = make_engine(name, threads, placement.dali_device,
                                    {engine_camera(k, m.name, catalog.is_mixture):
                                     (m.camera(k).height, m.camera(k).width)
                                     if m.camera(k).height and m.camera(k).width else None
                                     for m in catalog.members for k in catalog.video_keys if k in m.own})
        log.info("%s: %d decode threads, their decoders kept open", name, threads)
    log.info("batches on %s; %d worker threads, %d fetch threads, at most %d idle CPU decoders, cache %d MiB; "
             "rank %d of %d", placement.torch_device, cfg.num_workers, resolved.fetch_workers, resolved.max_decoders,
             cfg.cache_bytes >> 20, world.rank, world.world_size)
    transforms = None if cfg.image_transforms is None else TransformPool(cfg.image_transforms,
                                                                          resolved.transform_processes)
    table_dtypes = table_kinds(catalog, store,  # one dataset: its first selected episode's rows, as read
                               lambda: store.tables.episode(int(np.flatnonzero(catalog.lengths > 0)[0])))
    frames = None  # decoded frames kept for later epochs (decode.frames), resized first by the workers where set
    resizers = {k: Resizer(image_ops.resize, image_ops.crop) for k in resolved.shaped_on_workers}
    dali_frames = DaliFrames()  # DALI's CPU decoder on the workers, for the cameras the cache keeps
    dali_workers = {k: dali_frames for k in resolved.dali_on_workers}
    if resolved.frame_cache:
        labels = {k: kept_as(r, resizers[k].label() if k in resizers else None) for k, r in routes.items()
                  if route(r).cached}
        frames = FrameCache(cfg.frame_cache_bytes, cfg.frame_cache_dir,
                            stamper([m.meta.data_fs for m in catalog.members]), labels)
        decoded = kept_bytes(catalog, labels, image_ops if resolved.shaped_on_workers else None)
        why = room_warning(cfg.frame_cache_bytes, decoded, world.local_world_size, available_bytes())
        if why:
            warnings.warn(why, stacklevel=3)
        uncached = {k: r for k, r in routes.items() if not route(r).cached}
        if uncached:
            named = ", ".join(f"{k!r} (route {r})" for k, r in uncached.items())
            served = ", ".join(n for n, r in ROUTES.items() if r.cached)
            warnings.warn(f"the decoded-frame cache keeps frames decoded on the workers (routes {served}): cameras "
                          f"{named} are decoded every epoch. decode='cpu' routes every camera through torchcodec",
                          stacklevel=3)
        store.held = episode_held(frames, catalog)
    builder = BatchBuilder(catalog, store, decoders, routes, plan_config.delta_indices, cfg.tolerance_s,
                           catalog.table_keys, table_dtypes, augment_seed=cfg.seed if cfg.augment is not None else None,
                           image_ops=image_ops if resolved.host_frames else None,
                           lookahead=resolved.prefetch_batches, join_streams=resolved.join_streams, engines=engines,
                           join_all=resolved.global_shuffle, frames=frames, resizers=resizers,
                           dali_workers=dali_workers)
    dali_cameras = builder.dali_keys
    if dali_cameras:
        log.info("cameras %s: %s", dali_cameras,
                 f"a batch in at most {resolved.join_streams} groups, each group's clips joined into one stream "
                 f"(join_streams: {resolved.reasons['join_streams']})" if resolved.join_streams else
                 f"one clip per sample ({resolved.reasons['join_streams']})")
    # Every camera on host frames (or none at all) and batches on the CPU: a DALI graph would only pass the tables
    # through, so there is none; the tables are stacked as the batch is handed over. Measured (AV1 480p, 2 cores,
    # uint8 channels_last, alternated twice): 875-885 against 812-815 samples/s with the graph.
    host_batches = not builder.graph_routes and not placement.torch_device.startswith("cuda")
    return Stages(config=cfg, image_ops=image_ops, catalog=catalog, meta=meta, world=world, plan_config=plan_config,
                  mix=planner_mix(catalog, member_deltas), node=node, device=placement.torch_device,
                  dali_device=placement.dali_device, routes=routes, route_reasons=reasons,
                  member_routes=member_routes, resolved=resolved, decoders=decoders, store=store, engines=engines,
                  frames=frames, transforms=transforms, builder=builder, host_batches=host_batches,
                  squeeze={k: len(plan_config.delta_indices.get(k, (0,))) == 1 for k in routes})


def without_dali(cfg: LoaderConfig) -> None:
    """On an install without NVIDIA DALI (the CPU install) every camera decodes on the workers and batches skip the
    graph; what only DALI's graph does is refused here, naming the extra that brings it."""
    if dali_present():
        return
    asked = [f"{name}=" for name in ("resize", "crop", "augment") if getattr(cfg, name) is not None]
    if asked:
        raise InstallError(dali_missing(" and ".join(asked)))


def episode_held(frames: FrameCache, catalog: Catalog):
    """(pos, camera, rows) -> whether `frames` holds every frame of the episode's camera (the file times of all its
    rows), for the cameras the cache serves (`FrameCache.labels`): the store then fetches none of it."""
    cameras = {(m.index, catalog.fields[k].own[m.index]): label for k, label in frames.labels.items()
               for m in catalog.members}

    def held(pos: int, camera: str, rows: dict) -> bool:
        member, local = catalog.locate(pos)
        name = cameras.get((member.index, camera))
        if name is None:
            return False
        start = float(member.meta.cameras[camera].from_timestamp[local])
        return frames.holds(frames.names(member.meta.video_file(local, camera), start + rows[FRAME_TIME_S], name))
    return held


def measured_speed(cfg: LoaderConfig, deltas: Mapping[str, Any], dali_version: str):
    """For `decode="auto"`: camera key -> (why a measurement says torchcodec beats NVDEC for its samples, or None;
    a note otherwise), from `decode.speed`: one clip per sample or joined streams (`nvdec_joins`), frames per
    sample (`deltas`)."""
    joined = nvdec_joins(cfg)

    def measured(key: str) -> tuple[str | None, str]:
        return gpu_slower(dali_version, joined, len(deltas.get(key, (0,)))), unmeasured(joined)

    return measured


def _routes(cfg: LoaderConfig, catalog: Catalog, node: Node, deltas: Mapping[str, Any]):
    """Each camera key's route and why (`decode.routes`), a mixture's members' own choices, and the install check
    of the routes chosen."""
    dali_version = proven.installed_dali()  # "0" without DALI: no GPU route then
    # NVDEC cameras: DALI's fn.decoders.video, or the open-decoder engine (decode.engine)
    engine, engine_why = nvdec_engine(cfg.nvdec_engine, proven.open_unproven(node.gpu.name if node.gpu else None))
    measured, joined = measured_speed(cfg, deltas, dali_version), nvdec_joins(cfg)
    choices, member_routes = camera_routes(
        catalog, cfg.decode, lambda formats, decode: choose_routes(formats, decode, node, measured,
                                                                   proven.rule(formats, joined)),
        engine, engine_why)
    routes = {k: c.route for k, c in choices.items()}
    for key, choice in choices.items():
        log.info("camera %s: %s (%s)", key, choice.route, choice.reason)
    cpu = keys_where(routes, "torchcodec")
    if cpu and "torchcodec.decoders" in IMPORT_ERRORS:
        exc = IMPORT_ERRORS["torchcodec.decoders"]
        raise InstallError(f"cameras {sorted(cpu)} decode with torchcodec, which does not import ({type(exc).__name__}: "
                           f"{str(exc).splitlines()[0] if str(exc) else ''}); torchcodec must match torch and "
                           "find FFmpeg 4-7 (apt-get install -y ffmpeg): `dali-stream diagnose` names the fix")
    return routes, {k: c.reason for k, c in choices.items()}, member_routes
