"""DALI decoder failures become named errors: pad_mode="none" on the real DALI CPU route (VP9), and DALI 2.4's
own NVDEC messages (as its mixed backend prints them) mapped to the camera, the episode and the fix."""

from __future__ import annotations

import numpy as np
import pytest

from dali_stream import DecodeError, DeviceError
from dali_stream.decode.errors import classify, explain_device
from dali_stream.decode.node import Node, NodeFacts
from dali_stream.decode.route import NVDEC
from dali_stream.graph.pipeline import build_pipeline
from tests.support.parts import parts_of, plan_of

TOP, FRONT = "observation.images.top", "observation.images.front"
H100 = Node.from_facts(NodeFacts(8, 8, "2.13.0+cu130", "13.0", "NVIDIA H100 80GB HBM3", (9, 0)))

# Messages as DALI 2.4.0 raises them (strings of its libdali_operators.so; decode/errors.py names each one's
# source file), inside its usual wrapper.
WRAP = ("Critical error in pipeline:\nError in MIXED operator `nvidia.dali.fn.decoders.video`,\nwhich was used in "
        "the pipeline definition with the following traceback:\n\n  File \"x.py\", line 1\n\nencountered:\n\n{}\n"
        "C++ context: [/opt/dali/dali/operators/video/frames_decoder_gpu.cc:300]")
MESSAGES = {
    "too-small": "Video is too small in at least one dimension. Provided: 128x96 vs supported:144x144",
    "too-large": "Video is too large in at least one dimension. Provided: 9000x5000 vs supported:8192x8192",
    "unsupported": "Codec configuration not supported on this GPU. Codec: H.264, chroma format: YUV 4:4:4, bit depth: 8",
    "unopened": 'Failed to create video decoder for "memory file"',
    "nvcuvid": "dlopen libnvcuvid.so failed!. Please install NVIDIA GPU driver",
    "out-of-memory": 'CUDA driver API error "CUDA_ERROR_OUT_OF_MEMORY" (2):\nout of memory',
    "out-of-bounds": "Start frame 0 is out of bounds for sample #2, expected range [0, 0)",
}


def test_every_message_the_tests_use_is_in_this_dali():
    """The texts above are DALI's own: each pattern's words are in the installed libdali_operators.so (DALI 2.4.0
    in CI), so a DALI that rewords a message fails here instead of silently falling to 'unknown'."""
    import os

    import nvidia.dali

    lib = os.path.join(os.path.dirname(nvidia.dali.__file__), "libdali_operators.so")
    data = open(lib, "rb").read()
    for kind, text in MESSAGES.items():
        words = {"out-of-memory": "CUDA driver API error ", "out-of-bounds": "is out of bounds for sample #"}.get(
            kind, text.split(" Provided")[0].split(" Codec:")[0].split('"memory')[0])
        assert words.encode() in data, (kind, words)


@pytest.mark.parametrize("kind", sorted(MESSAGES))
def test_classify_dali_messages(kind):
    failure = classify(WRAP.format(MESSAGES[kind]))
    assert failure.kind == kind and MESSAGES[kind][:30] in failure.line
    if kind == "out-of-bounds":
        assert (failure.frame, failure.frames) == (0, 0)


def _prepared(dataset, routes_override=None, **settings):
    """A built batch, by a batch builder built as a loader builds it (`tests/support/parts.py`); `routes_override`: camera ->
    the route its source then claims (NVDEC's, on this CPU node).
    Every camera decoded per sample (`episode_frames_bytes=0`), VP9 in the DALI graph (`decode="dali-cpu"`): its
    failures are read here."""
    settings.setdefault("episode_frames_bytes", 0)
    settings.setdefault("decode", "dali-cpu")
    parts = parts_of(dataset, batch_size=3, episode_pool_size=2, device="cpu", num_workers=0, **settings)
    builder = parts.builder
    for key, route in (routes_override or {}).items():
        builder.sources[key].route = route
    return parts, builder, builder.build(plan_of(parts))


def _dali_failure(parts, builder, prepared):
    """Run `prepared` through the loader's graph; DALI must refuse an out-of-bounds index: the loader's reading
    of that failure."""
    pipe, _ = build_pipeline(builder.outputs, builder.graph_routes, lambda info: prepared.arrays, 3, 1, None,
                             parts.image_ops)
    pipe.build()
    with pytest.raises(RuntimeError, match=r"out-of-bounds frame index") as raised:
        pipe.run()
    return builder.explain_dali_failure([prepared], raised.value)


def test_out_of_range_index_on_the_dali_cpu_route_raises_and_names_the_sample(small_dataset):
    """pad_mode="none": an index past the segment is an error, never a black frame (one clip per sample)."""
    parts, builder, prepared = _prepared(small_dataset, join_streams=0)
    assert parts.routes[TOP] == "dali-cpu"
    slot = [o.name for o in builder.outputs].index(f"{TOP}@frames")
    seg = parts.store.segment(int(prepared.plan.episodes[1]), TOP)
    bad = len(seg.pts_s) + 3
    prepared.arrays[slot][1] = np.array([bad], dtype=np.int32)
    err = _dali_failure(parts, builder, prepared)
    assert isinstance(err, DecodeError)
    assert f"frame {bad} was asked for" in str(err) and f"episode {seg.episode}, camera '{TOP}'" in str(err)
    assert "frames in the clip of" in str(err) and "re-download the file" in str(err)


def test_out_of_range_index_in_a_joined_stream_names_its_episodes(small_dataset):
    """The same on a joined stream (graph/joined.py): the error names every episode the stream joins, and since
    each of their segments decodes apart, says joining is what failed and how to turn it off."""
    parts, builder, prepared = _prepared(small_dataset, join_streams=1)
    assert prepared.members == 3  # one group: the batch's 3 clips in one stream
    frames = prepared.arrays[[o.name for o in builder.outputs].index(f"{TOP}@frames")]
    bad = int(frames[0].max()) + 50
    frames[0] = np.append(frames[0], bad).astype(np.int32)
    err = _dali_failure(parts, builder, prepared)
    episodes = sorted({int(parts.meta.episode_index(int(p))) for p in prepared.plan.episodes})
    assert isinstance(err, DecodeError)
    assert f"joining the clips of episodes {episodes}, camera '{TOP}'" in str(err), err
    assert f"frame {bad} was asked for" in str(err) and "join_streams=0" in str(err)


def test_nvdec_refusal_names_the_camera_whose_stream_is_too_small(small_dataset):
    """A VP9 camera of 128x96 on the NVDEC route (info.json claimed a larger size): the too-small message
    names that camera, its real size and the way out."""
    parts, builder, prepared = _prepared(small_dataset, {TOP: NVDEC})
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
    parts, builder, prepared = _prepared(small_dataset, {TOP: NVDEC})
    err = builder.explain_dali_failure([prepared], RuntimeError(WRAP.format(MESSAGES[kind])), H100)
    assert isinstance(err, DeviceError)
    for w in words:
        assert w in str(err), (w, str(err))


def test_unknown_failures_do_not_blame_the_profile(small_dataset):
    parts, builder, prepared = _prepared(small_dataset)
    err = builder.explain_dali_failure([prepared], RuntimeError(WRAP.format("something new went wrong")))
    assert isinstance(err, DecodeError) and "profile" not in str(err)
    assert "torchcodec decodes every frame those batches asked for" in str(err) and "--decode-test" in str(err)
    assert explain_device(classify("something new"), {}, H100) is None


def test_an_unknown_failure_checks_only_the_frames_the_batch_asked_for(small_dataset, monkeypatch):
    """The CPU check behind an unexplained DALI failure decodes the frames the failed batch asked of
    each DALI-routed camera, not every frame of every segment (minutes on hour-long episodes). The real
    torchcodec decode runs; the test records what it was asked."""
    from dali_stream.graph import forensics

    parts, builder, prepared = _prepared(small_dataset, join_streams=1)
    asked: list[tuple[int, list[int]]] = []
    real = forensics.torchcodec_frames

    def recording(seg, indices, cache=None):
        asked.append((seg.uid, [int(i) for i in indices]))
        return real(seg, indices, cache)

    monkeypatch.setattr(forensics, "torchcodec_frames", recording)
    builder.explain_dali_failure([prepared], RuntimeError(WRAP.format("something new went wrong")))
    want: dict[int, set[int]] = {}
    for pos, idx in zip(prepared.plan.episodes, builder.locate(prepared.plan, [parts.store.rows(int(p)) for p in
                                                                               prepared.plan.episodes], TOP)[1]):
        want.setdefault(parts.store.segment(int(pos), TOP).uid, set()).update(int(i) for i in idx)
    assert {uid: set(i) for uid, i in asked} == want
    assert sum(len(i) for _, i in asked) < sum(len(parts.store.segment(int(p), TOP).pts_s)
                                                for p in set(prepared.plan.episodes.tolist()))


def _run_graph(parts, builder, prepared):
    pipe, _ = build_pipeline(builder.outputs, builder.graph_routes, lambda info: prepared.arrays, 3, 1, None,
                             parts.image_ops)
    pipe.build()
    with pytest.raises(RuntimeError) as raised:
        pipe.run()
    return raised.value


def test_a_stream_dali_cannot_open_is_named_from_dalis_real_failure(small_dataset):
    """DALI 2.4's CPU decoder handed an H.264 clip (a camera whose info.json says vp9): DALI raises only 'Failed to
    create video decoder' (why is a warning); the loader names the camera, the real codec and the fix."""
    from dali_stream.graph.clips import dali_input

    parts, builder, prepared = _prepared(small_dataset, join_streams=0)
    slot = [o.name for o in builder.outputs].index(f"{TOP}@encoded")
    front = parts.store.segment(int(prepared.plan.episodes[1]), FRONT)
    prepared.arrays[slot][1] = dali_input(front, np.array([0])).data
    exc = _run_graph(parts, builder, prepared)
    assert classify(str(exc)).kind == "unopened", str(exc)
    err = builder.explain_dali_failure([prepared], exc)
    episode = int(parts.meta.episode_index(int(prepared.plan.episodes[1])))
    assert isinstance(err, DecodeError)
    assert f"camera '{TOP}', episodes [{episode}]" in str(err) and "the stream is h264" in str(err), err
    assert "meta/info.json says 'vp9'" in str(err) and f"decode={{'{TOP}': 'cpu'}}" in str(err)


def test_bytes_nothing_can_open_are_named_as_a_wrong_cut(small_dataset):
    parts, builder, prepared = _prepared(small_dataset, join_streams=0)
    slot = [o.name for o in builder.outputs].index(f"{TOP}@encoded")
    prepared.arrays[slot][0] = np.frombuffer(b"\0\0\0\x20ftypisom" + bytes(range(256)) * 8, dtype=np.uint8)
    exc = _run_graph(parts, builder, prepared)
    assert classify(str(exc)).kind == "unopened", str(exc)
    err = builder.explain_dali_failure([prepared], exc)
    assert isinstance(err, DecodeError) and "FFmpeg cannot open it either: the cut is wrong" in str(err), err
