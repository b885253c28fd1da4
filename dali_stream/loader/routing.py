"""Each camera's route, chosen in one place: `camera_routes(config, catalog, node, deltas)`.

For one dataset, each camera's route is `decode.routes.choose_routes` on this node: the `decode=` setting, what the
node's NVDEC takes (`decode.node`), and what has been proven of the NVDEC engine the cameras go to (`nvdec_engine`):
DALI's decoder, proven per codec and DALI version with the sample shapes a measurement found torchcodec faster for
(`decode.proven.PROVEN`, `decode.speed`), or the open-decoder engine, proven per GPU and codec with the frame sizes
where the whole loader beat the CPU route (`decode.proven.OPEN_PROVEN`). A mixture's members choose each as they
would alone, and a key takes one route for all of them (`decode.routes.mixture_routes`). The loader
(`loader.assemble`), `dali-stream inspect` and `dali-stream diagnose` (`route_chooser`) all call this: what one shows
is what the others do.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from ..config import DECODE_CHOICES, LoaderConfig
from ..decode import proven
from ..decode.node import Node, StreamFormat
from ..decode.route import TABLE_IMAGES, Route
from ..decode.routes import RouteChoice, choose_routes, formats_of, mixture_routes, nvdec_engine, open_routes
from ..decode.speed import gpu_slower, unmeasured
from ..errors import ConfigError, DeviceError
from ..meta.catalog import Catalog
from .resolve import nvdec_joins

log = logging.getLogger("dali_stream")


@dataclass(frozen=True)
class CameraRoutes:
    """`routes`: camera key -> route (`decode.route`); `reasons`: why; `members`: member name -> {key: the route it
    would take alone} (one dataset: itself)."""

    routes: dict[str, Route]
    reasons: dict[str, str]
    members: dict[str, dict[str, Route]]


def camera_routes(cfg: LoaderConfig, catalog: Catalog, node: Node, deltas: Mapping[str, Any],
                  open_table: tuple[proven.OpenProven, ...] = proven.OPEN_PROVEN) -> CameraRoutes:
    """Each camera key's route and why (module doc); `deltas`: key -> its window's frame offsets (the frames a sample
    shows, which the speed measurement depends on); `open_table`: the open engine's proofs (`decode.proven`)."""
    choose = route_chooser(cfg, node, deltas, open_table)
    images = table_images(cfg.decode, catalog.image_keys)
    decode = cfg.decode if isinstance(cfg.decode, str) else {k: v for k, v in cfg.decode.items() if k not in images}
    if not catalog.is_mixture:
        member = catalog.members[0]
        choices = choose(formats_of(member.meta), decode)
        alone = {member.name: {k: c.route for k, c in choices.items()}}
    else:
        if not isinstance(decode, str):
            unknown = sorted(set(decode) - set(catalog.video_keys))
            if unknown:
                raise ConfigError(f"decode= names cameras {unknown} that no member of the mixture has; cameras: "
                                  f"{[*catalog.video_keys, *images]}")
        per_member = []
        for m in catalog.members:
            own = formats_of(m.meta)
            formats = {key: own[m.own[key]] for key in catalog.video_keys if key in m.own}
            mine = decode if isinstance(decode, str) else {k: v for k, v in decode.items() if k in formats}
            per_member.append(choose(formats, mine))
        names = [m.name for m in catalog.members]
        choices = mixture_routes(per_member, names, catalog.video_keys, decode)
        alone = {n: {k: c.route for k, c in mine.items()} for n, mine in zip(names, per_member)}
    choices |= images
    for m in catalog.members:
        alone.setdefault(m.name, {}).update({k: c.route for k, c in images.items() if k in m.own})
    for key, choice in choices.items():
        log.info("camera %s: %s (%s)", key, choice.route, choice.reason)
    return CameraRoutes({k: c.route for k, c in choices.items()}, {k: c.reason for k, c in choices.items()}, alone)


def route_chooser(cfg: LoaderConfig, node: Node, deltas: Mapping[str, Any],
                  open_table: tuple[proven.OpenProven, ...] = proven.OPEN_PROVEN
                  ) -> Callable[[Mapping[str, StreamFormat], Any], dict[str, RouteChoice]]:
    """`choose(formats, decode)`: the routes of one dataset's cameras on this node under these settings (module
    doc), for `camera_routes` and for `dali-stream diagnose`, which routes the formats it reads from the files."""
    dali_version = proven.installed_dali()  # "0" without DALI: no GPU route then
    gpu_name = node.gpu.name if node.gpu else None
    # NVDEC cameras: DALI's fn.decoders.video, or the open-decoder engine (decode.engine)
    engine, engine_why = nvdec_engine(cfg.nvdec_engine, proven.open_unproven(gpu_name, open_table))
    measured, joined = measured_speed(cfg, deltas, dali_version), nvdec_joins(cfg)

    def choose(formats: Mapping[str, StreamFormat], decode: Any) -> dict[str, RouteChoice]:
        # what `auto` weighs for an NVDEC camera is the chosen engine's own record: the open engine's proofs on this
        # GPU (codec, and the frame sizes where it beat the CPU route), or DALI's proofs and speed measurements
        if engine == "open":
            chosen = choose_routes(formats, decode, node, None, proven.open_rule(gpu_name, formats, open_table))
        else:
            chosen = choose_routes(formats, decode, node, measured, proven.rule(formats, joined, dali_version))
        return open_routes(chosen, engine, engine_why)

    return choose


def table_images(decode: Any, keys: list[str]) -> dict[str, RouteChoice]:
    """The route of each camera stored as images in the frame tables (`catalog.image_keys`): decoded on the workers
    for any `decode` choice but "gpu", which no GPU decoder serves."""
    out = {}
    for key in keys:
        want = decode if isinstance(decode, str) else decode.get(key, "auto")
        if want not in DECODE_CHOICES:
            raise ConfigError(f"decode={want!r} for camera {key!r} is not one of {DECODE_CHOICES}")
        if want == "gpu":
            raise DeviceError(f"decode='gpu' for camera {key!r}, which the dataset stores as images (PNG) in its frame "
                              "tables, not as video: NVDEC has no stream to decode; use decode='auto' for it (its "
                              f"images decode on the CPU, the rest on the GPU), e.g. decode={{'{key}': 'auto', ...}}")
        out[key] = RouteChoice(TABLE_IMAGES, "stored as images in the frame tables (lerobot's use_videos=False): "
                                                  "each row's image decoded on the workers")
    return out


def measured_speed(cfg: LoaderConfig, deltas: Mapping[str, Any], dali_version: str):
    """For `decode="auto"`: camera key -> (why a measurement says torchcodec beats NVDEC for its samples, or None;
    a note otherwise), from `decode.speed`: one clip per sample or joined streams (`nvdec_joins`), frames per
    sample (`deltas`)."""
    joined = nvdec_joins(cfg)

    def measured(key: str) -> tuple[str | None, str]:
        return gpu_slower(dali_version, joined, len(deltas.get(key, (0,)))), unmeasured(joined)

    return measured
