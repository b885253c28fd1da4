"""The DALI pipeline: one external source feeding decoders, layout and dtype ops, ending in named outputs.

The graph's batch is the batch's samples in groups (`graph.batches`, `graph.joined`). Per camera: DALI-routed
cameras decode one stream per group with `fn.decoders.video` (device "mixed" for NVDEC, "cpu" for DALI's CPU
decoder) at its distinct frame indices, laid out member by member, step by step by `fn.sequence_rearrange`;
cameras decoded on the workers (torchcodec, or DALI's CPU decoder there for the decoded-frame cache,
`graph.dali_on_workers`) arrive as decoded frames in that layout (unless they skip the graph as host frames,
`graph.host`: `routes` then leaves them out), and cameras of the open-decoder engine (`decode.engine`) through an
external source of their own per engine route, on the device the engine decoded them on (the GPU for nvdec-open:
no host copy). Both then get the `ImageOps` (resize, centre crop, CHW layout,
uint8 or float32 in [0, 1] or mean/std-normalised) on the device they are on: (members x steps, C, H, W) per
group ((.., H, W, C) with `channels_last`), which the loader views as (samples, steps, C, H, W), or (samples,
C, H, W) for a single frame as lerobot squeezes it. Tabular outputs, (members, ...) per group, pass straight
through.
"""

from __future__ import annotations

from typing import Any, Callable, Collection, Mapping, Sequence

from ..decode.route import Route
from .imageops import ImageOps
from .sources import Output

_DALI_TYPES = {"uint8": "UINT8", "int32": "INT32", "int64": "INT64", "float32": "FLOAT", "float64": "FLOAT64",
               "bool": "BOOL"}


def video_decoder(encoded, frames, route: Route):
    """DALI's video decoder for `route` (a route decoded in DALI: nvdec or dali-cpu) at per-sample frame indices.

    `pad_mode="none"`: an index past the stream's frames is an error (DALI's default "constant" returns a
    black frame silently); `decode.errors.explain` names the camera and episode. `affine=False` on NVDEC: DALI
    would pin the decoder's threads to the CPU cores near the GPU of the same index among all GPUs, so with
    CUDA_VISIBLE_DEVICES narrowed to one GPU per rank every rank's threads would share GPU 0's socket."""
    from nvidia.dali import fn

    if route.on_gpu:
        return fn.decoders.video(encoded, frames=frames, device="mixed", pad_mode="none", affine=False)
    return fn.decoders.video(encoded, frames=frames, device="cpu", pad_mode="none")


def build_pipeline(outputs: Sequence[Output], routes: Mapping[str, Route],
                   source: Callable, batch_size: int, num_threads: int, device_id: int | None,
                   image_ops: ImageOps, prefetch_queue_depth: int = 2, on_gpu: bool = False,
                   augment: Callable | None = None, engine_outputs: Mapping[Route, Sequence[Output]] | None = None,
                   engine_sources: Mapping[Route, Callable] | None = None,
                   engine_streams: Mapping[Route, Any] | None = None, shaped: Collection[str] = ()):
    """Build (not yet run) the pipeline; returns (pipeline, output names in order).

    `on_gpu`: batches land on the CUDA device `device_id`, so CPU-decoded frames and tables move there inside
    the graph (image ops then run on the GPU, and the iterator hands over GPU tensors). `augment(video, key,
    rand)` (see `StreamLoader`) runs on each camera's decoded frames before resize/crop/normalise.
    `engine_outputs[route]`, fed by `engine_sources[route]` (called with the same batch info as `source`): the
    frames of an open-decoder engine route (`decode.engine`), on the GPU for nvdec-open. DALI copies GPU frames on
    `engine_streams[route]`, the engine's hand-off stream (a torch.cuda.Stream the frames were joined on), without
    blocking and without the legacy default stream: the engine's `hand_over` keeps their memory from reuse until
    the copy, queued on that stream, has run. `shaped`: cameras whose frames come resized and cropped (the workers
    did it before the decoded-frame cache kept them, `graph.resizer`): the graph does neither again."""
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    names: list[str] = []
    # float32 without mean/std is lerobot's x / 255, a division: crop_mirror_normalize multiplies by 1 / std, which
    # rounds about half the byte values one ulp away from it (and from the host frames, `graph.host`). The division
    # is a pass of its own: on one CPU thread 1.36 ms a 480p frame against 0.77 for crop_mirror_normalize straight
    # to float32 (benchmarks/layout_cost.py, results/cpu-2core-480p/layout_cost-division.json).
    divide = False
    if image_ops.mean is not None and image_ops.std is not None:  # in pixel units: (x - 255 mean) / (255 std)
        mean, std = [m * 255.0 for m in image_ops.mean], [s * 255.0 for s in image_ops.std]
    else:
        mean, std, divide = [0.0], [1.0], image_ops.dtype == "float32"
    out_type = types.FLOAT if image_ops.dtype == "float32" else types.UINT8
    # The dynamic executor hands outputs to torch without a copy (the static one copied 118 MB of float32 per
    # 480p batch on the consumer's thread: 3.6x its CPU time, half the throughput on 2 cores). Its host memory
    # stays bounded through DALI_MALLOC_POOL_THRESHOLD, which dali_stream sets on import (see __init__).
    pipe = Pipeline(batch_size=batch_size, num_threads=num_threads, device_id=device_id,
                    prefetch_queue_depth=prefetch_queue_depth, exec_dynamic=True)
    with pipe:
        fed = fn.external_source(
            source=source, num_outputs=len(outputs), batch=True, batch_info=True,
            dtype=[getattr(types, _DALI_TYPES[o.dtype.name]) for o in outputs], ndim=[o.ndim for o in outputs],
            layout=["FHWC" if o.kind == "pixels" else "" for o in outputs],
        )
        fed = fed if isinstance(fed, (list, tuple)) else [fed]
        by_name = dict(zip((o.name for o in outputs), fed))
        for route, outs in (engine_outputs or {}).items():
            gpu = route.on_gpu
            frames = fn.external_source(
                source=(engine_sources or {})[route], num_outputs=len(outs), batch=True, batch_info=True,
                device="gpu" if gpu else "cpu", dtype=[types.UINT8] * len(outs), ndim=[4] * len(outs),
                layout=["FHWC"] * len(outs),
                **({"cuda_stream": (engine_streams or {})[route].cuda_stream} if gpu else {}))
            frames = frames if isinstance(frames, (list, tuple)) else [frames]
            by_name.update(zip((o.name for o in outs), frames))
        results = []
        for key, route in routes.items():
            if f"{key}@pixels" in by_name:  # decoded on the workers (torchcodec, or DALI's CPU decoder there)
                video = by_name[f"{key}@pixels"]
            elif f"{key}@decoded" in by_name:
                video = by_name[f"{key}@decoded"]
            else:
                video = video_decoder(by_name[f"{key}@encoded"], by_name[f"{key}@frames"], route)
                video = fn.sequence_rearrange(video, new_order=by_name[f"{key}@order"])  # distinct -> steps
            if on_gpu and not route.on_gpu:
                video = video.gpu()
            if augment is not None:
                video = augment(video, key, by_name[f"{key}@rand"])
            if image_ops.resize and key not in shaped:
                video = fn.resize(video, size=list(image_ops.resize), antialias=True)
            crop = {"crop": list(image_ops.crop)} if image_ops.crop and key not in shaped else {}
            layout = "FHWC" if image_ops.channels_last else "FCHW"  # channels_last: the loader permutes a view
            if divide:  # laid out as they are (uint8: what decoding and resize give), then divided into float32
                video = fn.crop_mirror_normalize(video, mean=mean, std=std, output_layout=layout, **crop,
                                                 dtype=types.FLOAT if augment is not None else types.UINT8)
                video = video / types.Constant(255.0, dtype=types.FLOAT)
            else:
                video = fn.crop_mirror_normalize(video, mean=mean, std=std, output_layout=layout, dtype=out_type,
                                                 **crop)
            results.append(video)
            names.append(key)
        for o in outputs:
            if o.kind == "table":
                results.append(by_name[o.name].gpu() if on_gpu else by_name[o.name])
                names.append(o.key)
        pipe.set_outputs(*results)
    return pipe, names


def decode_once(data: bytes, frames: list[int], route: Route, device_id: int = 0):
    """Decode `frames` of one encoded stream through DALI alone (a route decoded in DALI); (N, H, W, 3) uint8.

    A one-sample pipeline for probes such as `dali-stream diagnose --decode-test`, not for training.
    """
    import numpy as np
    from nvidia.dali import fn, types
    from nvidia.dali.pipeline import Pipeline

    encoded = np.frombuffer(data, dtype=np.uint8)
    wanted = np.asarray(frames, dtype=np.int32)
    gpu = route.on_gpu
    pipe = Pipeline(batch_size=1, num_threads=1, device_id=device_id if gpu else None, prefetch_queue_depth=1)
    with pipe:
        enc, idx = fn.external_source(source=lambda: ([encoded], [wanted]), num_outputs=2, batch=True,
                                      dtype=[types.UINT8, types.INT32])
        pipe.set_outputs(video_decoder(enc, idx, route))
    pipe.build()
    (out,) = pipe.run()
    if gpu:
        out = out.as_cpu()
    return np.asarray(out.at(0))
