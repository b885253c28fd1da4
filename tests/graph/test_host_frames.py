"""Host frames (`graph.host`): CPU-decoded cameras of batches on the CPU are laid out by the workers into reused
buffers instead of by DALI's graph. Same values as the graph, and a buffer the caller still holds is never
written again."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from dali_stream import StreamLoader
from dali_stream.graph.buffers import BufferPool
from dali_stream.tools.paint import read_ids
from tests.support.take import take

FRONT, TOP = "observation.images.front", "observation.images.top"  # h264 via torchcodec, vp9 via DALI's CPU decoder
# decoded per sample: the VP9 camera in the graph (with the open episodes' frames held it is decoded on the workers)
BASE = dict(batch_size=4, episode_pool_size=2, seed=4, device="cpu", num_workers=2, episode_frames_bytes=0,
            decode="dali-cpu",
            delta_timestamps={FRONT: [-2 / 30, 0.0, 2 / 30], "action": [0.0, 1 / 30]})
FULL = (96, 128)  # the sample's frame size: a centre crop to it changes nothing but sends the camera through DALI


@pytest.mark.parametrize("options", [dict(image_dtype="uint8"), dict(image_dtype="float32"),
                                     dict(mean=(0.485, 0.456, 0.406), std=(0.229, 0.224, 0.225))])
def test_host_frames_equal_the_graphs(small_dataset, options):
    host = StreamLoader(str(small_dataset), **BASE, **options)
    graph = StreamLoader(str(small_dataset), crop=FULL, **BASE, **options)
    assert host.memory_budget()["host_frames"] == [FRONT] and graph.memory_budget()["host_frames"] == []
    # output-sized prepared batches: one batch ahead per worker plus one by default, against 2 per worker
    assert host.resolved.prefetch_batches == BASE["num_workers"] + 1 and graph.resolved.prefetch_batches == 2 * BASE["num_workers"]
    for a, b in zip(take(host, 3), take(graph, 3)):
        assert list(a) == list(b)  # same keys, same order
        for key in (FRONT, TOP):
            assert a[key].shape == b[key].shape and a[key].dtype == b[key].dtype and a[key].is_contiguous()
            if "mean" not in options:  # uint8, or x / 255 divided in both (lerobot's values)
                assert torch.equal(a[key], b[key]), key
            else:
                np.testing.assert_allclose(a[key].numpy(), b[key].numpy(), atol=2e-6)
        assert torch.equal(a["action"], b["action"]) and torch.equal(a["index"], b["index"])
    host.close()
    graph.close()


def test_float_frames_are_lerobots_division_of_the_decoded_bytes(small_dataset):
    """image_dtype="float32" gives lerobot's `frames.float() / 255` bit for bit (a multiply by float32(1 / 255)
    rounds about half the byte values one ulp away): the same batches in uint8, divided, equal them exactly."""
    settings = dict(BASE, decode="cpu")
    u8 = StreamLoader(str(small_dataset), image_dtype="uint8", **settings)
    f32 = StreamLoader(str(small_dataset), image_dtype="float32", **settings)
    assert f32.memory_budget()["host_frames"] == u8.memory_budget()["host_frames"] == f32.meta.camera_keys
    for a, b in zip(take(u8, 3), take(f32, 3)):
        for key in f32.meta.camera_keys:
            assert b[key].dtype == torch.float32 and torch.equal(b[key], a[key].float() / 255), key
    u8.close()
    f32.close()


def test_batches_without_a_graph_equal_the_graphs_key_for_key(small_dataset):
    """Every camera on torchcodec: no DALI graph at all (tables stacked by the loader) against the same batches
    through DALI (a full-frame crop keeps the graph): same keys in the same order, dtypes, shapes and values."""
    settings = dict(BASE, decode="cpu", image_dtype="uint8")
    host = StreamLoader(str(small_dataset), **settings)
    graph = StreamLoader(str(small_dataset), crop=FULL, **settings)
    assert host.host_batches and not graph.host_batches
    for a, b in zip(take(host, 4), take(graph, 4)):
        assert list(a) == list(b)
        assert a["task"] == b["task"]
        for key in a:
            if key != "task":
                assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
                assert torch.equal(a[key], b[key]), key
    host.close()
    graph.close()


def test_host_frames_show_the_planned_frames(small_dataset):
    loader = StreamLoader(str(small_dataset), image_dtype="uint8", **BASE)
    for batch in take(loader, 4):
        assert batch[FRONT].shape == (4, 3, 3, 96, 128)
        for i, (ep, fr) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
            pad = batch[f"{FRONT}_is_pad"][i].tolist()
            for t, delta in enumerate((-2, 0, 2)):
                if not pad[t]:
                    assert read_ids(batch[FRONT][i, t]) == (ep, fr + delta)
    loader.close()


def test_a_batch_the_caller_holds_is_never_overwritten(small_dataset):
    loader = StreamLoader(str(small_dataset), episode_pool_size=4, batch_size=2, seed=1, device="cpu",
                          num_workers=2, drop_last=True)
    assert len(loader) > 25
    it = iter(loader)
    first = next(it)
    held, view = first[FRONT], first[FRONT][1:3]
    want = held.clone()
    del first
    for _ in range(12):  # many times the buffers in flight
        next(it)
    assert torch.equal(held, want) and torch.equal(view, want[1:3])
    kept_before = loader.stats()["bounded"]["host_buffers"]["held"]
    del held, view
    gc.collect()
    for _ in range(12):
        next(it)
    # bounded: buffers are reused, the pool holds at most `keep` of a shape (both cameras, 2x3x96x128 float32, share
    # one shape: it may still grow towards that bound where the builders ran further ahead than before)
    pool = loader.stats()["bounded"]["host_buffers"]
    assert pool["reused"] > pool["allocated"] and kept_before <= pool["held"] <= pool["keep"] * 2 * 3 * 96 * 128 * 4
    assert loader.memory_budget()["host_buffers_peak"] == pool["held"]
    last = next(it)[FRONT]
    want_last = last.clone()
    it.close()
    loader.close()  # drops the pool's buffers; a batch the caller holds stays valid
    assert loader.stats()["bounded"]["host_buffers"]["held"] == 0 and torch.equal(last, want_last)


def test_buffer_pool_reuses_only_what_nobody_holds():
    pool = BufferPool(keep=2)
    a = pool.take((2, 3), np.float32)
    t = torch.from_numpy(a)[1:]  # a view through torch keeps the array referenced
    del a
    b = pool.take((2, 3), np.float32)
    assert not np.shares_memory(b, t.numpy())
    del t
    c = pool.take((2, 3), np.float32)  # the first buffer is free again
    assert pool.reused == 1 and pool.allocated == 2 and not np.shares_memory(b, c)
    d = pool.take((2, 3), np.float32)  # b and c held: a third one, beyond `keep`, is not kept
    assert pool.allocated == 3 and pool.nbytes == 2 * 2 * 3 * 4
    del b, c, d
    assert pool.take((2, 3), np.uint8).dtype == np.uint8 and pool.allocated == 4  # dtypes do not share


def test_with_every_camera_on_host_frames_there_is_no_graph_and_the_first_batch_waits_for_itself(small_dataset):
    """DALI asks its source for prefetch_queue_depth + 1 batches (3) before returning the first. With every camera
    on host frames a graph would only pass tables through: there is none, and batch 0 is handed over as soon as
    it is built, with the next ones building behind it."""
    for decode, held, graph in (("cpu", None, []), ("dali-cpu", None, []), ("dali-cpu", 0, [TOP])):
        loader = StreamLoader(str(small_dataset), batch_size=2, episode_pool_size=2, device="cpu", num_workers=2,
                              decode=decode, delta_timestamps={"action": [0.0, 1 / 30]}, episode_frames_bytes=held)
        host = loader.memory_budget()["host_frames"]  # the cameras through the graph: the others
        assert [k for k in loader.routes if k not in host] == graph and loader.host_batches == (not graph)
        it = iter(loader)
        try:
            first = next(it)
            producer = it.gi_frame.f_locals["producer"]
            if graph:  # DALI's external source: batches it took and has not returned yet
                assert len(producer.handed) + 1 == 3
            else:
                assert not producer.handed
                assert sorted(producer.futures) == list(range(1, 1 + loader.resolved.prefetch_batches))
            assert first["episode_index"].dtype == torch.int64 and first["action"].dtype == torch.float32
            assert first["action_is_pad"].dtype == torch.bool and first["action"].shape == (2, 2, 6)
        finally:
            it.close()
            loader.close()


@pytest.mark.parametrize("prefetch", [None, 1, 4])
def test_host_buffers_stay_within_the_memory_budget(small_dataset, prefetch):
    """Without a graph, at most prefetch_batches + 2 batches of host frames are alive (building, the caller's):
    what the pool allocated over two epochs stays within what memory_budget() says."""
    loader = StreamLoader(str(small_dataset), batch_size=4, episode_pool_size=2, device="cpu", num_workers=2,
                          decode="cpu", image_dtype="uint8", prefetch_batches=prefetch)
    assert loader.host_batches
    for _ in range(2):
        for _batch in loader:
            pass
    budget = loader.memory_budget()
    frame_bytes = 4 * 3 * 96 * 128  # batch x C x H x W, uint8, one step
    assert budget["prepared_batches"] == (loader.resolved.prefetch_batches + 2) * 2 * frame_bytes
    pool = loader.stats()["bounded"]["host_buffers"]
    assert pool["allocated"] * frame_bytes == budget["host_buffers_peak"] <= budget["prepared_batches"]
    loader.close()



def test_torchcodec_is_imported_only_by_a_loader_whose_cameras_decode_through_it(small_dataset):
    """torchcodec's import (~1.4 s: torch._dynamo) is paid by a loader with a camera on it, not by `import
    dali_stream` nor by a loader whose cameras decode elsewhere (the open engine's FFmpeg decoders, DALI's)."""
    import subprocess
    import sys

    code = ("import sys, json; from dali_stream import StreamLoader; imported = 'torchcodec' in sys.modules; "
            f"loader = StreamLoader({str(small_dataset)!r}, batch_size=2, device='cpu', decode=json.loads(sys.argv[1])); "
            "next(iter(loader)); loader.close(); print(imported, 'torchcodec' in sys.modules)")
    elsewhere = '{"observation.images.front": "cpu-open", "observation.images.top": "dali-cpu"}'
    seen = {decode: subprocess.run([sys.executable, "-c", code, decode], capture_output=True, text=True,
                                   check=True).stdout.split() for decode in (elsewhere, '"cpu"')}
    assert seen == {elsewhere: ["False", "False"], '"cpu"': ["False", "True"]}, seen


def test_a_loader_without_a_graph_never_imports_dali(small_dataset):
    """Batches that skip the graph (every camera on host frames, on the CPU) need nothing of DALI: the loader neither
    imports it to read its version or count its devices nor loads its torch plugin (~0.5-0.7 s of a start): `auto` on
    a CPU node, VP9 included; one whose VP9 camera DALI's CPU decoder decodes on the workers (the open episodes'
    frames held) imports DALI but not its plugin; a loader with a graph (that camera decoded per sample, in the graph)
    imports both."""
    import subprocess
    import sys

    code = ("import sys, json; from dali_stream import StreamLoader; "
            f"loader = StreamLoader({str(small_dataset)!r}, batch_size=2, device='cpu', **json.loads(sys.argv[1])); "
            "next(iter(loader)); loader.close(); "
            "print(loader.host_batches, 'nvidia.dali' in sys.modules, 'nvidia.dali.plugin.pytorch' in sys.modules)")
    runs = {"cpu": '{"decode": "cpu"}', "auto": '{"decode": "auto"}', "dali": '{"decode": "dali-cpu"}',
            "graph": '{"decode": "dali-cpu", "episode_frames_bytes": 0}'}
    seen = {name: subprocess.run([sys.executable, "-c", code, settings], capture_output=True, text=True,
                                 check=True).stdout.split() for name, settings in runs.items()}
    assert seen == {"cpu": ["True", "False", "False"], "auto": ["True", "False", "False"],
                    "dali": ["True", "True", "False"],
                    "graph": ["False", "True", "True"]}, seen
