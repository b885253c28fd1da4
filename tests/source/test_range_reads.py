"""The remote file view (`source.remote.RangeFile`) reads as a local file does, wherever its pieces begin and end.

A property test over the boundaries: every parquet and MP4 file of two datasets, one written as lerobot's recorder
writes (lerobot's per-episode stats in a ~176 KB episodes table of four row groups, one file a table) and one as one
stream a file (several files a camera and a table), read through the view with pieces of the file's own bytes
held at random offsets and `min_read` from 1 byte to 1 MiB, compared byte for byte (random seeks and reads),
table for table (pyarrow) and packet for packet (PyAV) with the local file: over HTTP, S3 and the Hub emulator,
with the fault proxy's truncated bodies, resets and 503s mixed in. Then the whole loader on the lerobot-written
dataset over each, and what a remote read that fails says."""

from __future__ import annotations

import contextlib
import math
import random
from pathlib import Path

import pytest

from dali_stream import RemoteError, StreamLoader, open_meta
from dali_stream.source.remote import RangeFile, RetryPolicy
from dali_stream.source.storage import RemoteOptions, open_fs
from tests.support.faultproxy import FaultProxy
from tests.support.httpserver import Server
from tests.support.hubserver import Hub
from tests.support.s3server import S3
from tests.support.take import same_batches

TOKEN = "hf_TESTtoken0123456789"
# the retries' pauses cut to milliseconds: a tenth of the requests through the fault proxy fail
FAST_RETRIES = RetryPolicy(max_retries=12, timeout_s=30.0, backoff_s=0.002, max_backoff_s=0.02)
ARGS = dict(batch_size=8, episode_pool_size=4, seed=5, device="cpu", num_workers=2, drop_last=False,
            delta_timestamps={"action": [0.0, 0.1, 0.2]})


@pytest.fixture(scope="module")
def lerobot_written(tmp_path_factory):
    """Written as lerobot 0.6.1's recorder writes (each episode encoded alone and appended, lerobot's per-episode
    stats in its episodes table, 10 episodes a row group): 40 episodes, two cameras, 10 fps."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=40, min_length=4, max_length=8, episodes_per_file=20, fps=10, recorder="lerobot",
                      cameras=parse_cameras("front:h264,wrist:av1"), seed=3)
    return write_sample(tmp_path_factory.mktemp("ds") / "lerobot_written", spec)


@contextlib.contextmanager
def _served(kind: str, folders: dict[str, Path]):
    """({name: (remote file system, root URL)} of each folder served by `kind`, the fault proxies): http,
    http-faults (the fault proxy in front of HTTP), s3-faults (in front of moto's S3) or hub (the Hub emulator, a
    dataset repository each)."""
    with contextlib.ExitStack() as stack:
        roots: dict[str, tuple[str, dict]] = {}
        faults: list[FaultProxy] = []
        if kind.startswith("http"):
            for name, folder in folders.items():
                url = stack.enter_context(Server(folder))
                if kind == "http-faults":
                    proxy = FaultProxy(url, fault_rate=0.1, seed=len(name))
                    url = stack.enter_context(proxy)
                    faults.append(proxy)
                roots[name] = (url, {})
        elif kind == "s3-faults":
            s3 = stack.enter_context(S3())
            proxy = FaultProxy(s3.url, fault_rate=0.1, seed=7)
            stack.enter_context(proxy)
            faults.append(proxy)
            # botocore's own retries off (its pauses are seconds): the faults reach ours
            options = s3.options(proxy.url) | {"config_kwargs": {"retries": {"max_attempts": 1}}}
            roots = {name: (s3.upload(folder, f"robots/{name}"), options) for name, folder in folders.items()}
        else:
            hub = stack.enter_context(Hub(TOKEN))
            for name, folder in folders.items():
                hub.add_dataset(f"lab/{name}", {"main": folder})
            roots = {name: (f"hf://datasets/lab/{name}", {"endpoint": hub.endpoint, "token": TOKEN}) for name in folders}
        out = {}
        for name, (url, options) in roots.items():
            rfs, root = open_fs(url, RemoteOptions(options))
            rfs.policy = FAST_RETRIES
            out[name] = (rfs, root)
        yield out, faults


def _pieces(data: bytes, rng: random.Random) -> list[tuple[int, bytes]]:
    """Up to four pieces of `data` at random offsets, of random lengths (overlapping or not)."""
    out = []
    for _ in range(rng.randint(0, 4)):
        offset = rng.randrange(len(data))
        out.append((offset, data[offset:offset + rng.randint(1, max(1, len(data) // 3))]))
    return out


def _view(rfs, url: str, data: bytes, rng: random.Random, least: int = 1) -> RangeFile:
    """The view over `url` holding random pieces (some given at opening, some preloaded), with a `min_read` drawn
    log-uniformly from `least` bytes to 1 MiB."""
    pieces = _pieces(data, rng)
    min_read = int(2 ** rng.uniform(math.log2(least), 20))
    view = RangeFile(rfs, url, len(data), pieces[:len(pieces) // 2], min_read=min_read)
    for offset, piece in pieces[len(pieces) // 2:]:
        view.preload(offset, piece)
    return view


def _packets(source) -> list[tuple]:
    import av

    with av.open(source) as container:
        return [(p.pts, p.dts, p.is_keyframe, bytes(p)) for p in container.demux(container.streams.video[0])
                if p.size]


def _check(rfs, url: str, local: Path, rng: random.Random, views: int, least: int) -> None:
    """`views` views of random pieces and min_read read at random offsets and whole, then one read by pyarrow or
    PyAV (its min_read from `least` bytes up: a parquet reader's hundreds of small reads cost one request each)."""
    import pyarrow.parquet as pq

    data = local.read_bytes()
    for _ in range(views):
        view = _view(rfs, url, data, rng)
        for _ in range(12):
            pos, n = rng.randrange(len(data) + 8), rng.randint(0, 2 * view._min_read)
            view.seek(pos)
            assert view.read(n) == data[pos:pos + n], (url, pos, n, view._min_read)
        view.seek(0)
        assert view.read() == data, url
    view = _view(rfs, url, data, rng, least)
    if local.suffix == ".parquet":
        pf = pq.ParquetFile(view, pre_buffer=False)
        assert pf.read(use_threads=False).equals(pq.read_table(local)), url
        groups = sorted(rng.sample(range(pf.num_row_groups), k=rng.randint(1, pf.num_row_groups)))
        assert pf.read_row_groups(groups, use_threads=False).equals(pq.ParquetFile(local).read_row_groups(groups))
    else:
        assert _packets(view) == _packets(str(local)), url


def _files(folder: Path, every: bool) -> list[Path]:
    """Every parquet and MP4 file under `folder`, or (`every=False`) the episodes tables, the first data file and
    the first file of each camera."""
    files = sorted(p for p in folder.rglob("*") if p.suffix in (".parquet", ".mp4"))
    if every:
        return files
    firsts = {p.parent.parent: p for p in reversed(files) if p.parts[-4] != "meta"}
    return sorted({p for p in files if "episodes" in p.parts} | set(firsts.values()))


# HTTP: every file of both datasets, min_read from 1 byte for every read (the episodes table's pyarrow read is then
# ~400 requests), and the same over the Hub emulator. S3 (through the proxy; s3fs pauses 0.1 s or more before its
# own retries): the lerobot-written dataset's tables and each camera's first file, one view of random reads, and
# pyarrow's and PyAV's reads with min_read from 4 KiB.
KINDS = {"http": (True, 2, 1), "http-faults": (True, 2, 1), "s3-faults": (False, 1, 4096), "hub": (True, 2, 1)}


@pytest.mark.parametrize("kind", list(KINDS))
def test_every_file_reads_as_the_local_one_wherever_the_pieces_end(kind, lerobot_written, small_dataset):
    every, views, least = KINDS[kind]
    folders = {"lerobot_written": lerobot_written} | ({"small": small_dataset} if every else {})
    rng = random.Random(kind)
    with _served(kind, folders) as (served, faults):
        for name, folder in folders.items():
            rfs, root = served[name]
            files = _files(folder, every)
            assert any("episodes" in p.parts for p in files) and any(p.suffix == ".mp4" for p in files)
            for path in files:
                _check(rfs, f"{root}/{path.relative_to(folder)}", path, rng, views, least)
    if kind.endswith("faults"):  # faults were met, and cost retries, never bytes (s3fs retries S3's itself)
        assert faults and all(proxy.counts["faults"] > 0 for proxy in faults), [p.counts for p in faults]
        assert kind == "s3-faults" or sum(rfs.stats.retries for rfs, _ in served.values()) > 0


def test_the_lerobot_written_episodes_table_crosses_a_piece_boundary(lerobot_written):
    """What the next test streams is what the short reads broke: an episodes table larger than one piece."""
    import pyarrow.parquet as pq

    path = next((lerobot_written / "meta/episodes").rglob("*.parquet"))
    meta = pq.ParquetFile(path).metadata
    assert path.stat().st_size > 2 * (1 << 16) and meta.num_row_groups == 4
    assert any(meta.schema.column(c).path.startswith("stats/") for c in range(meta.num_columns))


@pytest.fixture(scope="module")
def local_batches(lerobot_written):
    return [b for b in StreamLoader(str(lerobot_written), **ARGS)]


@pytest.mark.parametrize("kind", ["http", "s3", "hub"])
def test_a_lerobot_written_dataset_streams_as_it_reads_locally(kind, lerobot_written, local_batches):
    with contextlib.ExitStack() as stack:
        if kind == "http":
            source, options = stack.enter_context(Server(lerobot_written)) + "/", None
        elif kind == "s3":
            s3 = stack.enter_context(S3())
            source, options = s3.upload(lerobot_written, "robots/lerobot_written"), s3.options()
        else:
            hub = stack.enter_context(Hub(TOKEN))
            hub.add_dataset("lab/lerobot_written", {"main": lerobot_written})
            source, options = "hf://datasets/lab/lerobot_written", {"endpoint": hub.endpoint, "token": TOKEN}
        loader = StreamLoader(source, storage_options=options, **ARGS)
        got = [b for b in loader]
        assert loader.remote_stats["bytes"] > 0
    same_batches(got, local_batches)


def test_a_remote_read_that_fails_is_named_as_one_not_as_a_damaged_file(lerobot_written):
    """Every answer for the episodes table a short body: the error names the read (bytes, URL), what the last
    attempt got and the retry policy, and does not send the user to re-download a whole file."""
    from dali_stream.tools.verify import verify

    with Server(lerobot_written) as upstream, FaultProxy(upstream, short_paths=r"/meta/episodes/.*\.parquet") as url:
        with pytest.raises(RemoteError) as info:
            open_meta(url + "/", remote_max_retries=1)
        message = str(info.value)
        assert "reading bytes" in message and "/meta/episodes/chunk-000/file-000.parquet failed 2 times" in message
        assert "got" in message and "retry policy: remote_max_retries=1" in message, message
        assert "damaged" not in message and "re-download" not in message, message
        with pytest.raises(RemoteError, match="retry policy"):  # verify: not a finding about the file
            verify(url + "/", decode=True)
