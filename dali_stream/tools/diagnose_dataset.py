"""The dataset half of `dali-stream diagnose`: per camera, the stream's facts, the route, and decode tests.

Imported only after the software probes ran, so it may import the project's modules; each step still runs
under a guard that turns a failure into a reported layer (see `dali_stream.tools.diagnose`).
"""

from __future__ import annotations

import time
from typing import Any

from ..decode.route import DALI_CPU, DEPTH, NVDEC, TORCHCODEC, route_named
from ..fetch.mp4index import LFS_MAGIC

_FIXES = {
    "missing": "download the file (huggingface_hub snapshot_download / hf download) or fix the dataset path",
    "placeholder": "the file is a Git LFS pointer, not video: run `git lfs pull` in the dataset, or download it "
                   "with huggingface_hub instead of git clone",
    "empty": "the file is empty (0 bytes), a download or copy cut short: re-download it (huggingface_hub "
             "snapshot_download / hf download)",
    "not-mp4": "the file holds other bytes than an MP4's: re-download it, or re-encode the camera with lerobot",
    "container": "the MP4 is damaged or truncated: re-download it, or re-encode the camera with lerobot",
    "bitstream": "the encoded frames are corrupt: re-download the file, or re-encode the camera with lerobot",
    "codec-unsupported": "use decode='auto' (it picks a decoder this node has), or re-encode the camera as h264",
    "nvdec-unavailable": "in a container set NVIDIA_DRIVER_CAPABILITIES=compute,video,utility (or all); on a MIG "
                         "slice without NVDEC use a +me profile or a larger slice",
    "dali-no-cuda": "DALI sees no CUDA device: check the driver (nvidia-smi), CUDA_VISIBLE_DEVICES, and that "
                    "nvidia-dali-cuda120 (not the CPU-only build) is installed",
    "torchcodec-load": "torchcodec or its FFmpeg libraries do not load: apt-get install -y ffmpeg (FFmpeg 4-7), "
                       "and a torchcodec matching your torch (0.13 for torch 2.13)",
    "metadata": "the dataset's meta files are unreadable: re-download meta/",
    "disagrees": "meta/info.json describes the camera otherwise than its file is: correct info.json's feature "
                 "(video.codec, video.fps, shape) to what the file holds, or re-download meta/",
    "dali-import": "nvidia.dali does not import: pip install nvidia-dali-cuda120",
    "av-import": "PyAV (which decodes depth cameras and images stored in the tables) does not import: pip install "
                 "'av>=14.2'",
    "wrong-frame": "a decoder returned another frame than asked: report it with `dali-stream diagnose --json`",
    "tables": "the frame tables cannot be read as meta/info.json describes them: re-download data/ and meta/",
    "size": "meta/info.json's shape for the camera disagrees with its images: re-download meta/ and data/",
    "depth-images": "the loader reads depth from lerobot's depth videos: convert the dataset to videos with "
                    "lerobot-edit-dataset --operation.type convert_image_to_video, or leave the camera out",
}


def _stream_facts(fs, path: str, max_packets: int = 600) -> dict[str, Any]:
    import av

    with fs.open(path, "rb") as raw:
        head = raw.read(64)
        if head.startswith(LFS_MAGIC):
            return {"layer": "placeholder", "error": f"{path} is a Git LFS pointer, not an MP4: first bytes "
                                                     f"{head[:48]!r}"}
        if not head:
            return {"layer": "empty", "error": f"{path} is empty (0 bytes)"}
        if b"ftyp" not in head[:12]:
            return {"layer": "not-mp4", "error": f"{path} is not an MP4: first bytes {head[:48]!r}"}
        raw.seek(0)
        try:
            container = av.open(raw)
        except Exception as exc:
            return {"layer": "container", "error": f"{path} is not a readable MP4: {exc}"}
        with container:
            stream = container.streams.video[0]
            ctx = stream.codec_context
            keyframes, max_pts, bframes, n = [], None, False, 0
            for pkt in container.demux(stream):
                if pkt.pts is None or pkt.size == 0:
                    continue
                if pkt.is_keyframe:
                    keyframes.append(n)
                if max_pts is not None and pkt.pts < max_pts:
                    bframes = True  # a frame shown before one already decoded: reordering
                max_pts = pkt.pts if max_pts is None else max(max_pts, pkt.pts)
                n += 1
                if n >= max_packets:
                    break
            gaps = [b - a for a, b in zip(keyframes, keyframes[1:])]
            return {"decoder": stream.codec_context.name, "profile": ctx.profile, "pix_fmt": ctx.pix_fmt,
                    "width": ctx.width, "height": ctx.height,
                    "fps": round(float(stream.average_rate), 3) if stream.average_rate else None,
                    "gop": max(set(gaps), key=gaps.count) if gaps else None, "b_frames": bframes,
                    "packets_scanned": n}


def disagreements(entry: dict[str, Any], declared, fps: float) -> list[str]:
    """Where the stream facts read from a camera's file (`entry`) contradict meta/info.json (`declared`, its
    `StreamFormat`; `fps`, the dataset's): the loader would route, plan or lay out the camera on the wrong values."""
    from ..fetch.indexes import rate_fits
    from ..meta.dataset import normalise_codec

    said = []
    codec = normalise_codec(entry.get("decoder") or "")
    if codec and declared.codec != "unknown" and codec != declared.codec:  # "unknown": info.json names none
        said.append(f"info.json says codec {declared.codec!r}, the file holds {codec!r}")
    if entry.get("fps") and not rate_fits(entry["fps"], fps):  # the loader's rule (`fetch.indexes.check_rate`)
        said.append(f"info.json says fps {fps:g}, the file runs at {entry['fps']:g}")
    if declared.width and (entry.get("width"), entry.get("height")) != (declared.width, declared.height):
        said.append(f"info.json says {declared.height}x{declared.width}, the file is "
                    f"{entry.get('height')}x{entry.get('width')}")
    return said


def _decode_tests(meta, pos: int, key: str, fmt, software: dict, node, painted: bool) -> dict[str, Any]:
    """Cut the episode's segment and decode its middle frame through each route this node has."""
    import numpy as np

    from ..decode.cpu import torchcodec_frames
    from ..decode.routes import DALI_CPU_CODECS
    from ..fetch.segments import cut_segment

    cam = meta.cameras[key]
    start = float(cam.from_timestamp[pos])
    length = int(meta.lengths[pos])
    frame = length // 2
    try:
        seg = cut_segment(meta.data_fs, meta.video_file(pos, key), start, float(cam.to_timestamp[pos]),
                          episode=meta.episode_index(pos), camera=key, codec=cam.codec, tolerance_s=1e-3,
                          last_frame_s=start + (length - 1) / meta.fps)
        idx = seg.frame_indices(np.array([start + frame / meta.fps]), 1e-3, f"frame {frame}")
    except Exception as exc:
        return {"segment": {"ok": False, "layer": "container", "error": str(exc)[:600]}}
    from .sample_defaults import painted_offset

    expect = [meta.episode_index(pos) + painted_offset(meta.info), frame]
    results: dict[str, Any] = {"segment": {"ok": True, "bytes": seg.nbytes, "episode": expect[0], "frame": frame}}

    def attempt(route: str, run, read=None) -> None:
        """`run()`'s frames through `route`; `read(frame)` -> their painted ids (default: RGB `read_ids`)."""
        t0 = time.perf_counter()
        try:
            pixels = run()
        except Exception as exc:
            results[route] = {"ok": False, "layer": "bitstream", "error": f"{type(exc).__name__}: {exc}"[:600]}
            return
        out = {"ok": True, "seconds": round(time.perf_counter() - t0, 4), "shape": list(pixels.shape)}
        if painted:
            from .paint import UnreadableIds, read_ids

            try:
                out["painted_ids"] = list((read or read_ids)(pixels[0]))
            except UnreadableIds as exc:
                out["painted_ids"] = None
                out.update(ok=False, ids_match=False, layer="wrong-frame", error=f"asked for (episode, frame) "
                           f"{expect}: {exc}")
                results[route] = out
                return
            out["ids_match"] = out["painted_ids"] == expect
            if not out["ids_match"]:
                out.update(ok=False, layer="wrong-frame",
                           error=f"asked for (episode, frame) {expect}, the image shows {out['painted_ids']}")
        results[route] = out

    if fmt.depth:  # its codes through PyAV, the one route a depth camera takes; ids painted as code values
        from ..decode.depth import depth_codes
        from .paint import DEPTH_SPAN, depth_ids

        expect[:] = [i % DEPTH_SPAN for i in expect]
        attempt(DEPTH.name, lambda: depth_codes(seg, idx), depth_ids)
        return results
    if software["torchcodec"]["ok"]:
        attempt(TORCHCODEC.name, lambda: torchcodec_frames(seg, idx))
    else:
        results[TORCHCODEC.name] = {"ok": False, "layer": "torchcodec-load", "error": software["torchcodec"]["error"]}
    if not software["nvidia.dali"]["ok"]:
        results[DALI_CPU.name] = {"ok": False, "layer": "dali-import", "error": software["nvidia.dali"]["error"]}
    elif cam.codec in DALI_CPU_CODECS:
        from ..graph.pipeline import decode_once

        attempt(DALI_CPU.name, lambda: decode_once(seg.data, list(idx), DALI_CPU))
    else:
        results[DALI_CPU.name] = {"ok": None, "layer": "codec-unsupported",
                               "error": f"DALI's CPU decoder has no {cam.codec} (only vp8/vp9/mjpeg)"}
    refused = node.nvdec_refuses(fmt)
    if software["nvidia.dali"]["ok"] and refused is None:
        from ..graph.pipeline import decode_once

        attempt(NVDEC.name, lambda: decode_once(seg.data, list(idx), NVDEC))
    elif node.gpus == 0:
        results[NVDEC.name] = {"ok": None, "layer": "dali-no-cuda", "error": refused}
    elif node.nvdec_problem:
        results[NVDEC.name] = {"ok": None, "layer": "nvdec-unavailable", "error": refused}
    else:
        results[NVDEC.name] = {"ok": None, "layer": "codec-unsupported", "error": refused}
    return results


def probe_mixture(path: str, software: dict, node, decode_test: bool) -> dict[str, Any]:
    """A mixture file (`dali_stream.mixture.load_mixture`): each member probed as a dataset (`probe_dataset`), its
    cameras reported as "<member>/<camera key>", and the route each mixture key takes here (one per key, from the
    members' own: `decode.routes.mixture_routes`)."""
    from ..decode.routes import RouteChoice, mixture_routes
    from ..meta.dataset import DatasetMeta
    from ..mixture import load_mixture
    from ..source.storage import RemoteOptions

    try:
        mixture = load_mixture(path)
    except Exception as exc:
        return {"ok": False, "layer": "metadata", "error": f"{type(exc).__name__}: {exc}", "fix": _FIXES["metadata"]}
    members, cameras, choices = {}, {}, []
    for member in mixture.members:
        report = probe_dataset(member.source, software, node, decode_test, lambda m=member: DatasetMeta.open(
            m.source, m.data_files_root, remote=RemoteOptions(dict(m.storage_options or {})), revision=m.revision))
        if not report["ok"]:
            return {**report, "error": f"mixture member {member.name!r}: {report['error']}"}
        members[str(member.name)] = {k: report[k] for k in ("source", "codebase_version", "episodes", "frames", "fps")}
        members[str(member.name)]["weight"] = member.weight
        mine = {}
        for key, cam in report["cameras"].items():
            to = member.mixture_key(key)
            if to is None:
                continue
            cameras[f"{member.name}/{key}"] = {**cam, "mixture_key": to}
            mine[to] = RouteChoice(route_named(cam["route"]), cam["reason"])  # a member's report: names
        choices.append(mine)
    keys = list(dict.fromkeys(k for mine in choices for k in mine))
    routes = {k: {"route": c.route.name, "reason": c.reason} for k, c in mixture_routes(choices, mixture.names, keys).items()}
    return {"ok": True, "source": path, "codebase_version": "mixture", "members": members,
            "episodes": sum(m["episodes"] for m in members.values()),
            "frames": sum(m["frames"] for m in members.values()), "fps": next(iter(members.values()))["fps"],
            "cameras": cameras, "mixture_routes": routes}


def _image_camera(meta, pos: int, key: str, software: dict, decode_test: bool) -> dict[str, Any]:
    """A camera stored as images in the frame tables (lerobot's use_videos=False): its route, and whether the first
    image of the episode at `pos` decodes here at the size info.json declares (`DatasetMeta.image_size`);
    `decode_test`: the decode timed."""
    from ..decode.images import decode_image, image_codec
    from ..errors import DatasetError
    from ..fetch.tables import TableReader
    from ..loader.routing import table_images
    from ..meta.depth import is_depth

    height, width = meta.image_size(key)
    path = meta.data_file(pos)
    choice = table_images("auto", [key])[key]
    entry: dict[str, Any] = {"codec": "image", "file": path, "height": height, "width": width,
                             "route": choice.route.name, "reason": choice.reason}
    if is_depth(meta.features[key]):
        entry.update(layer="depth-images", error=f"{key} stores depth maps as images in the tables, which the loader "
                                                 "does not read")
    elif not software["av"]["ok"]:
        entry.update(layer="av-import", error=software["av"]["error"])
    else:
        where = f"camera {key!r}, episode {meta.episode_index(pos)}, frame 0 ({path})"
        t0 = time.perf_counter()
        try:
            blob = TableReader(meta, ["index", key]).column(pos, key)[0]
            codec = image_codec(blob)
            entry["codec"] = "jpeg" if codec == "mjpeg" else codec or "image"
            t0 = time.perf_counter()
            shape = decode_image(blob, where).shape
        except Exception as exc:  # noqa: BLE001 - reported as the camera's layer
            entry.update(layer="tables" if isinstance(exc, (DatasetError, OSError)) else "bitstream",
                         error=f"{type(exc).__name__}: {exc}"[:600])
        else:
            if decode_test:
                entry["decode_test"] = {choice.route.name: {"ok": True, "seconds": round(time.perf_counter() - t0, 4),
                                                       "shape": list(shape)}}
            if tuple(shape[:2]) != (height, width):
                entry.update(layer="size", error=f"{where}: the image is {shape[1]}x{shape[0]}, meta/info.json "
                                                 f"declares {width}x{height}")
    entry["decodable"] = "layer" not in entry
    if not entry["decodable"]:
        entry["fix"] = _FIXES[entry["layer"]]
    return entry


def probe_dataset(source: str, software: dict, node, decode_test: bool, open_meta=None) -> dict[str, Any]:
    """Per camera: stream facts, auto route and reason, decodability here (and decode tests on request).
    `open_meta()`: how to open the dataset's metadata (default `DatasetMeta.open(source)`)."""
    import numpy as np

    from ..config import LoaderConfig
    from ..decode.node import StreamFormat
    from ..decode.routes import formats_of
    from ..loader.routing import route_chooser
    from ..meta.dataset import DatasetMeta, normalise_codec

    try:
        meta = open_meta() if open_meta is not None else DatasetMeta.open(source)
    except Exception as exc:
        return {"ok": False, "layer": "metadata", "error": f"{type(exc).__name__}: {exc}", "fix": _FIXES["metadata"]}
    pos = int(np.flatnonzero(meta.lengths > 0)[0])
    painted = meta.info.get("robot_type") == "dali_stream_sample"
    declared = formats_of(meta)
    choose = route_chooser(LoaderConfig(), node, {})  # as a loader with the defaults routes it, one frame a sample
    cameras = {}
    for key, cam in meta.cameras.items():
        path = meta.video_file(pos, key)
        entry: dict[str, Any] = {"codec": cam.codec, "file": path}
        if not meta.data_fs.exists(path):
            entry.update(layer="missing", error=f"{path} does not exist")
        else:
            try:
                entry.update(_stream_facts(meta.data_fs, path))
            except Exception as exc:
                entry.update(layer="container", error=f"{path}: {type(exc).__name__}: {exc}")
        # Route on what the file holds (codec, size, pixel format) where it could be read, else on info.json.
        fmt = StreamFormat(normalise_codec(entry["decoder"]) or cam.codec, entry["width"], entry["height"],
                           entry["pix_fmt"], cam.depth is not None) if "width" in entry else declared[key]
        said = disagreements(entry, declared[key], meta.fps) if "layer" not in entry else []
        if said:
            entry.update(layer="disagrees", error=f"{path}: " + "; ".join(said))
        choice = choose({key: fmt}, "auto")[key]
        entry.update(route=choice.route.name, reason=choice.reason)
        if "layer" not in entry:
            if choice.route.depth:
                if not software["av"]["ok"]:
                    entry.update(layer="av-import", error=software["av"]["error"])
            elif choice.route.torchcodec and not software["torchcodec"]["ok"]:
                entry.update(layer="torchcodec-load", error=software["torchcodec"]["error"])
            elif not choice.route.torchcodec and not software["nvidia.dali"]["ok"]:
                entry.update(layer="dali-import", error=software["nvidia.dali"]["error"])
        if decode_test and "layer" not in entry:
            tests = _decode_tests(meta, pos, key, fmt, software, node, painted)
            entry["decode_test"] = tests
            chosen = tests.get(choice.route.name) or tests["segment"]
            if not tests["segment"]["ok"]:
                entry.update(layer="container", error=tests["segment"]["error"])
            elif not chosen.get("ok"):
                entry.update(layer=chosen.get("layer", "bitstream"), error=chosen.get("error"))
        entry["decodable"] = "layer" not in entry
        if not entry["decodable"]:
            entry["fix"] = _FIXES.get(entry["layer"], "see the error")
        cameras[key] = entry
    for key in meta.image_keys:
        cameras[key] = _image_camera(meta, pos, key, software, decode_test)
    from .transcode import nvdec_hint

    return {"ok": True, "source": source, "codebase_version": meta.info.get("codebase_version"),
            "episodes": meta.num_episodes, "frames": meta.total_frames, "fps": meta.fps, "cameras": cameras,
            "nvdec_hint": nvdec_hint(source, {k: c.codec for k, c in meta.cameras.items() if c.depth is None},
                                     node.gpu if node is not None and node.gpus else None)}
