"""decode= routing per camera from codec, size, pixel format, choice and the node (pure values, no GPU needed).

Simulated nodes come from injected probe results (`NodeFacts`), the same rules `Node.probe()` applies."""

from __future__ import annotations

import pytest

from dali_stream import ConfigError, DeviceError
from dali_stream.decode.device import Placement, resolve_device
from dali_stream.decode.gpus import _ENGINES, board, lookup
from dali_stream.decode.node import Node, NodeFacts, StreamFormat, warn_once
from dali_stream.decode.routes import choose_routes, resolve_routes
from dali_stream.tools.bench import loader_decode

VGA = dict(width=640, height=480, pix_fmt="yuv420p")
CAMERAS = {"front": StreamFormat("h264", **VGA), "side": StreamFormat("hevc", **VGA),
           "wrist": StreamFormat("av1", **VGA), "top": StreamFormat("vp9", **VGA)}


def _gpu_node(name, cap, count=8, **facts) -> Node:
    base = dict(dali_devices=count, torch_devices=count, torch_version="2.13.0+cu130", torch_cuda="13.0",
                gpu_name=name, capability=cap)
    return Node.from_facts(NodeFacts(**{**base, **facts}))


CPU = Node.from_facts(NodeFacts())
H100 = _gpu_node("NVIDIA H100 80GB HBM3", (9, 0))
A100 = _gpu_node("NVIDIA A100-SXM4-80GB", (8, 0))
L4 = _gpu_node("NVIDIA L4", (8, 9), count=1)
B200 = _gpu_node("NVIDIA B200", (10, 0))
A100_MIG_1G = _gpu_node("NVIDIA A100-SXM4-40GB MIG 1g.5gb", (8, 0), count=1)
DALI_ONLY = _gpu_node("NVIDIA H100 80GB HBM3", (9, 0), torch_devices=0, torch_version="2.13.0+cpu", torch_cuda=None)
OLD_DRIVER = _gpu_node("NVIDIA H100 80GB HBM3", (9, 0), torch_devices=0, torch_version="2.13.0+cu130",
                       torch_cuda="13.0")
NO_NVCUVID = _gpu_node("NVIDIA H100 80GB HBM3", (9, 0),
                       nvcuvid_error="libnvcuvid.so.1: cannot open shared object file: No such file or directory")
NO_DALI = Node.from_facts(NodeFacts(dali=False))  # the CPU install
NO_DALI_GPU = _gpu_node("NVIDIA H100 80GB HBM3", (9, 0), dali_devices=0, dali=False)


@pytest.mark.parametrize("node,expected", [
    (CPU, {"front": "torchcodec", "side": "torchcodec", "wrist": "torchcodec", "top": "torchcodec"}),
    (H100, {"front": "nvdec", "side": "nvdec", "wrist": "torchcodec", "top": "nvdec"}),
    (A100, {"front": "nvdec", "side": "nvdec", "wrist": "torchcodec", "top": "nvdec"}),
    (L4, {"front": "nvdec", "side": "nvdec", "wrist": "nvdec", "top": "nvdec"}),
    (A100_MIG_1G, {"front": "torchcodec", "side": "torchcodec", "wrist": "torchcodec", "top": "torchcodec"}),
    (DALI_ONLY, {"front": "torchcodec", "side": "torchcodec", "wrist": "torchcodec", "top": "torchcodec"}),
    (NO_NVCUVID, {"front": "torchcodec", "side": "torchcodec", "wrist": "torchcodec", "top": "torchcodec"}),
    (NO_DALI, {"front": "torchcodec", "side": "torchcodec", "wrist": "torchcodec", "top": "torchcodec"}),
    (NO_DALI_GPU, {"front": "torchcodec", "side": "torchcodec", "wrist": "torchcodec", "top": "torchcodec"}),
])
def test_auto_per_camera_per_node(node, expected):
    assert resolve_routes(CAMERAS, "auto", node) == expected


def test_a_gpu_torch_cannot_use_is_no_gpu_node():
    """DALI sees the H100, torch (CPU wheel, or a CUDA build the driver does not run) does not: CPU routes,
    and the reason says which layer and the fix."""
    assert DALI_ONLY.gpus == 0 and OLD_DRIVER.gpus == 0
    assert "torch 2.13.0+cpu cannot use them (a CPU-only build)" in DALI_ONLY.gpu_problem
    assert "built for CUDA 13.0, which this driver does not run" in OLD_DRIVER.gpu_problem
    assert "Install a CUDA build of torch" in DALI_ONLY.gpu_problem
    reason = choose_routes(CAMERAS, "auto", DALI_ONLY)["front"].reason
    assert "cannot use them" in reason and reason.endswith("torchcodec")
    with pytest.raises(DeviceError, match=r"decode='gpu' for camera 'front'.*no CUDA GPU that DALI and torch can "
                                          r"both use \(DALI sees 8 CUDA device.*CPU-only build"):
        resolve_routes(CAMERAS, "gpu", DALI_ONLY)
    mismatch = _gpu_node("NVIDIA H100 80GB HBM3", (9, 0), torch_devices=2)
    assert mismatch.gpus == 0 and "CUDA_VISIBLE_DEVICES" in mismatch.gpu_problem


def test_warn_once_per_message():
    with pytest.warns(UserWarning, match="first message"):
        warn_once("first message 8f1c")
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warn_once("first message 8f1c")  # the same message again: silent


def test_container_without_nvcuvid_and_mig_without_nvdec_name_the_fix():
    assert NO_NVCUVID.gpus == 8 and "NVIDIA_DRIVER_CAPABILITIES=compute,video,utility" in NO_NVCUVID.nvdec_problem
    with pytest.raises(DeviceError, match=r"libnvcuvid.*does not load.*NVIDIA_DRIVER_CAPABILITIES"):
        resolve_routes({"front": CAMERAS["front"]}, "gpu", NO_NVCUVID)
    assert A100_MIG_1G.gpus == 1 and A100_MIG_1G.gpu.mig == "1g.5gb"
    with pytest.raises(DeviceError, match=r"MIG slice \(1g\.5gb\) with no NVDEC engine.*1g\.5gb\+me"):
        resolve_routes({"front": CAMERAS["front"]}, "gpu", A100_MIG_1G)


def test_auto_decodes_vp9_off_nvdec_with_torchcodec_with_dali_or_without():
    """DALI's CPU decoder is slower than torchcodec on VP9 and its colours are not FFmpeg's (`_fallback`): `auto`
    gives the same routes whether DALI is installed or not, and says why."""
    without, with_dali = choose_routes(CAMERAS, "auto", NO_DALI), choose_routes(CAMERAS, "auto", CPU)
    assert {k: c.route for k, c in without.items()} == {k: c.route for k, c in with_dali.items()}
    reason = with_dali["top"].reason
    assert without["top"].reason.endswith(reason.split("; ", 1)[1])
    assert "torchcodec (FFmpeg's vp9 decoder: lerobot's frames; DALI's CPU decoder, decode='dali-cpu', is slower" in \
        reason, reason


def test_dali_cpu_takes_the_cameras_dalis_cpu_decoder_decodes_and_needs_dali():
    got = choose_routes(CAMERAS, "dali-cpu", CPU)
    assert {k: c.route for k, c in got.items()} == {"front": "torchcodec", "side": "torchcodec",
                                                    "wrist": "torchcodec", "top": "dali-cpu"}
    assert "DALI's CPU decoder has no h264 (only mjpeg, vp8, vp9): torchcodec" in got["front"].reason
    assert choose_routes(CAMERAS, {"top": "dali-cpu"}, H100)["top"].route == "dali-cpu"  # off NVDEC, as asked
    with pytest.raises(DeviceError, match=r"decode='dali-cpu' for camera 'top' \(vp9 640x480 yuv420p\), but NVIDIA "
                                          r"DALI is not installed .*\[dali\] extra.*decode='cpu'"):
        choose_routes(CAMERAS, "dali-cpu", NO_DALI)
    assert choose_routes({"front": CAMERAS["front"]}, "dali-cpu", NO_DALI)["front"].route == "torchcodec"


def test_without_dali_nvdec_is_refused_and_the_reason_says_why():
    assert NO_DALI_GPU.gpus == 0 and "NVIDIA DALI is not installed" in NO_DALI_GPU.gpu_problem
    with pytest.raises(DeviceError, match="NVIDIA DALI is not installed"):
        choose_routes(CAMERAS, "gpu", NO_DALI_GPU)


def test_cpu_only_switch():
    node = Node.from_facts(NodeFacts(cpu_only=True))
    assert node.gpus == 0 and "DALI_STREAM_CPU_ONLY=1" in node.gpu_problem
    assert resolve_routes(CAMERAS, "auto", node)["top"] == "torchcodec"


def test_sizes_and_pixel_formats_route_per_camera():
    small = {"front": StreamFormat("h264", 128, 96, "yuv420p"), "side": StreamFormat("hevc", 128, 96, "yuv420p"),
             "wrist": StreamFormat("av1", 128, 96, "yuv420p"), "top": StreamFormat("vp9", 128, 96, "yuv420p")}
    got = choose_routes(small, "auto", L4)
    assert {k: c.route for k, c in got.items()} == {"front": "nvdec", "side": "torchcodec", "wrist": "torchcodec",
                                                    "top": "torchcodec"}
    assert "128x96 is below NVDEC's minimum 144x144 for hevc" in got["side"].reason
    assert "below NVDEC's minimum 128x128 for vp9" in got["top"].reason
    assert got["front"].reason == "NVDEC on NVIDIA L4 decodes h264 128x96 yuv420p"
    with pytest.raises(DeviceError, match=r"camera 'side'.*hevc 128x96.*minimum 144x144"):
        resolve_routes(small, {"side": "gpu"}, L4)
    big = {"cam": StreamFormat("h264", 5120, 2880, "yuv420p")}
    assert "above NVDEC's maximum 4096x4096 for h264 on Hopper" in choose_routes(big, "auto", H100)["cam"].reason
    assert resolve_routes(big, "auto", B200) == {"cam": "nvdec"}  # Blackwell decodes H.264 up to 8192
    deep = {"cam": StreamFormat("hevc", 640, 480, "yuv420p10le"), "chroma": StreamFormat("hevc", 640, 480, "yuv444p"),
            "unrecorded": StreamFormat("hevc", 640, 480, None)}
    got = choose_routes(deep, "auto", H100)
    assert got["cam"].route == got["chroma"].route == "torchcodec" and got["unrecorded"].route == "nvdec"
    assert "pixel format yuv420p10le is not 8-bit 4:2:0" in got["cam"].reason


def test_cpu_choice_is_torchcodec_everywhere():
    assert set(resolve_routes(CAMERAS, "cpu", L4).values()) == {"torchcodec"}


def test_gpu_choice_names_camera_codec_gpu_and_way_out():
    with pytest.raises(DeviceError, match=r"camera 'wrist'.*av1 640x480.*NVIDIA H100 80GB HBM3 \(Hopper, compute "
                                          r"capability 9\.0\) has no NVDEC support for av1.*decode='auto'.*re-encode"):
        resolve_routes(CAMERAS, "gpu", H100)
    assert resolve_routes(CAMERAS, "gpu", L4) == dict.fromkeys(CAMERAS, "nvdec")
    with pytest.raises(DeviceError, match=r"no CUDA GPU.*decode='auto'"):
        resolve_routes(CAMERAS, "gpu", CPU)


def test_per_camera_dict():
    routes = resolve_routes(CAMERAS, {"front": "cpu", "wrist": "auto"}, H100)
    assert routes == {"front": "torchcodec", "side": "nvdec", "wrist": "torchcodec", "top": "nvdec"}
    with pytest.raises(ConfigError, match=r"\['rear'\] that the dataset does not have"):
        resolve_routes(CAMERAS, {"rear": "gpu"}, H100)
    with pytest.raises(ConfigError, match=r"decode='fast' for camera 'front'"):
        resolve_routes(CAMERAS, {"front": "fast"}, H100)


@pytest.mark.parametrize("name,cap,generation,av1,engines", [
    ("NVIDIA H100 80GB HBM3", (9, 0), "Hopper", False, 7),
    ("NVIDIA H200", (9, 0), "Hopper", False, 7),
    ("NVIDIA GH200 480GB", (9, 0), "Hopper", False, 7),
    ("NVIDIA A100-SXM4-40GB", (8, 0), "Ampere GA100", False, 5),
    ("NVIDIA A10G", (8, 6), "Ampere GA10x", True, 1),
    ("NVIDIA A10", (8, 6), "Ampere GA10x", True, 2),
    ("NVIDIA A2", (8, 6), "Ampere GA10x", True, 1),
    ("NVIDIA RTX A6000", (8, 6), "Ampere GA10x", True, 2),
    ("NVIDIA A16", (8, 6), "Ampere GA10x", True, 2),  # 4 GPUs on the board, 2 NVDEC each: per CUDA device
    ("NVIDIA L4", (8, 9), "Ada Lovelace", True, 4),
    ("NVIDIA L40S", (8, 9), "Ada Lovelace", True, 3),
    ("Tesla T4", (7, 5), "Turing", False, 2),
    ("Tesla V100-SXM2-32GB", (7, 0), "Volta", False, 1),
    ("NVIDIA B200", (10, 0), "Blackwell", True, 7),
    ("Some Future GPU", None, "unknown", False, None),
])
def test_capability_table(name, cap, generation, av1, engines):
    caps = lookup(name, cap)
    assert (caps.generation, caps.decodes("av1"), caps.nvdec_engines) == (generation, av1, engines)
    assert caps.decodes("h264")


def test_board_names_match_whole_tokens():
    assert board("NVIDIA RTX A2000 12GB", _ENGINES) == "RTX A2000"  # not "A2"
    assert board("NVIDIA GH200 480GB", _ENGINES) == "GH200"  # not "H200"
    assert board("NVIDIA A100-SXM4-80GB", _ENGINES) == "A100"
    assert board("NVIDIA L40S", _ENGINES) == "L40S" and board("NVIDIA L40", _ENGINES) == "L40"
    assert board("NVIDIA A2000", _ENGINES) is None


def test_volta_decodes_vp8():
    assert lookup("Tesla V100-SXM2-16GB", (7, 0)).decodes("vp8")


@pytest.mark.parametrize("name,engines", [
    ("NVIDIA A100-SXM4-40GB MIG 1g.5gb", 0), ("NVIDIA A100-SXM4-40GB MIG 1g.5gb+me", 1),
    ("NVIDIA A100-SXM4-40GB MIG 1g.10gb", 1), ("NVIDIA A100-SXM4-80GB MIG 1g.10gb", 0),
    ("NVIDIA A100-SXM4-80GB MIG 1g.20gb", 1), ("NVIDIA A100-SXM4-40GB MIG 3g.20gb", 2),
    ("NVIDIA A100-SXM4-40GB MIG 7g.40gb", 5), ("NVIDIA H100 80GB HBM3 MIG 1g.10gb", 1),
    ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 3), ("NVIDIA A30 MIG 1g.6gb", 0), ("NVIDIA A30 MIG 2g.12gb", 2),
])
def test_mig_profiles(name, engines):
    caps = lookup(name, (8, 0) if "H100" not in name else (9, 0))
    assert caps.mig is not None and caps.nvdec_engines == engines
    assert caps.decodes("h264") is (engines > 0)


def test_device_resolution():
    # One GPU visible per task (CUDA_VISIBLE_DEVICES narrowed), LOCAL_RANK 3: that GPU is cuda:0.
    assert resolve_device(None, gpus=1, local_rank=3, current=None) == Placement(0, "cuda:0")
    assert resolve_device("cuda", gpus=8, local_rank=3, current=None) == Placement(3, "cuda:3")
    assert resolve_device("cuda", gpus=8, local_rank=3, current=5) == Placement(5, "cuda:5")  # set_device(5)
    assert resolve_device("cuda:2", gpus=8, local_rank=3, current=5) == Placement(2, "cuda:2")
    assert resolve_device("cpu", gpus=8, local_rank=3, current=None) == Placement(3, "cpu")  # decode on GPU 3
    assert resolve_device(None, gpus=0, local_rank=3, current=None) == Placement(None, "cpu")
    assert resolve_device("cpu:0", gpus=0, local_rank=0, current=None) == Placement(None, "cpu")  # torch.device
    with pytest.raises(DeviceError, match=r"device='cuda:1' but this process sees 1 CUDA device.*device='cuda'"):
        resolve_device("cuda:1", gpus=1, local_rank=0, current=None)
    with pytest.raises(DeviceError, match=r"device='cuda' asks for a GPU.*torch .*CPU-only build.*device='cpu'"):
        resolve_device("cuda", gpus=0, local_rank=0, current=None, gpu_problem=DALI_ONLY.gpu_problem)
    with pytest.raises(DeviceError, match=r"device='gpu0' is not 'cpu', 'cuda' or 'cuda:N'"):
        resolve_device("gpu0", gpus=1, local_rank=0, current=None)


def test_bench_gpu_means_nvdec_where_this_gpu_decodes():
    """`bench --decode gpu` on an H100: NVDEC for h264/hevc/vp9, `auto` for AV1 instead of aborting."""
    assert loader_decode("gpu", CAMERAS, H100) == {"front": "gpu", "side": "gpu", "wrist": "auto", "top": "gpu"}
    assert loader_decode("gpu", CAMERAS, L4) == dict.fromkeys(CAMERAS, "gpu")
    assert loader_decode("cpu", CAMERAS, H100) == "cpu"


def test_auto_leaves_nvdec_where_it_was_measured_slower():
    """decode/speed.py: DALI 2.4's per-sample NVDEC was measured slower than torchcodec for one frame per camera;
    `auto` then takes torchcodec for such cameras and cites the measurement; joined streams, windows, another DALI
    and decode='gpu' keep NVDEC (unmeasured shapes say so)."""
    from dali_stream.decode.speed import gpu_slower, unmeasured

    assert gpu_slower("2.4.0", False, 1) is not None and "61.9" in gpu_slower("2.4.0", False, 1)
    assert gpu_slower("2.4.0", True, 1) is None and gpu_slower("2.4.0", False, 8) is None
    assert gpu_slower("2.5.1", False, 1) is None

    def measured(joined, frames):
        return lambda key: (gpu_slower("2.4.0", joined, frames[key]), unmeasured(joined))

    frames = {"front": 1, "side": 3, "wrist": 1, "top": 1}
    per_sample = choose_routes(CAMERAS, "auto", H100, measured(False, frames))
    assert {k: c.route for k, c in per_sample.items()} == {
        "front": "torchcodec", "side": "nvdec", "wrist": "torchcodec", "top": "torchcodec"}
    assert "torchcodec is faster for these samples" in per_sample["front"].reason
    assert "61.9 samples/s on NVDEC" in per_sample["front"].reason and "decode='gpu'" in per_sample["front"].reason
    assert "one clip per sample is not measured" in per_sample["side"].reason
    joined = choose_routes(CAMERAS, "auto", H100, measured(True, frames))
    assert joined["front"].route == "nvdec" and "joined streams (graph/joined.py) is not measured" in joined["front"].reason
    insisted = choose_routes(CAMERAS, {"front": "gpu"}, H100, measured(False, frames))
    assert insisted["front"].route == "nvdec" and insisted["top"].route == "torchcodec"
    assert choose_routes(CAMERAS, "auto", CPU, measured(False, frames))["top"].route == "torchcodec"


def test_auto_reads_an_augmented_loader_as_one_clip_per_sample(small_dataset):
    """With an augment= hook the graph decodes one clip per sample whatever join_streams says (loader.resolve),
    so `auto` must weigh NVDEC by the per-sample measurement (torchcodec faster for one frame), not the joined one."""
    from dali_stream import StreamLoader
    from pipelines import augment

    # VP9 through DALI's CPU decoder: a camera the graph decodes, whose clips it may join
    plain = StreamLoader(str(small_dataset), batch_size=2, device="cpu", episode_frames_bytes=0, decode="dali-cpu")
    hooked = augment.make_loader(str(small_dataset), batch_size=2, device="cpu", decode="dali-cpu")
    assert hooked.resolved.join_streams == 0 and plain.resolved.join_streams > 0
    from nvidia.dali import __version__ as dali_version

    from dali_stream.decode.speed import gpu_slower
    from dali_stream.loader.routing import measured_speed

    front = "observation.images.front"
    plain_speed = measured_speed(plain.config, plain.plan_config.delta_indices, dali_version)(front)
    if not plain_speed[1].startswith("NVDEC with"):
        pytest.fail("the measured rule's note changed: update this test")
    assert "joined streams" in plain_speed[1] and plain_speed[0] is None
    source, note = measured_speed(hooked.config, hooked.plan_config.delta_indices, dali_version)(front)
    assert "one clip per sample" in note
    assert source == gpu_slower(dali_version, False, 1)  # the per-sample measurement (DALI 2.4: "61.9 samples/s")
    if dali_version.startswith("2.4."):
        assert source is not None and "61.9" in source


def test_the_device_is_read_before_naming_the_gpu_initialises_cuda(monkeypatch):
    """Naming the GPU (`Node.probe`, torch.cuda.get_device_name) initialises CUDA, after which torch says
    device 0 is current; `place` must read the current device first. A 2-GPU node is simulated at torch's and
    DALI's probe functions (this machine has no GPU); the order of our calls is what is under test."""
    import torch
    from nvidia.dali import backend

    from dali_stream.decode import node as node_module
    from dali_stream.decode.device import place

    cuda = {"initialised": False, "current": 0}

    def initialising(answer):
        def call(*args):
            cuda["initialised"] = True
            return answer() if callable(answer) else answer
        return call

    monkeypatch.delenv("DALI_STREAM_CPU_ONLY", raising=False)
    monkeypatch.setattr(backend, "GetCUDADeviceCount", lambda: 2)
    monkeypatch.setattr(node_module, "_driver_present", lambda: True)
    monkeypatch.setattr(node_module, "nvcuvid_error", lambda: None)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)  # NVML: initialises nothing
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: cuda["initialised"])
    monkeypatch.setattr(torch.cuda, "current_device", initialising(lambda: cuda["current"]))
    monkeypatch.setattr(torch.cuda, "get_device_name", initialising("NVIDIA H100 80GB HBM3"))
    monkeypatch.setattr(torch.cuda, "get_device_capability", initialising((9, 0)))

    node, placement = place(None, local_rank=1)  # torchrun's rank 1, no set_device: LOCAL_RANK % GPUs
    assert placement == Placement(1, "cuda:1"), placement
    assert node.gpus == 2 and node.gpu is not None and node.gpu.nvdec_engines == 7
    cuda.update(initialised=True, current=1)  # accelerate: set_device(1) before the loader, LOCAL_RANK unset
    assert place(None, local_rank=0)[1] == Placement(1, "cuda:1")
    cuda.update(initialised=False, current=0)
    assert place("cuda", local_rank=3)[1] == Placement(1, "cuda:1")


def test_auto_keeps_streams_nvdec_is_not_proven_on_off_the_gpu():
    """decode/proven.py: until `make gpu-check` proves NVDEC on a kind of stream (codec, DALI minor,
    joined or per-sample clips), `auto` decodes it on a CPU route and says why; an entry lets NVDEC take it;
    decode='gpu' uses NVDEC anyway."""
    from dali_stream.decode.proven import PROVEN, Proven, rule

    fmts = dict(CAMERAS)
    none = choose_routes(fmts, "auto", H100, unproven=rule(fmts, True, "2.4.0", ()))
    assert {k: c.route for k, c in none.items()} == {
        "front": "torchcodec", "side": "torchcodec", "wrist": "torchcodec", "top": "torchcodec"}
    assert "not yet proven to return the planned frames for h264 as joined streams on DALI 2.4" in none["front"].reason
    assert "make gpu-check" in none["front"].reason and "decode='gpu'" in none["front"].reason
    assert "no NVDEC support for av1" in none["wrist"].reason  # refused first: the proof is not the question
    table = (Proven("2.4", "h264", True, "results/X (2026-12-01)"),)
    some = choose_routes(fmts, "auto", H100, unproven=rule(fmts, True, "2.4.1", table))
    assert some["front"].route == "nvdec" and some["side"].route == "torchcodec"
    per_sample = choose_routes(fmts, "auto", H100, unproven=rule(fmts, False, "2.4.1", table))
    assert per_sample["front"].route == "torchcodec" and "one clip per sample" in per_sample["front"].reason
    assert choose_routes(fmts, "auto", H100, unproven=rule(fmts, True, "2.5.0", table))["front"].route == "torchcodec"
    insisted = choose_routes(fmts, {"front": "gpu"}, H100, unproven=rule(fmts, True, "2.4.0", ()))
    assert insisted["front"].route == "nvdec"
    assert all(p.source for p in PROVEN)  # every entry says where it was proven


H200 = _gpu_node("NVIDIA H200", (9, 0))


def test_auto_on_the_open_engine_follows_its_proofs_per_codec_and_frame_size():
    """decode/proven.py's OPEN_PROVEN: on a GPU where the open engine is proven for a codec, `auto` sends a camera of
    it there for frames at least as large as the loader was measured faster than the CPU route at; smaller frames,
    other codecs and other GPUs keep the CPU route, each with the reason; decode='gpu' insists on NVDEC."""
    from dali_stream.decode.proven import OpenProven, open_rule, open_stream_unproven

    table = (OpenProven("NVIDIA H200", "h264", 640 * 480, "results/X (2026-12-01): 1.11x at 640x480, 0.95x at 256x256"),)
    fmts = {"big": StreamFormat("h264", **VGA), "small": StreamFormat("h264", width=256, height=256, pix_fmt="yuv420p"),
            "hevc": StreamFormat("hevc", **VGA), "av1": StreamFormat("av1", **VGA)}
    chosen = choose_routes(fmts, "auto", H200, unproven=open_rule("NVIDIA H200", fmts, table))
    assert {k: c.route for k, c in chosen.items()} == {"big": "nvdec", "small": "torchcodec", "hevc": "torchcodec",
                                                      "av1": "torchcodec"}
    assert "measured slower than the CPU route" in chosen["small"].reason and "under 307,200 pixels" in \
        chosen["small"].reason and "0.95x at 256x256" in chosen["small"].reason
    assert "not yet proven for hevc on NVIDIA H200" in chosen["hevc"].reason
    assert "no NVDEC support for av1" in chosen["av1"].reason  # refused first: the proof is not the question
    assert open_stream_unproven("NVIDIA H200", "h264", None, table) is None  # size not stated: the codec's proof
    assert open_stream_unproven("NVIDIA H100 80GB HBM3", "h264", 640 * 480, table) is not None
    insisted = choose_routes(fmts, {"small": "gpu"}, H200, unproven=open_rule("NVIDIA H200", fmts, table))
    assert insisted["small"].route == "nvdec"


def test_the_loader_weighs_the_open_engines_proofs_once_it_takes_that_engine(small_dataset):
    """`loader.routing.camera_routes` on a simulated H200: with an OPEN_PROVEN entry for it, nvdec_engine='auto' takes
    the open engine and the h264 camera goes there, the vp9 one (below NVDEC's VP9 minimum) to torchcodec; without
    one, DALI's engine
    and its proofs decide (none: both on the CPU), and nvdec_engine='open' asked without a proof names the open
    engine's record, not DALI's."""
    from dali_stream.config import LoaderConfig
    from dali_stream.decode.proven import OpenProven
    from dali_stream.loader.routing import camera_routes
    from dali_stream.loader.source_setup import open_source, windows

    front, top = "observation.images.front", "observation.images.top"
    table = (OpenProven("NVIDIA H200", "h264", 1, "results/X (2026-12-01)"),)
    cfg = LoaderConfig()
    catalog, _ = open_source(str(small_dataset), cfg)
    deltas = windows(catalog, cfg)[0]
    proven = camera_routes(cfg, catalog, H200, deltas, table)
    assert proven.routes == {front: "nvdec-open", top: "torchcodec"}, proven.reasons
    assert "the open-decoder engine is proven on this node" in proven.reasons[front]
    assert "below NVDEC's minimum" in proven.reasons[top]
    unproven = camera_routes(cfg, catalog, H200, deltas, ())
    assert unproven.routes == {front: "torchcodec", top: "torchcodec"}
    assert "on DALI" in unproven.reasons[front]  # DALI's engine, and DALI's proofs: none
    asked = camera_routes(LoaderConfig(nvdec_engine="open"), catalog, H200, deltas, ())
    assert asked.routes == {front: "torchcodec", top: "torchcodec"}
    assert "the open-decoder engine is not yet proven for h264 on NVIDIA H200" in asked.reasons[front]
    dali = camera_routes(LoaderConfig(nvdec_engine="dali"), catalog, H200, deltas, table)
    assert dali.routes[front] == "torchcodec" and "on DALI" in dali.reasons[front]
