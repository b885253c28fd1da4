"""dali_stream.dali: a StreamLoader's batches as inputs of the user's own DALI pipeline (real DALI CPU pipelines on the
sample writer's data): equal to the loader's, resumable with DALI's prefetching counted, the plan's random numbers
the loader's augment= hook gets, the named errors, and the example in pipelines/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dali_stream.dali as dsd
from dali_stream import ConfigError, StateError, StreamLoader
from dali_stream.dali.schema import channels_last

REPO = Path(__file__).resolve().parents[2]
FRONT, TOP = "observation.images.front", "observation.images.top"
SETTINGS = dict(batch_size=4, episode_pool_size=2, drop_last=False, device="cpu", seed=5,
                delta_timestamps={FRONT: [-1 / 30, 0.0], "action": [0.0, 1 / 30, 2 / 30]})
EPOCHS = 2


def _pipeline(source, body=None, **kw):
    """A pipeline reading `source`, through `body(inputs)` where given, returning `outputs(inputs)`."""
    from nvidia.dali import pipeline_def

    @pipeline_def
    def user_pipeline(source):
        inputs = dsd.read(source)
        if body is not None:
            body(inputs)
        return dsd.outputs(inputs)

    args = dict(batch_size=source.batch_size, device_id=source.device_id, num_threads=1)
    args.update(kw)
    return user_pipeline(source, **args)


def _iterator(source, pipe):
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    return DALIGenericIterator(pipe, **source.iterator_args())


def _batches(iterator, epochs):
    """The iterator's batches over `epochs` epochs (a `for` each), each value copied out of DALI's memory."""
    for _ in range(epochs):
        for (batch,) in iterator:
            yield {k: v.clone() for k, v in batch.items()}


def _equal(a: dict, b: dict, keys=None) -> None:
    keys = keys if keys is not None else sorted(set(a) | set(b))
    for key in keys:
        assert a[key].dtype == b[key].dtype and a[key].shape == b[key].shape, key
        assert torch.equal(a[key], b[key]), key


@pytest.fixture(scope="module")
def full_run(small_dataset):
    """Two epochs through a pipeline that only reads the source: the uninterrupted run."""
    with dsd.Source(str(small_dataset), **SETTINGS) as source:
        pipe = _pipeline(source)
        out = list(_batches(_iterator(source, pipe), EPOCHS))
        return out, source.skipped, len(out) // EPOCHS


def test_pipeline_batches_equal_the_loaders(small_dataset, full_run):
    """Before any operator of the user's, every key and value equals StreamLoader's batches for the same settings
    (frames uint8 HWC where the loader's are (3, H, W) stored channels last), over two epochs with a short last
    batch; the plan's random numbers ride beside them."""
    batches, skipped, per_epoch = full_run
    loader = StreamLoader(str(small_dataset), image_dtype="uint8", memory_format="channels_last", **SETTINGS)
    expected = [b for _ in range(EPOCHS) for b in loader]
    assert len(batches) == len(expected) and per_epoch == len(loader)
    assert len(batches[per_epoch - 1]["index"]) < SETTINGS["batch_size"]  # the short last batch, as the loader's
    assert skipped == ["task"]
    for got, want in zip(batches, expected):
        tensors = {k: channels_last(v) if k in (FRONT, TOP) else v for k, v in want.items() if k != "task"}
        assert set(got) == set(tensors) | {FRONT + dsd.RAND, TOP + dsd.RAND}
        _equal(got, tensors, sorted(tensors))
        assert got[FRONT].shape[1:] == (2, 96, 128, 3) and got[TOP + dsd.RAND].shape == (len(got["index"]), 16)
    assert not torch.equal(batches[0][FRONT + dsd.RAND], batches[per_epoch][FRONT + dsd.RAND])


@pytest.mark.parametrize("stop", ["mid_epoch", "epoch_end", "next_epoch"])
def test_a_resumed_run_yields_the_uninterrupted_runs_next_batches(small_dataset, full_run, stop):
    """A run stopped after k batches and resumed from its state yields the uninterrupted run's batches k+1...,
    though DALI had run batches ahead of the loop (the loader itself had handed out more than k)."""
    batches, _, per_epoch = full_run
    k = {"mid_epoch": 4, "epoch_end": per_epoch, "next_epoch": per_epoch + 2}[stop]
    with dsd.Source(str(small_dataset), **SETTINGS) as first:
        taken = _batches(_iterator(first, _pipeline(first)), EPOCHS)
        for _, batch in zip(range(k), taken):
            pass
        state = json.loads(json.dumps(first.state_dict()))
        ahead = first.loader.state_dict()
        if stop != "epoch_end":  # DALI prepared batches the loop has not had: the loader counted them
            assert (ahead["epoch"], ahead["batches_consumed"]) > (state["epoch"], state["batches_consumed"])
    _equal(batch, batches[k - 1])
    with dsd.Source(str(small_dataset), **SETTINGS) as again:
        again.load_state_dict(state)
        rest = list(_batches(_iterator(again, _pipeline(again)), EPOCHS - k // per_epoch))
    assert len(rest) == len(batches) - k
    for got, want in zip(rest, batches[k:]):
        _equal(got, want)
    # the same state resumes a StreamLoader (one format): its next batch is the same one
    with StreamLoader(str(small_dataset), image_dtype="uint8", memory_format="channels_last", **SETTINGS) as loader:
        loader.load_state_dict(state)
        assert torch.equal(next(iter(loader))["index"], batches[k]["index"])


def test_the_random_numbers_are_the_ones_the_loaders_augment_hook_gets(small_dataset):
    """The same augmentation written for StreamLoader(augment=...) and run in the user's pipeline on `<camera>_rand`
    gives the same pixels: the numbers are the plan's, per sample and camera."""
    from dali_stream.augment import random_resized_crop_and_jitter as hook

    args = dict(SETTINGS, image_dtype="uint8", memory_format="channels_last")
    loader = StreamLoader(str(small_dataset), augment=hook, **args)
    plain = StreamLoader(str(small_dataset), **args)

    def augment(inputs):
        inputs[FRONT] = hook(inputs[FRONT], FRONT, inputs[FRONT + dsd.RAND])

    with dsd.Source(str(small_dataset), **SETTINGS) as source:
        got = list(_batches(_iterator(source, _pipeline(source, augment)), 1))
    for mine, theirs, untouched in zip(got, loader, plain):
        assert not torch.equal(channels_last(untouched[FRONT]), mine[FRONT])  # the hook changed the pixels
        assert torch.equal(channels_last(theirs[FRONT]), mine[FRONT])
    loader.close()
    plain.close()


def test_named_errors_say_the_fix(small_dataset):
    from nvidia.dali import pipeline_def

    source = dsd.Source(str(small_dataset), **SETTINGS)
    with pytest.raises(dsd.PipelineError, match=r"inside your @pipeline_def"):
        dsd.read(source)
    with pytest.raises(dsd.BatchSizeMismatchError, match=r"batch_size=5 .* 4 samples.*batch_size=source.batch_size"):
        _pipeline(source, batch_size=5)

    @pipeline_def
    def only(source, keys):
        inputs = dsd.read(source, keys=keys)
        with pytest.raises(KeyError, match=r"'action_is_padding' is not an output.*did you mean 'action_is_pad'"):
            inputs["action_is_padding"]  # a dict's KeyError, named: UnknownOutputError
        return tuple(inputs.values())

    args = dict(batch_size=4, device_id=None, num_threads=1)
    with pytest.raises(dsd.UnknownOutputError, match=r"'observation.images.wrist' is not an output.*did you mean "
                                                     r"'observation.images.front'"):
        only(source, [FRONT, "observation.images.wrist"], **args)
    pipe = only(source, ["index", FRONT + dsd.RAND], **args)
    with pytest.raises(dsd.SourceInUseError, match=r"already read by another pipeline.*another Source"):
        _pipeline(source)
    with pytest.raises(dsd.PipelineError, match=r"return dali_stream.dali.outputs\(inputs\)"):
        source.iterator_args()
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    iterator = DALIGenericIterator(pipe, **source.iterator_args(output_map=["index", "rand"]))
    first = next(iterator)[0]
    assert first["index"].shape == (4,) and first["rand"].shape == (4, 16)
    state = source.state_dict()
    with pytest.raises(StateError, match=r"after the pipeline began.*new Source"):
        source.load_state_dict(state)
    assert state["batches_consumed"] == 1 and source.loader.state_dict()["batches_consumed"] == 3  # 2 run ahead
    source.close()
    assert source.state_dict() == state  # where the loop stood, after close too
    with pytest.raises(dsd.SourceClosedError, match=r"Source was closed.*build a new"):
        for _ in range(5):  # past what DALI prepared before the source closed
            next(iterator)
    with pytest.raises(dsd.SourceClosedError, match=r"Source was closed"):
        _pipeline(source)


def test_a_closed_loader_is_refused(small_dataset):
    loader = StreamLoader(str(small_dataset), **SETTINGS)
    with pytest.raises(ConfigError, match=r"loader's own settings"):
        dsd.Source(loader, batch_size=5)
    source = dsd.Source(loader)
    loader.close()
    with pytest.raises(dsd.SourceClosedError, match=r"StreamLoader was closed.*new loader"):
        _pipeline(source)
    with pytest.raises(dsd.SourceClosedError, match=r"given a closed StreamLoader"):
        dsd.Source(loader)


def test_the_example_trains_and_resumes(small_dataset, tmp_path):
    """pipelines/dali_training.py: fn.resize + fn.crop_mirror_normalize in the user's pipeline, a training loop, and
    a run resumed from its state continuing with the loader's next batches."""
    script = [sys.executable, str(REPO / "pipelines" / "dali_training.py"), str(small_dataset), "--batch-size", "2",
              "--device", "cpu", "--size", "32"]
    state = tmp_path / "state.json"

    def run(*extra):
        proc = subprocess.run([*script, *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout.strip().splitlines()[-1])

    first = run("--batches", "3", "--checkpoint", str(state))
    assert first["batches"] == 3 and first["shapes"][FRONT] == [2, 3, 32, 32] and first["shapes"]["action"] == [2, 4, 6]
    assert first["state"] == {"epoch": 0, "batches_consumed": 3}
    resumed = run("--batches", "2", "--resume", str(state))
    with StreamLoader(str(small_dataset), batch_size=2, device="cpu",
                      delta_timestamps={"action": [i / 30 for i in range(4)]}) as loader:
        expected = [b["index"].tolist() for _, b in zip(range(5), loader)]
    assert first["indices"] + resumed["indices"] == expected


@pytest.mark.gpu
def test_frames_enter_the_graph_on_the_gpu_without_a_host_copy(small_dataset):
    """On a GPU node the loader's batches are CUDA tensors: the frames reach the user's graph through a device="gpu"
    external source, handed to DALI as the CUDA tensors themselves (no host copy), the plan's numbers on the CPU
    (operators' argument inputs), and the iterator's batches equal the loader's (NVDEC decodes the H.264 camera)."""
    settings = dict(SETTINGS, device="cuda", decode={FRONT: "gpu"})
    nodes: dict = {}
    with dsd.Source(str(small_dataset), **settings) as source:
        assert source.device_id is not None and source.loader.routes[FRONT] in ("nvdec", "nvdec-open")
        assert {source.schema[k].device for k in (FRONT, TOP, "index")} == {"gpu"}
        pipe = _pipeline(source, nodes.update)
        assert nodes[FRONT].device == "gpu" and nodes[TOP].device == "gpu" and nodes[FRONT + dsd.RAND].device == "cpu"
        iterator = _iterator(source, pipe)
        first = next(iterator)[0]
        handed = dict(zip((o.name for o in source._chosen), source._handed[0].arrays))
        assert isinstance(handed[FRONT], torch.Tensor) and handed[FRONT].is_cuda and handed[TOP].is_cuda
        got = [{k: v.clone() for k, v in first.items()}, *_batches(iterator, 1)]
    with StreamLoader(str(small_dataset), image_dtype="uint8", memory_format="channels_last", **settings) as loader:
        expected = list(loader)
    assert len(got) == len(expected)
    for mine, theirs in zip(got, expected):
        assert mine[FRONT].is_cuda and mine[FRONT].device == theirs[FRONT].device
        _equal(mine, {k: channels_last(v) if k in (FRONT, TOP) else v for k, v in theirs.items() if k != "task"},
               [k for k in theirs if k != "task"])
