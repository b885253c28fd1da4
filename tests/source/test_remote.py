"""Remote sources against real servers on loopback (an HTTP server with Range support, moto's S3 server,
and a fault-injecting proxy in front of either): the same batches as from local disk, faults cost retries
and never samples, exhausted retries and stalled requests end in a clear error without secrets, in
bounded time. Byte accounting, prefetch and the cache: tests/fetch/test_fetch.py."""

from __future__ import annotations

import time

import pytest

from dali_stream import ConfigError, RemoteError, StreamLoader
from tests.support.faultproxy import FaultProxy
from tests.support.httpserver import Server
from tests.support.s3server import KEYS, S3
from tests.support.s3server import options as s3_options
from tests.support.take import same_batches

ARGS = dict(batch_size=3, episode_pool_size=2, seed=4, device="cpu", num_workers=2, drop_last=False,
            delta_timestamps={"action": [0.0, 1 / 30], "observation.images.top": [-1 / 30, 0.0]})


def _epoch(loader):
    return [b for b in loader]


@pytest.fixture(scope="module")
def local_epoch(small_dataset):
    return _epoch(StreamLoader(str(small_dataset), **ARGS))


@pytest.fixture(scope="module")
def s3(small_dataset):
    """moto's S3 server on loopback holding the small dataset under s3://robots/small; its endpoint."""
    with S3() as server:
        server.upload(small_dataset, "robots/small")
        yield server.url


def test_http_epoch_equals_local(small_dataset, local_epoch):
    with Server(small_dataset) as url:
        loader = StreamLoader(f"{url}/", **ARGS)
        same_batches(_epoch(loader), local_epoch)
        stats = loader.remote_stats
    assert stats["requests"] > 0 and stats["bytes"] > 0 and stats["retries"] == 0


def test_s3_epoch_equals_local(s3, local_epoch):
    loader = StreamLoader("s3://robots/small", storage_options=s3_options(s3), **ARGS)
    same_batches(_epoch(loader), local_epoch)
    assert loader.remote_stats["bytes"] > 0 and loader.remote_stats["retries"] == 0


def test_s3_credentials_and_endpoint_from_the_aws_environment(s3, local_epoch, monkeypatch):
    """No storage_options: keys, region and endpoint come from the AWS environment as botocore reads it."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEYS["key"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", KEYS["secret"])
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", s3)
    loader = StreamLoader("s3://robots/small", **ARGS)
    same_batches(_epoch(loader), local_epoch)


def test_http_faults_cost_retries_not_samples(small_dataset, local_epoch):
    """~10 % of GETs through the proxy fail (503, reset, truncated body): the same epoch, faults retried.

    aiohttp itself silently re-sends a request whose reused connection was reset, so our retry counter
    sees at most one retry per injected fault."""
    with Server(small_dataset) as upstream:
        proxy = FaultProxy(upstream, fault_rate=0.1, seed=3)
        with proxy as url:
            loader = StreamLoader(url, remote_max_retries=8, **ARGS)
            got = _epoch(loader)
    same_batches(got, local_epoch)
    assert proxy.counts["faults"] > 0
    assert 0 < loader.remote_stats["retries"] <= proxy.counts["faults"], (loader.remote_stats, proxy.counts)


def test_a_429_storm_waits_as_the_server_asks_and_loses_nothing(small_dataset, local_epoch, caplog):
    """Half the GETs answered 429 with `Retry-After: 0.2` (a rate-limiting store): the epoch completes with the
    local batches, and each such retry waited at least what the server asked (counted as `throttled`)."""
    import inspect
    import logging
    import re

    from fsspec.implementations.http import HTTPFileSystem

    if "strict" not in inspect.signature(HTTPFileSystem._exists).parameters:
        pytest.skip("this fsspec's http answers a throttled existence check False (no `strict`): a 429 on the "
                    "dataset's root reads as a missing dataset")

    with Server(small_dataset) as upstream:
        proxy = FaultProxy(upstream, throttle_rate=0.5, retry_after="0.2", seed=7)
        with proxy as url, caplog.at_level(logging.WARNING, logger="dali_stream"):
            loader = StreamLoader(url, remote_max_retries=20, **ARGS)
            got = _epoch(loader)
    same_batches(got, local_epoch)
    assert proxy.counts["throttled"] > 10
    assert 0 < loader.remote_stats["throttled"] <= proxy.counts["throttled"], (loader.remote_stats, proxy.counts)
    waits = [float(m.group(1)) for r in caplog.records
             if (m := re.search(r"in ([0-9.]+) s \(the server's Retry-After: 0.2 s\)", r.getMessage()))]
    assert len(waits) == loader.remote_stats["throttled"] and min(waits) >= 0.2


def test_retry_after_is_read_from_each_client_as_seconds_or_a_date():
    """aiohttp's (fsspec http), httpx's (huggingface_hub) and botocore's errors carry the header differently; a date
    counts from now; a wait past 300 s is cut to 300; a 404, or a 503 without the header, asks for nothing."""
    import email.utils

    import aiohttp
    from multidict import CIMultiDict

    try:
        import httpx2
    except ImportError:
        import httpx as httpx2

    from dali_stream.source.transient import RETRY_AFTER_MAX_S, retry_after_s

    def aio(status, headers):
        return aiohttp.ClientResponseError(None, (), status=status, headers=CIMultiDict(headers))  # type: ignore[arg-type]

    request = httpx2.Request("GET", "https://hub.example/x")
    assert retry_after_s(aio(429, {"Retry-After": "2"})) == 2.0
    assert retry_after_s(httpx2.HTTPStatusError("503", request=request, response=httpx2.Response(
        503, headers={"retry-after": "7"}, request=request))) == 7.0
    soon = email.utils.format_datetime(email.utils.localtime() + __import__("datetime").timedelta(seconds=30),
                                       usegmt=True)
    assert 25 <= retry_after_s(aio(503, {"Retry-After": soon})) <= 30
    assert retry_after_s(aio(429, {"Retry-After": "86400"})) == RETRY_AFTER_MAX_S
    assert retry_after_s(aio(429, {"Retry-After": "soon"})) is None
    assert retry_after_s(aio(404, {"Retry-After": "2"})) is None and retry_after_s(aio(503, {})) is None


def test_s3_faults_cost_retries_not_samples(s3, local_epoch):
    """The same proxy in front of S3 (botocore retries some faults itself; ours catch the rest)."""
    proxy = FaultProxy(s3, fault_rate=0.1, seed=5)
    with proxy as url:
        loader = StreamLoader("s3://robots/small", storage_options=s3_options(url), remote_max_retries=8, **ARGS)
        got = _epoch(loader)
    same_batches(got, local_epoch)
    assert proxy.counts["faults"] > 0


def test_exhausted_retries_name_the_url_without_secrets(small_dataset, monkeypatch):
    monkeypatch.setenv("DALI_STREAM_REMOTE_MAX_RETRIES", "2")
    with Server(small_dataset) as upstream, FaultProxy(upstream, fail_paths=r"/videos/.*\.mp4") as url:
        secret_url = url.replace("http://", "http://alice:s3cr3t@")
        loader = StreamLoader(secret_url, **ARGS)
        policy = loader.meta.data_fs.policy
        t0 = time.perf_counter()
        with pytest.raises(RemoteError) as info:
            _epoch(loader)
        elapsed = time.perf_counter() - t0
    message = str(info.value)
    assert "127.0.0.1" in message and "/videos/" in message and "failed 3 times" in message
    assert "s3cr3t" not in message and "alice" not in message
    assert "episode" in message and "camera" in message
    # Within the configured time: 3 attempts, backoff 0.1 + 0.2 s (a hang would hit pytest's timeout).
    assert elapsed < policy.worst_case_s, (elapsed, policy)


def test_stalled_server_times_out_with_a_clear_error(small_dataset):
    """A server that accepts and never answers: each attempt is cut at remote_timeout_s, then RemoteError."""
    with Server(small_dataset) as upstream, FaultProxy(upstream, stall_paths=r"/videos/.*\.mp4") as url:
        # 1 s, not less: the metadata's reads go through the same policy and must answer within it on a
        # loaded machine (at 0.5 s, the listing timed out twice under a full test run)
        loader = StreamLoader(url, remote_max_retries=1, remote_timeout_s=1, **ARGS)
        policy = loader.meta.data_fs.policy
        t0 = time.perf_counter()
        with pytest.raises(RemoteError, match=r"failed 2 times .*no answer within 1s") as info:
            _epoch(loader)
        elapsed = time.perf_counter() - t0
    assert "episode" in str(info.value)
    assert policy.worst_case_s == pytest.approx(2 * 1 + 0.1 * 1.5)  # the backoff's jitter is at most x1.5
    # bounded by the policy (the message names the 0.5 s cut), not by the server's hour-long stall: a margin of
    # 50x the policy's worst case, which a loaded machine's start-up cannot eat
    assert elapsed < 50 * policy.worst_case_s, elapsed


def test_s3_errors_never_show_the_secret_key(s3):
    with pytest.raises(Exception) as info:
        StreamLoader("s3://robots/absent", storage_options=s3_options(s3), **ARGS)
    assert KEYS["secret"] not in str(info.value) and "robots/absent" in str(info.value)


def test_redact_removes_credentials_and_tokens():
    from dali_stream.source.remote import redact

    assert redact("https://bob:pw@host/x?token=abc&y=1&X-Amz-Signature=zz") == "https://host/x?token=***&y=1&X-Amz-Signature=***"


@pytest.mark.parametrize("env, value, match", [
    ("DALI_STREAM_REMOTE_MAX_RETRIES", "lots", "DALI_STREAM_REMOTE_MAX_RETRIES='lots'"),
    ("DALI_STREAM_REMOTE_TIMEOUT_S", "soon", "DALI_STREAM_REMOTE_TIMEOUT_S='soon'"),
])
def test_remote_settings_from_env_must_be_numbers(small_dataset, monkeypatch, env, value, match):
    monkeypatch.setenv(env, value)
    with Server(small_dataset) as url, pytest.raises(ConfigError, match=match):
        StreamLoader(url, **ARGS)


def test_revision_pins_hf_repositories_only():
    from dali_stream.source.storage import with_revision

    assert with_revision("hf://datasets/lab/arm", "v2.1") == "hf://datasets/lab/arm@v2.1"
    assert with_revision("hf://datasets/lab/arm/sub", "refs/pr/3") == "hf://datasets/lab/arm@refs%2Fpr%2F3/sub"
    for source, revision, match in [("hf://buckets/lab/arm", "v1", "no revisions"),
                                    ("s3://bucket/arm", "v1", "no revisions"),
                                    ("hf://datasets/lab/arm@main", "v1", "already names a revision"),
                                    ("hf://datasets/lab/arm", "", "non-empty")]:
        with pytest.raises(ConfigError, match=match):
            with_revision(source, revision)


def test_meta_local_bulk_files_over_http(small_dataset, tmp_path, local_epoch):
    """data_files_root: metadata from one root, data/ and videos/ from another (here: a server)."""
    import shutil

    meta_only = tmp_path / "meta-only"
    shutil.copytree(small_dataset / "meta", meta_only / "meta")
    with Server(small_dataset) as url:
        loader = StreamLoader(str(meta_only), data_files_root=url, **ARGS)
        same_batches(_epoch(loader), local_epoch)
        assert loader.remote_stats["bytes"] > 0
    with pytest.raises(Exception, match="data_files_root"):
        StreamLoader(str(meta_only), data_files_root=str(tmp_path / "nowhere"), **ARGS)


def test_timeouts_are_transient_on_every_python():
    """asyncio.wait_for and fsspec raise asyncio.TimeoutError (FSTimeoutError), which is not the builtin
    TimeoutError on Python 3.10: both count as transient, so a timed-out attempt is retried."""
    import asyncio

    from fsspec.exceptions import FSTimeoutError

    from dali_stream.source.transient import is_transient

    assert is_transient(asyncio.TimeoutError()) and is_transient(FSTimeoutError()) and is_transient(TimeoutError())
    assert not is_transient(FileNotFoundError())


def test_what_is_transient():
    """httpx / httpx2 errors (what huggingface_hub raises) and HTTP 408/429/5xx are retried; a RemoteError, an
    OSError as such and a 404 are not."""
    import errno

    try:  # huggingface_hub 2.x reads through httpx2, 1.x through httpx: the same exception classes
        import httpx2
    except ImportError:
        import httpx as httpx2

    from dali_stream.source.transient import is_transient

    request = httpx2.Request("GET", "https://hub.example/x")
    for exc in (httpx2.ReadTimeout("slow", request=request), httpx2.ConnectError("refused", request=request),
                httpx2.RemoteProtocolError("peer closed", request=request),
                httpx2.HTTPStatusError("503", request=request, response=httpx2.Response(503, request=request)),
                OSError(errno.ECONNRESET, "reset"), ConnectionResetError()):
        assert is_transient(exc), exc
    for exc in (RemoteError("gave up"), OSError("some other failure"), FileNotFoundError("x"),
                httpx2.HTTPStatusError("404", request=request, response=httpx2.Response(404, request=request))):
        assert not is_transient(exc), exc


def test_backoff_is_jittered():
    """Two ranks hit by the same outage do not retry in lock-step: their pauses differ, within x0.5..1.5."""
    import random

    from dali_stream.source.remote import RetryPolicy

    policy = RetryPolicy(max_retries=6, backoff_s=0.1, max_backoff_s=1.0)
    a, b = random.Random(1), random.Random(2)
    pauses_a = [policy.sleep_s(k, a) for k in range(6)]
    assert pauses_a != [policy.sleep_s(k, b) for k in range(6)]
    for k, pause in enumerate(pauses_a):
        base = min(1.0, 0.1 * 2 ** k)
        assert 0.5 * base <= pause <= 1.5 * base


def test_a_total_deadline_bounds_every_read(small_dataset, caplog):
    """Many retries allowed, but remote_deadline_s ends the read: a stalled server costs at most the deadline.
    Each retry is logged at WARNING on the `dali_stream` logger."""
    import logging

    with Server(small_dataset) as upstream, FaultProxy(upstream, stall_paths=r"/videos/.*\.mp4") as url:
        loader = StreamLoader(url, remote_max_retries=50, remote_timeout_s=0.8, remote_deadline_s=2.5, **ARGS)
        t0 = time.perf_counter()
        with caplog.at_level(logging.WARNING, logger="dali_stream"), \
                pytest.raises(RemoteError, match=r"deadline of 2.5s .*left no time for another attempt"):
            _epoch(loader)
        elapsed = time.perf_counter() - t0
    assert any("retry 1 of 50" in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert loader.meta.data_fs.policy.worst_case_s == 2.5
    # without the deadline, 51 attempts of 0.8 s and their backoff sleeps (capped at 5 s) take minutes
    assert elapsed < 60, elapsed


def test_a_dataloader_with_spawned_workers_reads_a_remote_dataset(small_dataset, tmp_path):
    """torch's DataLoader around `loader.dataset` with spawned workers (macOS's default) on a dataset over HTTP, with
    the node-local disk tier: the metadata's remote file system pickles (made again in each worker with its own
    counters, slots and locks) and the samples equal the local dataset's."""
    import torch

    local = StreamLoader(str(small_dataset), batch_size=4, device="cpu")
    some = list(range(0, len(local.dataset), 5))[:16]
    want = list(torch.utils.data.DataLoader(torch.utils.data.Subset(local.dataset, some), batch_size=8))
    with Server(small_dataset) as url:
        remote = StreamLoader(f"{url}/", batch_size=4, device="cpu", disk_cache_dir=str(tmp_path / "tier"))
        got = list(torch.utils.data.DataLoader(torch.utils.data.Subset(remote.dataset, some), batch_size=8,
                                               num_workers=2, multiprocessing_context="spawn"))
        remote.close()
    local.close()
    assert len(got) == len(want) == 2
    for a, b in zip(got, want):
        assert a.keys() == b.keys()
        for key in a:
            assert torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key], key
