"""decode= routing per camera from codec, choice and the GPU's NVDEC capabilities (pure values, no GPU needed)."""

from __future__ import annotations

import pytest

from dali_stream import ConfigError, DeviceError
from dali_stream.decode import Node, resolve_routes, route_reason
from dali_stream.gpus import lookup

CODECS = {"front": "h264", "side": "hevc", "wrist": "av1", "top": "vp9"}
CPU = Node(gpus=0)
H100 = Node(gpus=8, gpu=lookup("NVIDIA H100 80GB HBM3", (9, 0)))
A100 = Node(gpus=8, gpu=lookup("NVIDIA A100-SXM4-80GB", (8, 0)))
L4 = Node(gpus=1, gpu=lookup("NVIDIA L4", (8, 9)))


@pytest.mark.parametrize("node,expected", [
    (CPU, {"front": "torchcodec", "side": "torchcodec", "wrist": "torchcodec", "top": "dali-cpu"}),
    (H100, {"front": "nvdec", "side": "nvdec", "wrist": "torchcodec", "top": "nvdec"}),
    (A100, {"front": "nvdec", "side": "nvdec", "wrist": "torchcodec", "top": "nvdec"}),
    (L4, {"front": "nvdec", "side": "nvdec", "wrist": "nvdec", "top": "nvdec"}),
])
def test_auto_per_camera_per_node(node, expected):
    assert resolve_routes(CODECS, "auto", node) == expected


def test_cpu_choice_is_torchcodec_everywhere():
    assert set(resolve_routes(CODECS, "cpu", L4).values()) == {"torchcodec"}


def test_gpu_choice_names_camera_codec_gpu_and_way_out():
    with pytest.raises(DeviceError, match=r"camera 'wrist'.*'av1'.*NVIDIA H100 80GB HBM3 \(Hopper, compute capability "
                                          r"9\.0\) has no NVDEC support for av1.*decode='auto'.*re-encode"):
        resolve_routes(CODECS, "gpu", H100)
    assert resolve_routes(CODECS, "gpu", L4) == dict.fromkeys(CODECS, "nvdec")
    with pytest.raises(DeviceError, match=r"no CUDA GPU.*decode='auto'"):
        resolve_routes(CODECS, "gpu", CPU)


def test_per_camera_dict():
    routes = resolve_routes(CODECS, {"front": "cpu", "wrist": "auto"}, H100)
    assert routes == {"front": "torchcodec", "side": "nvdec", "wrist": "torchcodec", "top": "nvdec"}
    with pytest.raises(ConfigError, match=r"\['rear'\] that the dataset does not have"):
        resolve_routes(CODECS, {"rear": "gpu"}, H100)
    with pytest.raises(ConfigError, match=r"decode='fast' for camera 'front'"):
        resolve_routes(CODECS, {"front": "fast"}, H100)


@pytest.mark.parametrize("name,cap,generation,av1,engines", [
    ("NVIDIA H100 80GB HBM3", (9, 0), "Hopper", False, 7),
    ("NVIDIA H200", (9, 0), "Hopper", False, 7),
    ("NVIDIA A100-SXM4-40GB", (8, 0), "Ampere GA100", False, 5),
    ("NVIDIA A10G", (8, 6), "Ampere GA10x", True, 1),
    ("NVIDIA L4", (8, 9), "Ada Lovelace", True, 4),
    ("NVIDIA L40S", (8, 9), "Ada Lovelace", True, 3),
    ("Tesla T4", (7, 5), "Turing", False, 2),
    ("NVIDIA B200", (10, 0), "Blackwell", True, 7),
    ("Some Future GPU", None, "unknown", False, None),
])
def test_capability_table(name, cap, generation, av1, engines):
    caps = lookup(name, cap)
    assert (caps.generation, caps.decodes("av1"), caps.nvdec_engines) == (generation, av1, engines)
    assert caps.decodes("h264")


def test_reasons_say_why():
    assert "no NVDEC support for av1" in route_reason("av1", "torchcodec", H100, "auto")
    assert "DALI's CPU decoder handles vp9" in route_reason("vp9", "dali-cpu", CPU, "auto")
    assert "NVDEC on NVIDIA L4 decodes av1" == route_reason("av1", "nvdec", L4, "auto")
