"""DALI decoder failures become named errors: pad_mode="none" on the real DALI CPU route (VP9), and DALI 2.4's
own NVDEC messages (as its mixed backend prints them) mapped to the camera, the episode and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from dali_stream import DecodeError, DeviceError, StreamLoader
from dali_stream.decode.errors import classify, explain_device
from dali_stream.decode.routes import Node, NodeFacts
from dali_stream.graph.pipeline import build_pipeline

TOP, FRONT = "observation.images.top", "observation.images.front"
H100 = Node.from_facts(NodeFacts(8, 8, "2.13.0+cu130", "13.0", "NVIDIA H100 80GB HBM3", (9, 0)))

# Messages as DALI 2.4.0's libdali_operators.so holds them (see `strings`), inside its usual wrapper.
WRAP = ("Critical error in pipeline:\nError in MIXED operator `nvidia.dali.fn.decoders.video`,\nwhich was used in "
        "the pipeline definition with the following traceback:\n\n  File \"x.py\", line 1\n\nencountered:\n\n{}\n"
        "C++ context: [/opt/dali/dali/operators/video/frames_decoder_gpu.cc:300]")
MESSAGES = {
    "too-small": "Video is too small in at least one dimension. Provided size is 128x96",
    "too-large": "Video is too large in at least one dimension. Provided size is 9000x5000",
    "unsupported": "Codec av1 is not supported by NVDEC on this platform.",
    "nvcuvid": "Failed to load libnvcuvid.so, needed by the VideoReader operator. If you are running in a Docker "
               "container, please refer to https://github.com/NVIDIA/nvidia-docker/wiki/Usage",
    "out-of-memory": "CUDA allocation failed: out of memory",
}


@pytest.mark.parametrize("kind", sorted(MESSAGES))
def test_classify_dali_messages(kind):
    failure = classify(WRAP.format(MESSAGES[kind]))
    assert failure.kind == kind and MESSAGES[kind][:30] in failure.line


def _prepared(dataset, routes_override=None, **settings):
    loader = StreamLoader(str(dataset), batch_size=3, episode_pool_size=2, device="cpu", num_workers=0, **settings)
    builder = loader.builder
    if routes_override:
        builder.routes.update(routes_override)
    return loader, builder, builder.build(loader.batch_plan(0, 0))


def _dali_failure(loader, builder, prepared):
    """Run `prepared` through the loader's graph; DALI must refuse an out-of-bounds index: the loader's reading
    of that failure."""
    pipe, _ = build_pipeline(builder.outputs, builder.graph_routes, lambda info: prepared.arrays, 3, 1, None,
                             loader.image_ops)
    pipe.build()
    with pytest.raises(RuntimeError, match=r"out-of-bounds frame index") as raised:
        pipe.run()
    return builder.explain_dali_failure([prepared], raised.value)


def test_out_of_range_index_on_the_dali_cpu_route_raises_and_names_the_sample(small_dataset):
    """pad_mode="none": an index past the segment is an error, never a black frame (one clip per sample)."""
    loader, builder, prepared = _prepared(small_dataset, join_streams=0)
    assert loader.routes[TOP] == "dali-cpu"
    slot = [o.name for o in builder.outputs].index(f"{TOP}@frames")
    seg = loader.store.segment(int(prepared.plan.episodes[1]), TOP)
    bad = len(seg.pts_s) + 3
    prepared.arrays[slot][1] = np.array([bad], dtype=np.int32)
    err = _dali_failure(loader, builder, prepared)
    assert isinstance(err, DecodeError)
    assert f"frame {bad} was asked for" in str(err) and f"episode {seg.episode}, camera '{TOP}'" in str(err)
    assert "frames in the clip of" in str(err) and "re-download the file" in str(err)


def test_out_of_range_index_in_a_joined_stream_names_its_episodes(small_dataset):
    """The same on a joined stream (graph/joined.py): the error names every episode the stream joins, and since
    each of their segments decodes apart, says joining is what failed and how to turn it off."""
    loader, builder, prepared = _prepared(small_dataset, join_streams=1)
    assert prepared.members == 3  # one group: the batch's 3 clips in one stream
    frames = prepared.arrays[[o.name for o in builder.outputs].index(f"{TOP}@frames")]
    bad = int(frames[0].max()) + 50
    frames[0] = np.append(frames[0], bad).astype(np.int32)
    err = _dali_failure(loader, builder, prepared)
    episodes = sorted({int(loader.meta.episode_index(int(p))) for p in prepared.plan.episodes})
    assert isinstance(err, DecodeError)
    assert f"joining the clips of episodes {episodes}, camera '{TOP}'" in str(err), err
    assert f"frame {bad} was asked for" in str(err) and "join_streams=0" in str(err)


def test_nvdec_refusal_names_the_camera_whose_stream_is_too_small(small_dataset):
    """A VP9 camera of 128x96 on the NVDEC route (info.json claimed a larger size): the too-small message
    names that camera, its real size and the way out."""
    loader, builder, prepared = _prepared(small_dataset, {TOP: "nvdec"})
    exc = RuntimeError(WRAP.format(MESSAGES["too-small"]))
    err = builder.explain_dali_failure([prepared], exc, H100)
    assert isinstance(err, DeviceError)
    text = str(err)
    assert f"refused camera '{TOP}'" in text and "vp9 128x96" in text and "below NVDEC's minimum 128x128" in text
    assert f"decode={{'{TOP}': 'cpu'}}" in text and "info.json" in text


@pytest.mark.parametrize("kind,words", [
    ("nvcuvid", ["libnvcuvid", "NVIDIA_DRIVER_CAPABILITIES=compute,video,utility", "decode='cpu'"]),
    ("out-of-memory", ["NVIDIA H100 80GB HBM3 ran out of memory", "lower batch_size", "nvidia-smi"]),
])
def test_device_failures_say_what_to_change(small_dataset, kind, words):
    loader, builder, prepared = _prepared(small_dataset, {TOP: "nvdec"})
    err = builder.explain_dali_failure([prepared], RuntimeError(WRAP.format(MESSAGES[kind])), H100)
    assert isinstance(err, DeviceError)
    for w in words:
        assert w in str(err), (w, str(err))


def test_unknown_failures_do_not_blame_the_profile(small_dataset):
    loader, builder, prepared = _prepared(small_dataset)
    err = builder.explain_dali_failure([prepared], RuntimeError(WRAP.format("something new went wrong")))
    assert isinstance(err, DecodeError) and "profile" not in str(err)
    assert "torchcodec decodes every one of those segments" in str(err) and "--decode-test" in str(err)
    assert explain_device(classify("something new"), {}, H100) is None
