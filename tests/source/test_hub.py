"""hf:// sources through huggingface_hub's own HfFileSystem, against a Hub emulator on loopback
(tests/support/hubserver.py): a dataset repository read at a pinned `revision=`, metadata from a repository with
data/ and videos/ from an hf:// bucket, and the token kept out of errors."""

from __future__ import annotations

import re

import pytest
import torch

from dali_stream import StreamLoader
from tests.support.console import dali_stream
from tests.support.hubserver import Hub
from tests.support.take import same_batches

TOKEN = "hf_TESTtoken0123456789"
ARGS = dict(batch_size=3, episode_pool_size=2, seed=4, device="cpu", num_workers=2, drop_last=False,
            delta_timestamps={"action": [0.0, 1 / 30]})


@pytest.fixture(scope="module")
def older_dataset(tmp_path_factory):
    """What the repository held at tag v1.0: fewer, different episodes."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=4, min_length=8, max_length=14, gop=8, episodes_per_file=2,
                      cameras=parse_cameras("front:h264,top:vp9"), seed=9)
    return write_sample(tmp_path_factory.mktemp("ds") / "older", spec)


@pytest.fixture(scope="module")
def hub(small_dataset, older_dataset):
    with Hub(TOKEN) as hub:
        hub.add_dataset("lab/arm", {"main": small_dataset, "v1.0": older_dataset})
        hub.add_bucket("lab/arm-bulk", small_dataset)
        yield hub
    assert hub.unknown == [], "requests the emulator does not know"


def _options(hub, token=TOKEN) -> dict:
    return {"endpoint": hub.endpoint, "token": token}


def _indices(loader) -> list[torch.Tensor]:
    return [b["index"] for b in loader]


def _same_epoch(remote, local) -> None:
    same_batches([x for x in remote], [x for x in local])


def test_dataset_repository_at_main_and_at_a_pinned_revision(hub, small_dataset, older_dataset):
    _same_epoch(StreamLoader("hf://datasets/lab/arm", storage_options=_options(hub), **ARGS),
                StreamLoader(str(small_dataset), **ARGS))
    pinned = StreamLoader("hf://datasets/lab/arm", revision="v1.0", storage_options=_options(hub), **ARGS)
    assert pinned.meta.num_episodes == 4
    _same_epoch(pinned, StreamLoader(str(older_dataset), **ARGS))
    assert pinned.remote_stats["bytes"] > 0


def test_metadata_from_a_repository_bulk_files_from_a_bucket(hub, small_dataset):
    loader = StreamLoader("hf://datasets/lab/arm", data_files_root="hf://buckets/lab/arm-bulk",
                          storage_options=_options(hub), **ARGS)
    bytes_before = hub.counts["bytes"]
    _same_epoch(loader, StreamLoader(str(small_dataset), **ARGS))
    assert loader.meta.data_fs is not loader.meta.fs
    assert hub.counts["bytes"] - bytes_before <= loader.remote_stats["bytes"]  # nothing fetched behind our back


def test_unknown_revision_and_bad_token_are_clear_and_keep_the_token_secret(hub):
    with pytest.raises(Exception) as info:
        StreamLoader("hf://datasets/lab/arm", revision="v9", storage_options=_options(hub), **ARGS)
    assert "v9" in str(info.value) and TOKEN not in str(info.value)
    wrong = "hf_WRONGtoken999"
    with pytest.raises(Exception) as info:
        StreamLoader("hf://datasets/lab/arm", storage_options=_options(hub, wrong), **ARGS)
    assert wrong not in str(info.value) and "lab/arm" in str(info.value) and "credentials" in str(info.value)


def test_cli_inspect_reads_the_token_and_endpoint_from_the_environment(hub):
    """`dali-stream inspect --revision` in a real process, credentials from HF_TOKEN as users set them."""
    import json

    env = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "0"}
    proc = dali_stream("inspect", "hf://datasets/lab/arm", "--revision", "v1.0", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["episodes"] == 4 and report["revision"] == "v1.0"
    assert TOKEN not in proc.stdout + proc.stderr


def test_a_repo_id_as_lerobot_writes_it(hub, small_dataset, monkeypatch, tmp_path):
    """"lab/arm" (no local folder of that name) is hf://datasets/lab/arm, in the loader and the CLI; an unknown
    id says both readings failed."""
    import json

    from dali_stream import DatasetNotFoundError

    local = str(small_dataset)
    monkeypatch.chdir(tmp_path)  # no folder lab/arm here
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "lerobot-home"))  # nor a copy lerobot downloaded
    loader = StreamLoader("lab/arm", storage_options=_options(hub), **ARGS)
    assert loader.meta.source == "hf://datasets/lab/arm"
    _same_epoch(loader, StreamLoader(local, **ARGS))
    with pytest.raises(DatasetNotFoundError, match=r"'lab/nope' is not a local folder.*hf://datasets/lab/nope"):
        StreamLoader("lab/nope", storage_options=_options(hub), **ARGS)
    # huggingface_hub reads HF_ENDPOINT when imported: the CLI in its own process takes it from the environment
    proc = dali_stream("inspect", "lab/arm", "--json", env={"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN})
    assert proc.returncode == 0 and json.loads(proc.stdout)["source"] == "hf://datasets/lab/arm", proc.stderr


def test_demo_streams_a_hub_id_and_writes_nothing(hub, small_dataset, monkeypatch, tmp_path):
    """`dali-stream demo lab/arm` with no folder lab/arm streams the Hub dataset (its painted ids checked: it is a
    sample) instead of writing a sample into ./lab/arm."""
    monkeypatch.chdir(tmp_path)
    env = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN, "HF_HUB_OFFLINE": "0",
           "HF_LEROBOT_HOME": str(tmp_path / "lerobot-home")}
    proc = dali_stream("demo", "lab/arm", "--batches", 3, "--batch-size", 2, "--pool-size", 2, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "streaming lab/arm (hf://datasets/lab/arm); nothing is written" in proc.stdout
    painted = re.search(r"painted \(episode, frame\) = \((\d+), (\d+)\), table says \((\d+), (\d+)\)", proc.stdout)
    assert painted and painted.group(1, 2) == painted.group(3, 4), proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "demo wrote into the working folder"
    unknown = dali_stream("demo", "lab/nope", "--batches", 1, env=env)  # a new folder meant? it says how
    assert unknown.returncode != 0 and "pass ./lab/nope" in unknown.stdout, unknown.stdout + unknown.stderr
    assert "DatasetNotFoundError" in unknown.stderr and sorted(tmp_path.iterdir()) == []


def test_a_repo_id_lerobot_downloaded_is_read_from_disk_offline_too(small_dataset, monkeypatch, tmp_path):
    """A Hub id with a copy in lerobot's home (HF_LEROBOT_HOME/<id>, where lerobot downloads it) is read from
    there, no network; offline (HF_HUB_OFFLINE=1) the Hub cache's snapshot serves too; offline with neither, the
    error says where it looked."""
    import shutil

    from dali_stream import DatasetNotFoundError

    monkeypatch.chdir(tmp_path)
    home = tmp_path / "lerobot-home"
    shutil.copytree(small_dataset, home / "lab" / "arm")
    monkeypatch.setenv("HF_LEROBOT_HOME", str(home))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens: any Hub request would fail
    loader = StreamLoader("lab/arm", **ARGS)
    assert loader.meta.source == str(home / "lab" / "arm")
    _same_epoch(loader, StreamLoader(str(small_dataset), **ARGS))

    # the Hub cache's layout as huggingface_hub writes it (refs/main -> snapshots/<commit>/...)
    cache = tmp_path / "hub-cache"
    repo = cache / "datasets--lab--cell"
    shutil.copytree(small_dataset, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_OFFLINE", True)
    cached = StreamLoader("lab/cell", **ARGS)
    assert cached.meta.source == str(repo / "snapshots" / "0123abcd")
    with pytest.raises(DatasetNotFoundError, match=r"'lab/gone' is not a local folder .* no downloaded copy in "
                                                   r".*lerobot-home/lab/gone nor in the Hub cache .*HF_HUB_OFFLINE"):
        StreamLoader("lab/gone", **ARGS)


def test_a_mistyped_local_path_without_a_network_says_what_was_tried(monkeypatch, tmp_path, caplog):
    """"demo/sample" meant for ".demo/sample": no such folder, no lerobot copy, the Hub unreachable. The error
    says all three, and the fixes, instead of only advice about the network; the unreachable Hub is retried as
    the policy says once, not once more by a fallback check after the first round gave up."""
    import logging

    from dali_stream import DatasetNotFoundError, RemoteError

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_LEROBOT_HOME", str(tmp_path / "lerobot-home"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", "http://127.0.0.1:9")
    # huggingface_hub reports the unreachable endpoint as an error (RemoteError here) or, at its floor 1.6, as a
    # repository that does not exist: either way the message names what was tried and the typo
    with caplog.at_level(logging.WARNING, logger="dali_stream"), \
            pytest.raises((RemoteError, DatasetNotFoundError),
                          match=r"'demo/sample' is not a local folder \(working directory .*\) nor downloaded by "
                                r"lerobot .* read as the Hub dataset hf://datasets/demo/sample.*a typo"):
        StreamLoader("demo/sample", remote_max_retries=2, remote_timeout_s=5, **ARGS)
    retries = [r.getMessage() for r in caplog.records if " retry " in r.getMessage()]
    assert len(retries) <= 2, retries


def test_data_files_of_one_row_group_at_two_revisions_are_each_decoded_once(small_dataset, older_dataset, tmp_path):
    """lerobot's dataset tools write each data file as one row group: read from the Hub, each is fetched and decoded
    once into table_cache_dir, named by the blob the Hub reports, so two revisions of the same path never share
    one; a later run fetches none of them."""
    import shutil

    import pyarrow.parquet as pq

    def one_group(src, name):
        dst = tmp_path / name
        shutil.copytree(src, dst)
        for path in (dst / "data").glob("*/*.parquet"):
            pq.write_table(pq.read_table(path), path)
        return dst

    new, old = one_group(small_dataset, "new"), one_group(older_dataset, "old")
    folder = str(tmp_path / "tables")
    with Hub(TOKEN) as hub:
        hub.add_dataset("lab/edited", {"main": new, "v1.0": old})
        runs = []
        for revision, local in ((None, small_dataset), ("v1.0", older_dataset), (None, small_dataset)):
            remote = StreamLoader("hf://datasets/lab/edited", revision=revision, storage_options=_options(hub),
                                  table_cache_dir=folder, **ARGS)
            _same_epoch(remote, StreamLoader(str(local), **ARGS))
            groups = remote.stats()["bounded"]["shared_row_groups"]
            runs.append((groups["decoded"], groups["disk_hits"]))
    assert runs[0][0] > 0 and runs[1][0] > 0  # each revision's files decoded: none served from the other's
    assert runs[2] == (0, runs[0][0])  # main again: every group from the folder
    assert hub.unknown == []
