"""GPU route (NVDEC through DALI's mixed decoder): runs where DALI and torch both see a CUDA GPU, skips elsewhere.

`make gpu-check` runs this file on a GPU node. Fixtures are at least 192x160 (above NVDEC's minimum for every
codec), with H.264 B-frames, HEVC, VP9 and AV1, and one dataset whose episodes hold >= 600 frames.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dali_stream import DeviceError, StreamLoader
from dali_stream.decode.node import Node
from dali_stream.decode.routes import formats_of
from dali_stream.tools.paint import read_ids

pytestmark = pytest.mark.gpu

FPS = 30
FRONT, SIDE, WRIST, TOP = (f"observation.images.{n}" for n in ("front", "side", "wrist", "top"))
DELTAS = {FRONT: [-1 / FPS, 0.0, 2 / FPS], TOP: [-2 / FPS, 0.0], "action": [0.0, 1 / FPS]}
STEPS = {FRONT: (-1, 0, 2), TOP: (-2, 0), SIDE: (0,), WRIST: (0,)}


@pytest.fixture(scope="session")
def gpu_dataset(tmp_path_factory):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=8, min_length=20, max_length=60, height=160, width=192, gop=16, episodes_per_file=3,
                      cameras=parse_cameras("front:h264,side:hevc,wrist:av1,top:vp9"), seed=3)
    return write_sample(tmp_path_factory.mktemp("gpu") / "four_codecs_192x160", spec)


@pytest.fixture(scope="session")
def long_dataset(tmp_path_factory):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=3, min_length=600, max_length=660, height=160, width=192, gop=30, episodes_per_file=2,
                      cameras=parse_cameras("front:h264,side:hevc,top:vp9"), seed=4)
    return write_sample(tmp_path_factory.mktemp("gpu") / "long_192x160", spec)


def _node() -> Node:
    return Node.probe()


def _nvdec_cameras(loader) -> list[str]:
    return [k for k, r in loader.routes.items() if r == "nvdec"]


def _check_ids(batch, loader, keys, steps=STEPS):
    lengths = dict(zip(loader.meta.episodes["episode_index"].tolist(), loader.meta.lengths.tolist()))
    eps, frames = batch["episode_index"].cpu().numpy(), batch["frame_index"].cpu().numpy()
    for key in keys:
        imgs = batch[key].cpu().numpy()
        for i, (ep, fr) in enumerate(zip(eps, frames)):
            want = [(int(ep), min(max(int(fr) + d, 0), lengths[int(ep)] - 1)) for d in steps.get(key, (0,))]
            got = [read_ids(f) for f in (imgs[i] if imgs[i].ndim == 4 else imgs[i][None])]
            assert got == want, (key, loader.routes[key], ep, fr)


def test_routes_follow_the_table_and_auto_the_proofs_on_this_gpu(gpu_dataset):
    """decode='gpu' takes NVDEC wherever the capability table does; `auto` only for kinds of stream proven on
    the NVDEC engine it takes on this GPU (decode/proven.py: the open engine's record where it is proven here,
    else DALI's), the others on a CPU route with the reason."""
    from dali_stream.decode.proven import installed_dali, open_stream_unproven, open_unproven, unproven
    from dali_stream.loader.resolve import nvdec_joins

    loader = StreamLoader(str(gpu_dataset), batch_size=4)
    node = loader.node
    assert loader.device.startswith("cuda:") and loader.dali_device == int(loader.device.split(":")[1])
    gpu = node.gpu.name if node.gpu else None
    for key, fmt in formats_of(loader.meta).items():
        refused = node.nvdec_refuses(fmt)
        if open_unproven(gpu) is None:
            doubt = open_stream_unproven(gpu, fmt.codec, fmt.width * fmt.height if fmt.width and fmt.height else None)
        else:
            doubt = unproven(installed_dali(), fmt.codec, nvdec_joins(loader.config))
        if refused is not None or doubt is not None:
            assert loader.routes[key] not in ("nvdec", "nvdec-open"), (key, loader.route_reasons[key])
        if refused is None and doubt is not None:
            assert doubt in loader.route_reasons[key], (key, loader.route_reasons[key])
    insisted = StreamLoader(str(gpu_dataset), batch_size=4, decode=dict.fromkeys((FRONT, SIDE, TOP), "gpu"))
    assert [insisted.routes[k] for k in (FRONT, SIDE, TOP)] == ["nvdec"] * 3, insisted.route_reasons


def test_av1_refused_only_where_the_table_says(gpu_dataset):
    if _node().gpu.decodes("av1"):
        loader = StreamLoader(str(gpu_dataset), batch_size=4, decode={WRIST: "gpu"}, image_dtype="uint8")
        assert loader.routes[WRIST] == "nvdec"
        _check_ids(next(iter(loader)), loader, [WRIST])
    else:
        with pytest.raises(DeviceError, match=r"'observation.images.wrist'.*no NVDEC support for av1"):
            StreamLoader(str(gpu_dataset), decode={WRIST: "gpu"})


def test_nvdec_frames_carry_the_planned_ids_and_every_tensor_is_on_the_loader_device(gpu_dataset):
    decode = {k: "gpu" for k in (FRONT, SIDE, TOP)}
    loader = StreamLoader(str(gpu_dataset), batch_size=4, episode_pool_size=3, delta_timestamps=DELTAS,
                          decode=decode, drop_last=False, image_dtype="uint8")
    seen = 0
    for batch in loader:
        assert {str(v.device) for v in batch.values() if isinstance(v, torch.Tensor)} == {loader.device}
        _check_ids(batch, loader, [FRONT, SIDE, TOP, WRIST])
        seen += len(batch["task"])
    assert seen == loader.meta.total_frames


@pytest.mark.xfail(strict=False, reason=(
    "known: H100 2026-11-23, the torchcodec loader beside an NVDEC loader returned another frame of the right "
    "segment (results/NVIDIA-H100-80GB-HBM3/README.md, Failures 2); segments had no edit list then (fixed since, "
    "the episode-end fix), which may have been the cause: an XPASS here says so"))
def test_nvdec_and_torchcodec_give_the_same_frames_per_camera(gpu_dataset):
    """Same plan through NVDEC and torchcodec, two loaders in one process: each route's frames carry the planned
    ids (checked per loader, so a failure names the route), and they agree with PSNR above 30 dB per camera.

    H100, 2026-11-23 (benchmarks/results/NVIDIA-H100-80GB-HBM3/README.md): fails there on the torchcodec loader,
    which showed another frame of the episode in the last sample of one batch, only while the NVDEC loader ran
    in the same process; the NVDEC loader matched the plan in every batch. Cause open."""
    args = dict(batch_size=4, episode_pool_size=3, seed=5, delta_timestamps=DELTAS, image_dtype="uint8")
    gpu = StreamLoader(str(gpu_dataset), decode={k: "gpu" for k in (FRONT, SIDE, TOP)}, **args)
    cpu = StreamLoader(str(gpu_dataset), decode="cpu", **args)
    for n, (a, b) in enumerate(zip(gpu, cpu)):
        assert torch.equal(a["index"].cpu(), b["index"].cpu())
        _check_ids(a, gpu, [FRONT, SIDE, TOP])
        _check_ids(b, cpu, [FRONT, SIDE, TOP])
        for key in (FRONT, SIDE, TOP):
            x, y = a[key].cpu().numpy(), b[key].cpu().numpy()
            mse = np.mean((x.astype(np.float64) - y.astype(np.float64)) ** 2)
            assert 10 * np.log10(255.0 ** 2 / max(mse, 1e-9)) > 30, key
        if n == 5:
            break


def test_float32_is_uint8_over_255(gpu_dataset):
    """lerobot's `frames.float() / 255` bit for bit (divided on the CPU, as its dataset does): the graph divides on
    the GPU (DALI's CUDA division, which must round as the CPU's does)."""
    args = dict(batch_size=4, episode_pool_size=3, seed=2, decode={FRONT: "gpu", SIDE: "gpu", TOP: "gpu"})
    f32 = next(iter(StreamLoader(str(gpu_dataset), **args)))
    u8 = next(iter(StreamLoader(str(gpu_dataset), image_dtype="uint8", **args)))
    for key in (FRONT, SIDE, TOP):
        assert f32[key].dtype == torch.float32 and u8[key].dtype == torch.uint8 and f32[key].is_cuda
        assert 0.0 <= float(f32[key].min()) and float(f32[key].max()) <= 1.0
        assert torch.equal(f32[key].cpu(), u8[key].cpu().float() / 255), key


def test_channels_last_on_the_gpu_is_the_same_batch_in_hwc_memory(gpu_dataset):
    """The graph lays cameras out FHWC on the GPU and the loader hands (..., 3, H, W) views of them over."""
    args = dict(batch_size=4, episode_pool_size=3, seed=3, delta_timestamps=DELTAS,
                decode={FRONT: "gpu", SIDE: "gpu", TOP: "gpu"})
    last = next(iter(StreamLoader(str(gpu_dataset), memory_format="channels_last", **args)))
    default = next(iter(StreamLoader(str(gpu_dataset), **args)))
    for key in (FRONT, SIDE, TOP):
        assert last[key].is_cuda and last[key].shape == default[key].shape and default[key].is_contiguous()
        assert last[key].movedim(-3, -1).is_contiguous() and not last[key].is_contiguous()
        torch.testing.assert_close(last[key], default[key], atol=1e-6, rtol=0)


def test_resize_crop_normalise_on_the_gpu_match_the_cpu_route(gpu_dataset):
    ops = dict(resize=(128, 160), crop=(96, 128), mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))
    args = dict(batch_size=4, episode_pool_size=3, seed=7, **ops)
    gpu = next(iter(StreamLoader(str(gpu_dataset), decode={FRONT: "gpu", SIDE: "gpu", TOP: "gpu"}, **args)))
    cpu = next(iter(StreamLoader(str(gpu_dataset), decode="cpu", **args)))
    for key in (FRONT, SIDE, TOP):
        assert gpu[key].shape == (4, 3, 96, 128) and gpu[key].is_cuda
        # Normalised units: a mean difference of 0.05 is ~3 grey levels (YUV->RGB rounding differs).
        assert float((gpu[key] - cpu[key].to(gpu[key].device)).abs().mean()) < 0.05, key


def test_long_episodes_deep_frames(long_dataset):
    """Episodes of >= 600 frames: frames deep in the episode come back exact on NVDEC."""
    loader = StreamLoader(str(long_dataset), batch_size=8, episode_pool_size=3, seed=1, image_dtype="uint8",
                          decode={FRONT: "gpu", SIDE: "gpu", TOP: "gpu"}, delta_timestamps={FRONT: [-1 / FPS, 0.0]})
    assert int(loader.meta.lengths.min()) >= 600
    deepest = 0
    for n, batch in enumerate(loader):
        _check_ids(batch, loader, [FRONT, SIDE, TOP], steps={FRONT: (-1, 0)})
        deepest = max(deepest, int(batch["frame_index"].max()))
        if n == 12:
            break
    assert deepest > 300


def test_resume_on_gpu(gpu_dataset):
    args = dict(batch_size=3, episode_pool_size=2, seed=9, delta_timestamps=DELTAS,
                decode=dict.fromkeys((FRONT, SIDE, TOP), "gpu"))
    full = [b["index"].tolist() for b in StreamLoader(str(gpu_dataset), **args)]
    first = StreamLoader(str(gpu_dataset), **args)
    for i, _ in enumerate(first):
        if i == 3:
            break
    second = StreamLoader(str(gpu_dataset), **args)
    second.load_state_dict(first.state_dict())
    assert [b["index"].tolist() for b in second] == full[4:]


def _on_host(loader) -> list[dict]:
    """One epoch of `loader`, each tensor copied to the host as it comes (DALI reuses its output buffers)."""
    return [{k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in b.items()} for b in loader]


def test_the_frame_cache_keeps_the_cpu_camera_while_nvdec_decodes_its_own_each_epoch(gpu_dataset):
    """The decoded-frame cache on a GPU node: NVDEC's pictures are CUDA memory and not kept, so its cameras (H.264,
    HEVC, VP9 here) are fetched and decoded every epoch (a warning names them), while the AV1 camera (torchcodec)
    comes from the cache in epoch 2 — and both epochs' batches equal the uncached loader's, every key and pixel."""
    # drop_last=False: every frame asked every epoch (a dropped remainder differs by epoch: frames epoch 1 never saw)
    args = dict(batch_size=4, episode_pool_size=3, seed=5, delta_timestamps=DELTAS, image_dtype="uint8",
                drop_last=False, decode={FRONT: "gpu", SIDE: "gpu", TOP: "gpu", WRIST: "cpu"})
    plain = StreamLoader(str(gpu_dataset), **args)
    want = [_on_host(plain) for _ in range(2)]
    plain.close()
    with pytest.warns(UserWarning, match="are decoded every epoch"):
        cached = StreamLoader(str(gpu_dataset), frame_cache_bytes=1 << 30, **args)
    assert set(cached.stats()["frames"]["cameras"]) == {WRIST}, cached.routes
    misses = []
    for epoch in range(2):
        got = _on_host(cached)
        misses.append(cached.stats()["frames"]["misses"])
        assert len(got) == len(want[epoch])
        for a, b in zip(got, want[epoch]):
            assert a.keys() == b.keys()
            for key in a:
                if isinstance(a[key], torch.Tensor):
                    assert torch.equal(a[key], b[key]), (epoch, key, cached.routes.get(key))
                else:
                    assert a[key] == b[key], (epoch, key)
    stats = cached.stats()["frames"]
    assert misses[0] > 0 and misses[1] == misses[0] and stats["hits"] >= misses[0], stats  # epoch 2: all held
    cached.close()


def test_the_make_demo_sample_decodes_on_this_gpu(small_dataset):
    """128x96 (the demo's size): too small for VP9/HEVC NVDEC, so auto routes them to CPU instead of failing."""
    loader = StreamLoader(str(small_dataset), batch_size=4, image_dtype="uint8")
    assert loader.routes[TOP] == "torchcodec" and "below NVDEC's minimum 128x128" in loader.route_reasons[TOP]
    batch = next(iter(loader))
    _check_ids(batch, loader, list(loader.routes), steps={})  # no delta_timestamps: one frame per camera
    assert {str(v.device) for v in batch.values() if isinstance(v, torch.Tensor)} == {loader.device}


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_second_gpu_holds_images_and_tables(gpu_dataset):
    loader = StreamLoader(str(gpu_dataset), batch_size=4, device="cuda:1", delta_timestamps=DELTAS,
                          image_dtype="uint8", decode=dict.fromkeys((FRONT, SIDE, TOP), "gpu"))
    assert loader.dali_device == 1
    batch = next(iter(loader))
    assert {str(v.device) for v in batch.values() if isinstance(v, torch.Tensor)} == {"cuda:1"}
    _check_ids(batch, loader, [FRONT, SIDE, TOP, WRIST])


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs")
def test_each_torchrun_rank_decodes_on_its_local_gpu(gpu_dataset):
    """A rank that did not call set_device decodes on LOCAL_RANK's GPU (naming the GPU initialised CUDA
    before the current device was read, so every rank took GPU 0). A real process per rank, as torchrun starts."""
    import os
    import subprocess
    import sys

    script = ("import torch; from dali_stream import StreamLoader; "
              f"l = StreamLoader({str(gpu_dataset)!r}, batch_size=2, image_dtype='uint8'); b = next(iter(l)); "
              "print(l.device, l.dali_device, sorted({str(v.device) for v in b.values() if hasattr(v, 'device')}))")
    for rank in (0, 1):
        env = {**os.environ, "LOCAL_RANK": str(rank), "RANK": str(rank), "WORLD_SIZE": "2"}
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr[-3000:]
        assert out.stdout.split("\n")[-2] == f"cuda:{rank} {rank} ['cuda:{rank}']", out.stdout


@pytest.fixture(scope="module", params=["lerobot-g2", "lerobot-g30", "continuous-g2", "continuous-g30"])
def nvdec_boundary_dataset(request, tmp_path_factory):
    """test_boundaries' matrix at 192x160 (every codec above NVDEC's minimum)."""
    from tests.loader.test_boundaries import MATRIX, boundary_dataset

    recorder, gop, fps, pix_fmt, cameras = MATRIX[request.param]
    root = boundary_dataset(tmp_path_factory.mktemp("gpu-bounds") / request.param, recorder, gop, fps, pix_fmt,
                            cameras, height=160, width=192)
    return root, fps, cameras


@pytest.mark.parametrize("join_streams", [None, 1, 0], ids=["joined-engines", "joined-1", "per-sample"])
@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
def test_nvdec_every_frame_at_every_episode_boundary(nvdec_boundary_dataset, windowed, join_streams):
    """The boundary matrix (first and last frame of every episode, windows past both ends) through NVDEC: H.264
    with B-frames, HEVC open (lerobot) and closed GOP, VP9 on the GPU; AV1 on torchcodec beside them. A batch's
    clips joined into as many streams as NVDEC engines, into one, and one clip per sample (graph/joined.py)."""
    from tests.loader.test_boundaries import check_every_frame

    root, fps, cameras = nvdec_boundary_dataset
    # NVDEC demanded where the table takes the codec: `auto` keeps kinds not proven yet (decode/proven.py: this is
    # the proof) and one-frame samples on per-sample clips (decode/speed.py) on the CPU
    decode = {f"observation.images.{c}": "gpu" if c in ("front", "side", "top") else "auto" for c in cameras}
    with StreamLoader(str(root), batch_size=2, decode=decode, device="cuda") as loader:
        assert {k.rsplit(".", 1)[1] for k in _nvdec_cameras(loader)} == {"front", "side", "top"}, loader.routes
    check_every_frame(root, fps, cameras, decode=decode, windowed=windowed, device="cuda", join_streams=join_streams)


def test_nvdec_threads_are_not_pinned_to_cores(gpu_dataset):
    """`affine=False`: DALI's decoder threads may run on every core this process may use, not only on
    the cores near GPU 0 (where it pins them by default, whichever GPU a rank's CUDA_VISIBLE_DEVICES names)."""
    import os

    allowed = os.sched_getaffinity(0)
    with StreamLoader(str(gpu_dataset), batch_size=4, decode={FRONT: "gpu"}, device="cuda") as loader:
        assert _nvdec_cameras(loader)
        next(iter(loader))
        pinned = {tid: os.sched_getaffinity(tid) for tid in map(int, os.listdir("/proc/self/task"))}
    narrowed = {tid: sorted(cpus) for tid, cpus in pinned.items() if cpus != allowed}
    assert not narrowed, f"threads pinned to fewer cores than the process's {sorted(allowed)}: {narrowed}"


def test_auto_takes_torchcodec_where_nvdec_was_measured_slower(gpu_dataset):
    """decode/speed.py: one frame per camera on per-sample clips (DALI 2.4) was measured slower on NVDEC than on
    torchcodec, so `auto` routes those cameras to torchcodec and says why, where the kind is proven at all
    (decode/proven.py; unproven kinds go to the CPU first, and say that); decode='gpu' keeps NVDEC."""
    from dali_stream.decode.proven import installed_dali, unproven

    with StreamLoader(str(gpu_dataset), batch_size=2, decode="auto", device="cuda", join_streams=0,
                      delta_timestamps={FRONT: DELTAS[FRONT]}) as loader:
        doubt = unproven(installed_dali(), "hevc", False)
        if doubt is None:
            assert loader.routes[SIDE] == "torchcodec" and "torchcodec is faster" in loader.route_reasons[SIDE]
        else:
            assert loader.routes[SIDE] == "torchcodec" and doubt in loader.route_reasons[SIDE]
    with StreamLoader(str(gpu_dataset), batch_size=2, decode={SIDE: "gpu"}, device="cuda", join_streams=0) as loader:
        assert loader.routes[SIDE] == "nvdec"


@pytest.fixture(scope="module", params=["wild", "hd"])
def nvdec_wild_dataset(request, tmp_path_factory):
    """tests/decode/test_wild_encodings.py's files (each encoder's defaults: x264 B-frames, x265 open GOP, two-pass VP9
    alt-ref frames, SVT-AV1/libaom hidden frames; H.264 1080p coded as 1088 rows) at NVDEC sizes. Without the
    ffmpeg command (the lent H100 had none), the cameras it encodes (VP9, libaom) are left out."""
    from tests.decode.test_wild_encodings import HD, WILD, have_libaom, wild_dataset

    if request.param == "hd":
        return wild_dataset(tmp_path_factory.mktemp("gpu-wild") / "hd", HD, 1080, 1920, episodes=3, min_length=6,
                            max_length=11)
    cameras = WILD if have_libaom() else {k: v for k, v in WILD.items() if k not in ("top", "aux")}
    return wild_dataset(tmp_path_factory.mktemp("gpu-wild") / "wild", cameras, 160, 192)


@pytest.mark.parametrize("join_streams", [None, 0], ids=["joined-engines", "per-sample"])
@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
def test_nvdec_every_frame_of_streams_encoded_in_the_wild(nvdec_wild_dataset, windowed, join_streams):
    from tests.loader.test_boundaries import check_every_frame

    root, cameras = nvdec_wild_dataset
    decode = {f"observation.images.{c}": "gpu" if codec in ("h264", "hevc", "vp9") else "auto"
              for c, codec in cameras.items()}
    check_every_frame(root, FPS, cameras, decode=decode, windowed=windowed, device="cuda", join_streams=join_streams)


# ---- the open-decoder engine (decode/engine.py, nvdec_engine="open"): PyNvVideoCodec's decoders kept open ------------
def _open_engine_or_skip():
    try:
        import PyNvVideoCodec  # type: ignore[import-not-found]  # noqa: F401
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"PyNvVideoCodec does not import here ({type(exc).__name__}: {exc}); "
                    "pip install '.[nvdec]' in the checkout (or stage its wheel) to test the open-decoder engine")


@pytest.mark.child  # PyNvVideoCodec ends the process on a failed driver call: tests/support/child.py
@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
def test_open_engine_every_frame_at_every_episode_boundary(nvdec_boundary_dataset, windowed):
    """The boundary matrix through NVDEC on decoders that stay open (route nvdec-open), frames into the graph on the
    GPU; AV1 beside them on torchcodec (no AV1 in an H100's NVDEC)."""
    from tests.loader.test_boundaries import check_every_frame

    _open_engine_or_skip()
    root, fps, cameras = nvdec_boundary_dataset
    decode = {f"observation.images.{c}": "gpu" if c in ("front", "side", "top") else "auto" for c in cameras}
    with StreamLoader(str(root), batch_size=2, decode=decode, device="cuda", nvdec_engine="open") as loader:
        assert {k.rsplit(".", 1)[1] for k, r in loader.routes.items() if r == "nvdec-open"} == {"front", "side", "top"}
    check_every_frame(root, fps, cameras, decode=decode, windowed=windowed, device="cuda", nvdec_engine="open")


@pytest.mark.child  # PyNvVideoCodec ends the process on a failed driver call: tests/support/child.py
@pytest.mark.parametrize("windowed", [False, True], ids=["single", "window"])
def test_open_engine_every_frame_of_streams_encoded_in_the_wild(nvdec_wild_dataset, windowed):
    from tests.loader.test_boundaries import check_every_frame

    _open_engine_or_skip()
    root, cameras = nvdec_wild_dataset
    decode = {f"observation.images.{c}": "gpu" if codec in ("h264", "hevc", "vp9") else "auto"
              for c, codec in cameras.items()}
    check_every_frame(root, FPS, cameras, decode=decode, windowed=windowed, device="cuda", nvdec_engine="open")


@pytest.mark.child  # PyNvVideoCodec ends the process on a failed driver call: tests/support/child.py
def test_open_engine_matches_the_cpu_reference_and_keeps_its_decoders(gpu_dataset):
    """nvdec-open and cpu-open (the same packet feeds on FFmpeg's decoders) give the same frame ids; the NVDEC
    decoders are opened once per (decode thread, camera), not per batch; batches are CUDA tensors."""
    _open_engine_or_skip()
    settings = dict(batch_size=8, delta_timestamps=DELTAS, seed=1, image_dtype="uint8")
    keys = [FRONT, SIDE]
    with StreamLoader(str(gpu_dataset), decode={FRONT: "gpu", SIDE: "gpu"}, device="cuda", nvdec_engine="open",
                      decode_threads=2, **settings) as gpu:
        assert [gpu.routes[k] for k in keys] == ["nvdec-open", "nvdec-open"]
        batches = [b for _, b in zip(range(6), gpu)]
        stats = gpu.stats()["engines"]["nvdec-open"]
    assert stats["decoders_opened"] <= 2 * len(keys) and stats["feeds"] >= 6
    with StreamLoader(str(gpu_dataset), decode={FRONT: "cpu-open", SIDE: "cpu-open"}, device="cpu",
                      **settings) as cpu:
        reference = [b for _, b in zip(range(6), cpu)]
    for got, want in zip(batches, reference):
        assert got[FRONT].is_cuda and got["episode_index"].is_cuda
        assert torch.equal(got["frame_index"].cpu(), want["frame_index"])
        for k in keys:
            flat_got = got[k].cpu().reshape(-1, *got[k].shape[-3:])
            flat_want = want[k].reshape(-1, *want[k].shape[-3:])
            assert [read_ids(f) for f in flat_got] == [read_ids(f) for f in flat_want], k


@pytest.mark.child  # PyNvVideoCodec ends the process on a failed driver call: tests/support/child.py
def test_closed_open_engines_give_their_gpu_memory_back(gpu_dataset):
    """Loaders on nvdec-open built and closed one after another in one process: each engine's streams' cached memory
    goes back to the device when it closes (torch keeps a stream's freed blocks for that stream alone: without it a
    process that built 18 engines held 129 GiB of an H200 and the next processes on the GPU ran out of memory)."""
    _open_engine_or_skip()
    settings = dict(decode={FRONT: "gpu", SIDE: "gpu"}, batch_size=16, delta_timestamps=DELTAS, device="cuda",
                    nvdec_engine="open", decode_threads=2)
    reserved = []
    for _ in range(4):
        with StreamLoader(str(gpu_dataset), **settings) as loader:
            for _, batch in zip(range(3), loader):
                assert batch[FRONT].is_cuda
            del batch
        reserved.append(torch.cuda.memory_reserved())
    # what stays is what the next loader reuses (its batches' memory on the current stream); before, each engine's
    # decode streams kept their conversions' blocks, usable by those streams alone, and reserved grew per loader
    assert reserved[-1] <= reserved[0] + (16 << 20), [r >> 20 for r in reserved]


@pytest.fixture(scope="module")
def h264_10fps(tmp_path_factory):
    """A second embodiment for mixtures: H.264 at 10 fps, a 7-dof state, no side camera, ids painted from 100."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    return write_sample(tmp_path_factory.mktemp("gpu") / "h264_10fps", SampleSpec(
        episodes=4, min_length=12, max_length=24, height=160, width=192, gop=8, episodes_per_file=2, fps=10,
        state_dim=7, id_offset=100, cameras=parse_cameras("front:h264"), seed=5))


def _check_mixture_batch(batch, route: str) -> set:
    """Every frame of a mixture batch (four-codec member 0, h264_10fps member 1) the planned one, the camera member
    1 lacks zeros; the members seen."""
    seen = set()
    for i in range(len(batch["task"])):
        m = int(batch["dataset_index"][i])
        seen.add(m)
        want = (int(batch["episode_index"][i]) + (100 if m == 1 else 0), int(batch["frame_index"][i]))
        assert read_ids(batch[FRONT][i]) == want, (route, m)
        if m == 1:
            assert bool(batch[f"{SIDE}_is_missing"][i]) and not batch[SIDE][i].any()
        else:
            assert read_ids(batch[SIDE][i]) == want
    return seen


@pytest.mark.child  # PyNvVideoCodec ends the process on a failed driver call: tests/support/child.py
def test_the_open_engine_does_not_wait_behind_the_training_stream(gpu_dataset, h264_10fps):
    """A mixture on nvdec-open while seconds of matmuls are queued on the default stream (a training step): batches
    are handed out before those kernels end (the engine joins and DALI copies on a stream of their own, never the
    legacy default one; the batch is made on the loader's stream and the samples a member lacks the camera of are
    zeroed without reading the mask back), and every frame is the planned one (the per-member join reads complete
    frames)."""
    from dali_stream import Member, Mixture

    _open_engine_or_skip()
    mix = Mixture((Member(str(gpu_dataset), name="four"), Member(str(h264_10fps), name="h264", weight=2.0)))
    with StreamLoader(mix, decode={FRONT: "gpu", SIDE: "gpu"}, batch_size=8, episode_pool_size=4, seed=1,
                      nvdec_engine="open", delta_timestamps={"action": [0.0, 0.1]}) as loader:
        assert loader.routes[FRONT] == loader.routes[SIDE] == "nvdec-open"
        it = iter(loader)
        first = next(it)
        torch.cuda.synchronize()
        x = torch.randn(8192, 8192, device=loader.device)
        ended = torch.cuda.Event()
        with torch.cuda.stream(torch.cuda.default_stream(x.device)):
            for _ in range(200):  # ~1 TFLOP each: seconds of work on the default stream
                x = torch.tanh(x @ x)
            ended.record()
        batches = [next(it) for _ in range(4)]
        still_running = not ended.query()
        seen = set()
        for batch in [first, *batches]:
            seen |= _check_mixture_batch(batch, "nvdec-open")
    assert still_running, "the loader handed out 4 batches only after the default stream's kernels ended"
    assert seen == {0, 1}


@pytest.mark.child  # PyNvVideoCodec ends the process on a failed driver call: tests/support/child.py
@pytest.mark.parametrize("engine", ["dali", "open"])
def test_a_mixture_on_nvdec(gpu_dataset, h264_10fps, engine):
    """Two members at 192x160: the four-codec dataset and an H.264 one at 10 fps with a 7-dof state and no side
    camera (its ids painted from 100). decode='gpu' keeps the cameras both members have on NVDEC where this GPU
    decodes them; the side camera, which one member lacks, is on NVDEC only with the open engine (DALI's decoder
    needs a stream for every sample). Every frame the planned one, the missing camera zeros."""
    from dali_stream import Member, Mixture

    mix = Mixture((Member(str(gpu_dataset), name="four"), Member(str(h264_10fps), name="h264", weight=2.0)))
    settings = dict(batch_size=8, episode_pool_size=4, seed=1, nvdec_engine=engine,
                    delta_timestamps={"action": [0.0, 0.1]})
    if engine == "open":
        _open_engine_or_skip()
        loader = StreamLoader(mix, decode={FRONT: "gpu", SIDE: "gpu"}, **settings)
        assert loader.routes[FRONT] == loader.routes[SIDE] == "nvdec-open"
    else:
        with pytest.raises(DeviceError, match="needs a stream for every sample"):
            StreamLoader(mix, decode={FRONT: "gpu", SIDE: "gpu"}, **settings)
        loader = StreamLoader(mix, decode={FRONT: "gpu"}, **settings)
        assert loader.routes[FRONT] == "nvdec" and loader.routes[SIDE] == "torchcodec"
    seen = set()
    for batch in [b for _, b in zip(range(6), loader)]:
        seen |= _check_mixture_batch(batch, loader.routes[FRONT])
    assert seen == {0, 1}


# ---- colours: every NVDEC route against FFmpeg's own decode (tests/decode/test_colour.py does the CPU routes) ------------
@pytest.fixture(scope="module")
def colour_clips(tmp_path_factory):
    """Bars and ramps (tools/colour_bars.py) at 256x192 (above NVDEC's minimum for HEVC), each tagging, the codecs
    this GPU's NVDEC decodes."""
    from dali_stream.tools.colour_bars import TAGGINGS, write_bars

    root = tmp_path_factory.mktemp("colour")
    gpu = _node().gpu
    codecs = [c for c in ("h264", "hevc", "vp9", "av1") if gpu is not None and gpu.decodes(c)]
    return {(c, t.name): write_bars(root / f"{c}-{t.name}.mp4", c, t, height=192, width=256)
            for c in codecs for t in TAGGINGS}


def test_colour_on_dalis_nvdec(colour_clips):
    """DALI's mixed decoder (route nvdec) against FFmpeg: at most 2 levels on every clip."""
    from dali_stream.decode.route import NVDEC
    from dali_stream.graph.pipeline import decode_once
    from dali_stream.tools.colour_bars import ffmpeg_rgb
    from tests.decode.test_colour import _far

    far = {}
    for name, path in colour_clips.items():
        want = ffmpeg_rgb(path)
        far[name] = _far(decode_once(path.read_bytes(), list(range(len(want))), NVDEC), want)
    assert max(far.values()) <= 2, far


@pytest.mark.child  # PyNvVideoCodec ends the process on a failed driver call: tests/support/child.py
def test_colour_on_the_open_engine(colour_clips):
    """nvdec-open (NV12 out of NVDEC, converted by decode.colour) against FFmpeg: at most 2 levels on every clip."""
    from dali_stream.decode.route import NVDEC_OPEN
    from dali_stream.tools.colour_bars import ffmpeg_rgb
    from tests.decode.test_colour import _far, _segment

    _open_engine_or_skip()
    engine = NVDEC_OPEN.make_engine(1, 0, {"bars": (192, 256)})
    far = {}
    try:
        for name, path in colour_clips.items():
            seg = _segment(path, name[0])
            want = ffmpeg_rgb(path)
            got, _ = engine.decode("bars", [seg], [np.arange(len(want))])
            far[name] = _far(got.cpu().numpy(), want)
    finally:
        engine.close()
    assert max(far.values()) <= 2, far
