"""`dali-stream inspect`: a dataset or a mixture summarised (episodes, cameras, codecs, the route each camera takes
here, the settings a loader derives on it)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def cmd_inspect(args: argparse.Namespace) -> int:
    from ..config import LoaderConfig
    from ..decode.frame_cache import room_warning
    from ..decode.node import Node
    from ..loader.memory import available_bytes
    from ..loader.routing import camera_routes
    from ..loader.source_setup import open_source, windows
    from ..meta.dataset import DatasetMeta
    from ..mixture import is_mixture_file
    from .bench_cache import decoded_bytes
    from .flags import require_at_least
    from .transcode import nvdec_hint

    require_at_least(args, nodes=1)
    if is_mixture_file(args.dataset):
        return _inspect_mixture(args)
    meta = DatasetMeta.open(args.dataset, revision=args.revision)
    node = Node.probe()
    cfg = LoaderConfig()  # the routes a loader with the default settings takes here (`loader.routing`)
    catalog, _ = open_source(meta, cfg)
    chosen = camera_routes(cfg, catalog, node, windows(catalog, cfg)[0])
    routes, named = chosen.routes, {k: r.name for k, r in chosen.routes.items()}
    kept = _kept_ops(args, routes, node)  # the size the decoded-frame cache keeps frames at (None: as decoded)
    report = {
        "source": meta.source,
        "revision": args.revision,
        "codebase_version": meta.info.get("codebase_version"),
        "fps": meta.fps,
        "episodes": meta.num_episodes,
        "frames": meta.total_frames,
        "tasks": len(meta.tasks),
        "cameras": {**{k: {"codec": c.codec, "height": c.height, "width": c.width, "pix_fmt": c.pix_fmt,
                           "route_auto": named[k], "reason": chosen.reasons[k]} for k, c in meta.cameras.items()},
                    **{k: {"codec": "image", "height": meta.image_size(k)[0], "width": meta.image_size(k)[1],
                           "pix_fmt": None, "route_auto": named[k], "reason": chosen.reasons[k]}
                       for k in meta.image_keys}},  # stored as images in the frame tables
        "table_features": {k: {"dtype": meta.features[k].get("dtype"), "shape": meta.features[k].get("shape")}
                           for k in [*meta.table_keys, *meta.text_keys]},
        # what the decoded-frame cache would hold to keep every frame (frame_cache_bytes, docs/memory.md)
        "decoded_bytes": decoded_bytes(meta, kept),
        "memory_available_bytes": available_bytes(),  # this node's, now (MemAvailable, or the cgroup's limit's room)
        "disk_tier": _disk_need(meta, catalog.lengths, args.nodes),  # what disk_cache_dir holds (docs/remote.md)
        "data_layout": _data_layout(meta),  # row groups per episode, or one for many (docs/memory.md)
        "derived": _derived(meta, routes, node),
        "nvdec_hint": nvdec_hint(meta.source, {k: c.codec for k, c in meta.cameras.items() if c.depth is None},
                                 node.gpu if node.gpus else None),
    }
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from rich.console import Console

    from .diagnose_report import keyed_table

    console = Console()
    at = f" @ {args.revision}" if args.revision else ""
    console.print(f"[bold]{meta.source}{at}[/] LeRobot {report['codebase_version']}: {meta.num_episodes} episodes, "
                  f"{meta.total_frames} frames at {meta.fps:g} fps, {len(meta.tasks)} tasks")
    table = keyed_table(("camera", "codec", "size", "decode route (auto, this node)", "why"), list(report["cameras"]))
    for k, c in report["cameras"].items():
        table.add_row(k, c["codec"], f"{c['width']}x{c['height']}", c["route_auto"], c["reason"])
    console.print(table)
    if report["nvdec_hint"]:
        console.print(report["nvdec_hint"], markup=False)
    if report["cameras"]:
        sized = " at {1}x{2}".format(*kept.out_shape(0, 0)) if kept else \
            " (as decoded: batches on this node's GPU resize there)" if _kept_ops(args) else ""
        free, need = report["memory_available_bytes"], report["decoded_bytes"]
        room = "" if free is None else f"; this node has {free / 2**30:.2f} GiB of memory available now" + (
            ": more than that, give frame_cache_bytes what fits (per rank) and frame_cache_dir a local drive for the "
            "rest" if room_warning(need, need, 1, free) else "")
        console.print(f"decoded{sized}, every frame of every camera takes {need / 2**30:.2f} GiB: frame_cache_bytes "
                      f"(and frame_cache_dir) that large decode each frame once, in epoch 1{room}")
    disk = report["disk_tier"]
    if disk["stored_bytes"] is None:
        console.print(f"the store does not say how large data/ and videos/ are ({disk['why']})")
    else:
        console.print(f"data/ and videos/ take {_size(disk['stored_bytes'])} on the store: a node's disk_cache_dir "
                      f"holds up to that (partition='rank': each epoch's share is new); with partition='node' over "
                      f"{disk['nodes']} node(s), ~{_size(disk['per_node_bytes'])} a node (its share of the frames: "
                      f"{disk['node_share']:.3f})")
    layout = report["data_layout"]
    if layout["one_group_files"]:
        console.print(f"{layout['one_group_files']} of the {layout['looked_at']} data files looked at (of "
                      f"{layout['data_files']}) hold one parquet row group for many episodes (lerobot's dataset tools "
                      f"write them so): each group is decoded once a node into table_cache_dir, about "
                      f"{_size(layout['decoded_bytes'])} for all files (docs/memory.md#row-groups-holding-many-episodes)")
    table = keyed_table(("feature", "dtype", "shape", "names"), list(report["table_features"]))
    for k, f in report["table_features"].items():  # state, action and the index columns, as lerobot's features
        names = meta.features[k].get("names")
        shown = ", ".join(map(str, names)) if isinstance(names, list) else "" if names is None else str(names)
        table.add_row(k, str(f["dtype"]), str(tuple(f["shape"] or ())), shown)
    console.print(table)
    table = keyed_table(("derived setting", "value", "what it is", "why (defaults, one rank, this node)"),
                        list(report["derived"]))
    table.columns[1].max_width = 24  # a list of cameras folds rather than squeezing what and why
    for name, d in report["derived"].items():
        value = d["value"]  # cameras as a list that wraps between names
        shown = ", ".join(map(str, value)) or "none" if isinstance(value, (tuple, list)) else str(value)
        table.add_row(name, shown, str(d["what"]), str(d["why"]))
    console.print(table)
    return 0


def _size(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


def _disk_need(meta, lengths, nodes: int) -> dict[str, Any]:
    """What the node-local disk tier holds of the dataset: the bytes of its data/ and videos/ on the store, and
    with partition='node' over `nodes` nodes the largest node's part, by its share of the frames (nodes' shares are
    balanced by frames, `plan.partition.partition_by_node`)."""
    import posixpath

    import numpy as np

    from ..plan.partition import partition_by_node

    lengths = np.asarray(lengths, dtype=np.int64)
    shares = partition_by_node(lengths, lengths, nodes, 1, 0, 0) if nodes <= np.count_nonzero(lengths) else []
    share = max((float(lengths[s].sum()) for s in shares), default=float(lengths.sum())) / max(1, int(lengths.sum()))
    fs, root = meta.data_fs, meta.data_root
    try:
        stored = sum(int(fs.du(posixpath.join(root, d))) for d in ("data", "videos"))
    except Exception as exc:  # noqa: BLE001 - a store that cannot list folders: said, not fatal
        return {"nodes": nodes, "stored_bytes": None, "per_node_bytes": None, "node_share": share,
                "why": f"{type(exc).__name__}: {exc}"}
    return {"nodes": nodes, "stored_bytes": stored, "per_node_bytes": int(stored * share), "node_share": share}


def _kept_ops(args: argparse.Namespace, routes: dict[str, Any] | None = None, node=None):
    """The image ops `--resize`/`--crop` give, whose output size the decoded-frame cache keeps frames at (None:
    neither, or, given the `routes` and `node`, where a loader keeps them as decoded: `Resolved.shaped_on_workers`)."""
    from ..config import LoaderConfig
    from ..graph.imageops import ImageOps
    from ..loader.resolve import Facts, resolve

    resize, crop = getattr(args, "resize", None), getattr(args, "crop", None)
    if not (resize or crop):
        return None
    if routes is not None and node is not None and not resolve(
            LoaderConfig(resize=resize, crop=crop, frame_cache_bytes=1),
            Facts(routes=routes, cuda_batches=node.gpus > 0)).shaped_on_workers:
        return None
    return ImageOps.make(resize=resize, crop=crop)


def _derived(meta, routes: dict[str, Any], node) -> dict[str, dict[str, Any]]:
    """The settings a loader with the default settings derives on this dataset and node, one rank
    (`loader.resolve`): what each is and why."""

    from ..config import LoaderConfig
    from ..decode.frame_cache import frame_bytes
    from ..decode.node import rank_cores
    from ..loader.resolve import Facts, resolve
    from ..source.local_disk import user_cache_dir
    from ..source.storage import is_local

    facts = Facts(routes=routes, gpu=node.gpu is not None, gpu_engines=node.gpu.nvdec_engines if node.gpu else None,
                  cuda_batches=node.gpus > 0, local=is_local(meta.data_fs), episodes=meta.num_episodes,
                  cpu_count=os.cpu_count() or 1, rank_cores=rank_cores(),
                  frame_bytes={k: frame_bytes(c.height, c.width) for k, c in meta.cameras.items() if k in routes},
                  user_cache_dir=user_cache_dir())
    return resolve(LoaderConfig(), facts).describe()


LAYOUT_FILES = 16  # data files whose footers inspect reads (evenly spread over the dataset's)


def _data_layout(meta) -> dict[str, Any]:
    """How the data files hold their episodes' rows, from the footers of up to `LAYOUT_FILES` of them: `one_group_files`
    hold one row group for many episodes (lerobot's dataset tools write them so: `fetch.decoded_groups` decodes each
    once a node into table_cache_dir, `decoded_bytes` of them, scaled to all files); the others a group per episode."""
    import numpy as np

    from ..source.storage import parquet_errors, parquet_file

    positions = np.flatnonzero(np.asarray(meta.lengths) > 0)
    where = np.stack([meta.episodes["data/chunk_index"][positions], meta.episodes["data/file_index"][positions]], 1)
    _, first, counts = np.unique(where, axis=0, return_index=True, return_counts=True)
    files = {meta.data_file(int(positions[i])): int(n) for i, n in zip(first, counts)}  # data file -> its episodes
    paths = sorted(files)
    looked = [paths[int(i)] for i in np.unique(np.linspace(0, len(paths) - 1, min(LAYOUT_FILES, len(paths))).round())] \
        if paths else []
    one_group, decoded = 0, 0
    for path in looked:
        with parquet_errors(path):
            md = parquet_file(meta.data_fs, path).metadata
        if files[path] > 1 and md.num_row_groups < files[path]:
            one_group += 1
            decoded += sum(md.row_group(g).total_byte_size for g in range(md.num_row_groups))
    scale = len(paths) / max(1, len(looked))
    return {"data_files": len(paths), "looked_at": len(looked), "one_group_files": one_group,
            "decoded_bytes": int(decoded * scale)}


def _inspect_mixture(args: argparse.Namespace) -> int:
    """`inspect MIXTURE.json`: each member (episodes, frames, fps, weight, its cameras' routes alone), and the
    mixture's keys (which members lack them, padded vectors, sizes, the route each camera key takes here)."""
    from ..config import LoaderConfig
    from ..decode.node import Node
    from ..loader.routing import camera_routes
    from ..loader.source_setup import epoch_shares, windows
    from ..meta.catalog import Catalog
    from ..mixture import load_mixture
    from ..plan.selection import select

    if args.revision:
        print("dali-stream inspect: error: --revision applies to one dataset; a mixture file gives each member its "
              "own \"revision\"", file=sys.stderr)
        return 2
    catalog = Catalog.open(load_mixture(args.dataset), select)
    node = Node.probe()
    names = [m.name for m in catalog.members]
    # as a loader with decode="auto" routes them (each member alone, then one route per key)
    cfg = LoaderConfig()
    chosen = camera_routes(cfg, catalog, node, windows(catalog, cfg)[0])
    routes, alone = chosen.routes, chosen.members
    members: dict[str, dict[str, Any]] = {}
    for m, part in zip(catalog.members, epoch_shares(catalog).tolist()):
        members[m.name] = {"source": m.meta.source, "weight": m.weight, "share": m.share, "epoch_share": part,
                           "episodes": len(m.episodes),
                           "frames": m.frames, "fps": m.meta.fps,
                           "cameras": {key: {"own_key": m.own[key], "codec": m.camera(key).codec,
                                             "height": m.camera(key).height, "width": m.camera(key).width,
                                             "route_auto": alone[m.name][key].name}
                                       for key in catalog.video_keys if key in m.own}}
    keys: dict[str, dict[str, Any]] = {}
    for key, f in catalog.fields.items():
        keys[key] = {"camera": f.visual, "dtype": f.dtype, "shape": list(f.shape),
                     "lacking": [names[i] for i, o in enumerate(f.own) if o is None],
                     "renamed": {names[i]: o for i, o in enumerate(f.own) if o is not None and o != key},
                     **({"sizes": {names[i]: list(hw) for i, hw in f.sizes.items()}} if f.visual else
                        {"padded": f.padded, "lengths": {names[i]: list(s) for i, s in enumerate(f.own_shapes)
                                                         if s is not None}}),
                     **({"route_auto": routes[key].name, "reason": chosen.reasons[key]} if f.visual else {})}
    report = {"source": args.dataset, "members": members, "samples_per_epoch": catalog.mixture.samples_per_epoch
              if catalog.mixture else None, "episodes": int(sum(len(m.episodes) for m in catalog.members)),
              "frames": int(sum(m.frames for m in catalog.members)), "keys": keys}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    from rich.console import Console

    from .diagnose_report import keyed_table

    console = Console()
    console.print(f"[bold]{args.dataset}[/]: a mixture of {len(members)} datasets, {report['episodes']} episodes, "
                  f"{report['frames']} frames")
    table = keyed_table(("member", "source", "weight", "epoch share", "episodes", "frames", "fps",
                         "cameras (route alone)"),
                        list(members))
    for name, row in members.items():
        cams = ", ".join(f"{k.rsplit('.', 1)[-1]}: {c['codec']} {c['width']}x{c['height']} -> {c['route_auto']}"
                         for k, c in row["cameras"].items())
        table.add_row(name, row["source"], f"{row['weight']:g}" if row["share"] is None else "-",
                      f"{row['epoch_share']:.3f}", str(row["episodes"]), str(row["frames"]),
                      f"{row['fps']:g}", cams)
    console.print(table)
    table = keyed_table(("key", "dtype, shape", "members lacking it", "route (auto, this node)"), list(keys))
    for key, k in keys.items():
        shape = f"{k['dtype']} {k['shape']}" + (" (padded)" if k.get("padded") else "")
        table.add_row(key, shape, ", ".join(map(str, k["lacking"])) or "-", str(k.get("route_auto", "")))
    console.print(table)
    return 0
