"""Remote sources against a real HTTP server on loopback: same batches as local, faults cost retries not
samples, exhausted retries give a clear error without secrets."""

from __future__ import annotations

import time

import pytest
import torch

from dali_stream import RemoteError, StreamLoader

from .httpserver import Server

ARGS = dict(batch_size=3, episode_pool_size=2, seed=4, device="cpu", num_workers=2, drop_last=False,
            delta_timestamps={"action": [0.0, 1 / 30], "observation.images.top": [-1 / 30, 0.0]})


def _epoch(loader):
    return [b for b in loader]


def _same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert set(x) == set(y)
        for k in x:
            if k == "task":
                assert x[k] == y[k]
            else:
                assert torch.equal(x[k], y[k]), k


@pytest.fixture(scope="module")
def local_epoch(small_dataset):
    return _epoch(StreamLoader(str(small_dataset), **ARGS))


def test_http_epoch_equals_local(small_dataset, local_epoch):
    with Server(small_dataset) as url:
        loader = StreamLoader(f"{url}/", **ARGS)
        _same(_epoch(loader), local_epoch)
        stats = loader.remote_stats
    assert stats["requests"] > 0 and stats["bytes"] > 0 and stats["retries"] == 0


def test_faults_cost_retries_not_samples(small_dataset, local_epoch):
    with Server(small_dataset, fault_rate=0.1, seed=3) as url:
        loader = StreamLoader(url, remote_max_retries=8, **ARGS)
        _same(_epoch(loader), local_epoch)
        stats = loader.remote_stats
    assert stats["retries"] > 0, stats


def test_exhausted_retries_name_the_url_without_secrets(small_dataset, monkeypatch):
    monkeypatch.setenv("DALI_STREAM_REMOTE_MAX_RETRIES", "2")
    with Server(small_dataset, fail_paths=r"/videos/.*\.mp4") as url:
        secret_url = url.replace("http://", "http://alice:s3cr3t@")
        loader = StreamLoader(secret_url, **ARGS)
        t0 = time.perf_counter()
        with pytest.raises(RemoteError) as info:
            _epoch(loader)
        elapsed = time.perf_counter() - t0
    message = str(info.value)
    assert "127.0.0.1" in message and "/videos/" in message and "failed 3 times" in message
    assert "s3cr3t" not in message and "alice" not in message
    assert "episode" in message and "camera" in message
    assert elapsed < 60


def test_redact_removes_credentials_and_tokens():
    from dali_stream.remote import redact

    assert redact("https://bob:pw@host/x?token=abc&y=1&X-Amz-Signature=zz") == "https://host/x?token=***&y=1&X-Amz-Signature=***"


def test_retry_limit_must_be_a_number(small_dataset, monkeypatch):
    from dali_stream import ConfigError

    monkeypatch.setenv("DALI_STREAM_REMOTE_MAX_RETRIES", "lots")
    with Server(small_dataset) as url, pytest.raises(ConfigError, match="DALI_STREAM_REMOTE_MAX_RETRIES='lots'"):
        StreamLoader(url, **ARGS)


def test_meta_local_bulk_files_over_http(small_dataset, tmp_path, local_epoch):
    """data_files_root: metadata from one root, data/ and videos/ from another (here: a server)."""
    import shutil

    meta_only = tmp_path / "meta-only"
    shutil.copytree(small_dataset / "meta", meta_only / "meta")
    with Server(small_dataset) as url:
        loader = StreamLoader(str(meta_only), data_files_root=url, **ARGS)
        _same(_epoch(loader), local_epoch)
        assert loader.remote_stats["bytes"] > 0
    with pytest.raises(Exception, match="data_files_root"):
        StreamLoader(str(meta_only), data_files_root=str(tmp_path / "nowhere"), **ARGS)
