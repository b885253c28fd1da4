"""The node-local disk tier (`disk_cache_dir`, `source/disk_tier.py`) against a real HTTP server on loopback: later
epochs and later runs read the node's disk, not the remote; two ranks of a node (real processes) fetch each byte once,
counted at the server; a rank killed with SIGKILL mid-fetch, a damaged block, a file replaced on the remote, a
folder that cannot be written and a 429 storm all end in the local batches, never a wrong frame."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dali_stream import ConfigError, StreamLoader
from tests.support.faultproxy import FaultProxy
from tests.support.httpserver import Server
from tests.support.take import same_batches

ARGS = dict(batch_size=3, episode_pool_size=2, seed=4, device="cpu", num_workers=2, drop_last=False,
            delta_timestamps={"action": [0.0, 1 / 30], "observation.images.top": [-1 / 30, 0.0]})


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """40 short episodes of two cameras (H.264, VP9), 3 a file: 4x the memory cache the tests give the loader."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=40, min_length=8, max_length=20, gop=8, episodes_per_file=3,
                      cameras=parse_cameras("front:h264,top:vp9"), seed=6)
    return write_sample(tmp_path_factory.mktemp("ds") / "tier", spec)


def _size(root) -> int:
    return sum(p.stat().st_size for p in Path(root).rglob("*") if p.is_file())


@pytest.fixture(scope="module")
def local(dataset):
    """Two epochs of the dataset read from the local drive: what every remote run must give."""
    loader = StreamLoader(str(dataset), **ARGS)
    return [list(loader), list(loader)]


def _cache_bytes(dataset) -> int:
    return _size(dataset) // 4


def test_later_epochs_and_runs_read_the_disk_not_the_remote(dataset, local, tmp_path):
    """A dataset 4x the memory cache: epoch 1 fetches each byte, epoch 2 and a second run fetch nothing."""
    disk = tmp_path / "disk"
    with Server(dataset) as url:
        loader = StreamLoader(url, cache_bytes=_cache_bytes(dataset), disk_cache_dir=str(disk), **ARGS)
        first = list(loader)
        one = dict(loader.remote_stats)
        second = list(loader)
        two = dict(loader.remote_stats)
        again = StreamLoader(url, cache_bytes=_cache_bytes(dataset), disk_cache_dir=str(disk), **ARGS)
        rerun = list(again)
        three = again.remote_stats
    same_batches(first, local[0])
    same_batches(second, local[1])
    same_batches(rerun, local[0])
    assert one["bytes"] > 0 and one["disk_bytes_written"] == one["bytes"] and one["memory_hits"] > 0
    assert two["bytes"] - one["bytes"] <= 0.01 * one["bytes"], (one, two)
    assert two["disk_bytes_read"] > one["disk_bytes_read"]
    assert three["bytes"] == 0 and three["disk_blocks_fetched"] == 0 and three["disk_bytes_read"] > 0, three


WORKER = """
import json, sys
from dali_stream import StreamLoader
url, disk, rank, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
args = json.loads(sys.argv[5])
loader = StreamLoader(url, rank=rank, world_size=2, disk_cache_dir=disk, **args)
seen = [b["index"].tolist() for b in loader]
json.dump({"seen": seen, "stats": loader.remote_stats}, open(out, "w"))
"""


def _worker(url, disk, rank, out, **extra):
    args = {**ARGS, **extra}
    args["delta_timestamps"] = {k: list(v) for k, v in args["delta_timestamps"].items()}
    return subprocess.Popen([sys.executable, "-c", WORKER, url, str(disk), str(rank), str(out), json.dumps(args)])


@pytest.fixture
def served(dataset):
    """The dataset served on loopback: (url, the server's counts)."""
    server = Server(dataset)
    with server as url:
        yield url, server.counts


def _overlaps(ranges) -> list:
    """Pairs of ranges of the same file that the server sent twice (or more) some byte of."""
    by_path: dict = {}
    for path, start, end in ranges:
        by_path.setdefault(path, []).append((start, end))
    twice = []
    for path, spans in by_path.items():
        spans.sort()
        for (a0, a1), (b0, b1) in zip(spans, spans[1:]):
            if b0 < a1:
                twice.append((path, (a0, a1), (b0, b1)))
    return twice


def test_two_ranks_of_a_node_fetch_each_byte_once(served, tmp_path):
    """Two ranks started together share one disk folder, behind a store that answers each GET after 50 ms (so both
    want the same blocks while the first fetch of each is in flight): the server sends no byte of any file twice."""
    upstream, counts = served
    with FaultProxy(upstream, delay_s=0.05) as url:
        ranks = [_worker(url, tmp_path / "disk", r, tmp_path / f"rank{r}.json") for r in range(2)]
        assert [p.wait(timeout=300) for p in ranks] == [0, 0]
    reports = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(r["seen"] for r in reports)
    assert counts["ranges"] and _overlaps(counts["ranges"]) == []
    fetched = sum(r["stats"]["bytes"] for r in reports)
    assert fetched == sum(b - a for _, a, b in counts["ranges"])


def test_a_rank_killed_mid_fetch_leaves_nothing_wrong(dataset, local, tmp_path):
    """SIGKILL while the rank holds claims and writes blocks; one block then cut short by hand (a torn disk): the
    next run takes the dead rank's claims over, refetches the damaged block and gives the local batches."""
    disk = tmp_path / "disk"
    with Server(dataset) as upstream, FaultProxy(upstream, delay_s=0.05) as url:
        victim = _worker(url, disk, 0, tmp_path / "victim.json", cache_bytes=_cache_bytes(dataset))
        deadline = time.monotonic() + 120
        while not list(disk.rglob("*.claim")) or len(list(disk.rglob("*.blk"))) < 2:
            assert victim.poll() is None and time.monotonic() < deadline, "the rank ended before it was killed"
            time.sleep(0.005)
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait()
        blocks = sorted(disk.rglob("*.blk"))
        torn = blocks[0].read_bytes()
        blocks[0].write_bytes(torn[: len(torn) // 2])
        loader = StreamLoader(url, cache_bytes=_cache_bytes(dataset), disk_cache_dir=str(disk), **ARGS)
        got = list(loader)
    same_batches(got, local[0])
    assert loader.remote_stats["disk_damaged"] >= 1
    assert not list(disk.rglob("*.claim")), "a claim outlived the runs"


def test_a_file_replaced_on_the_remote_is_fetched_again(tmp_path):
    """Same path, same size, new bytes (a new ETag): a new run reads the new bytes, not the disk's old copy."""
    from dali_stream.source.storage import RemoteOptions, open_fs

    root = tmp_path / "remote"
    root.mkdir()
    with Server(root) as url:
        for version in (b"a", b"b"):
            (root / "blob.bin").write_bytes(version * 300_000)
            fs, base = open_fs(url, RemoteOptions(disk_dir=str(tmp_path / "disk")))
            assert fs.read_range(f"{base}/blob.bin", 1000, 280_000) == version * 279_000
            assert fs.read_range(f"{base}/blob.bin", 0, 10) == version * 10
    assert len([p for p in (tmp_path / "disk").rglob("identity")]) == 2


def test_a_damaged_block_is_never_served(tmp_path):
    """Every byte of a block flipped in turn is caught by its check: refetched, the right bytes returned."""
    from dali_stream.source.storage import RemoteOptions, open_fs

    root = tmp_path / "remote"
    root.mkdir()
    payload = os.urandom(600_000)
    (root / "blob.bin").write_bytes(payload)
    with Server(root) as url:
        fs, base = open_fs(url, RemoteOptions(disk_dir=str(tmp_path / "disk")))
        assert fs.read_range(f"{base}/blob.bin", 0, len(payload)) == payload
        for block in sorted((tmp_path / "disk").rglob("*.blk")):
            raw = bytearray(block.read_bytes())
            raw[len(raw) // 3] ^= 0x40
            block.write_bytes(bytes(raw))
        assert fs.read_range(f"{base}/blob.bin", 5, len(payload) - 5) == payload[5:-5]
        assert fs.counts()["disk_damaged"] == 3


def test_an_unwritable_folder_reads_the_remote_with_one_warning(dataset, local, tmp_path, caplog):
    """disk_cache_dir under a plain file (as a read-only or full drive would): one warning, the local batches."""
    (tmp_path / "file").write_text("not a folder")
    with Server(dataset) as url, caplog.at_level(logging.WARNING, logger="dali_stream"):
        loader = StreamLoader(url, disk_cache_dir=str(tmp_path / "file" / "disk"), **ARGS)
        got = list(loader)
    same_batches(got, local[0])
    warned = [r for r in caplog.records if "cannot be written" in r.getMessage()]
    assert 1 <= len(warned) <= 2, [r.getMessage() for r in warned]  # one a file system: dataset root and data
    assert loader.remote_stats["bytes"] > 0 and loader.remote_stats["disk_bytes_written"] == 0


def test_the_bound_evicts_least_recently_read_blocks(tmp_path):
    from dali_stream.source.storage import RemoteOptions, open_fs

    root = tmp_path / "remote"
    root.mkdir()
    payload = os.urandom(4_000_000)
    (root / "blob.bin").write_bytes(payload)
    limit = 1_200_000
    with Server(root) as url:
        fs, base = open_fs(url, RemoteOptions(disk_dir=str(tmp_path / "disk"), disk_bytes=limit))
        for start in range(0, len(payload), 500_000):
            assert fs.read_range(f"{base}/blob.bin", start, start + 500_000) == payload[start:start + 500_000]
    held = sum(p.stat().st_size for p in (tmp_path / "disk").rglob("*.blk"))
    assert 0 < held <= limit and fs.counts()["disk_bytes_evicted"] > 0


def test_a_429_storm_behind_a_slow_narrow_link_completes_with_the_tier(dataset, local, tmp_path):
    """Half the GETs answered 429 (Retry-After 0.1 s), every GET 20 ms late, all bodies through a 4 MB/s link: two
    epochs with the local batches, the second fetching nothing."""
    import inspect

    from fsspec.implementations.http import HTTPFileSystem

    if "strict" not in inspect.signature(HTTPFileSystem._exists).parameters:
        pytest.skip("this fsspec's http answers a throttled existence check False (no `strict`)")
    with Server(dataset) as upstream, FaultProxy(upstream, throttle_rate=0.5, retry_after="0.1", seed=3,
                                                 delay_s=0.02, bytes_per_s=4e6) as url:
        loader = StreamLoader(url, remote_max_retries=20, cache_bytes=_cache_bytes(dataset),
                              disk_cache_dir=str(tmp_path / "disk"), **ARGS)
        first = list(loader)
        one = dict(loader.remote_stats)
        second = list(loader)
    same_batches(first, local[0])
    same_batches(second, local[1])
    assert one["throttled"] > 0 and loader.remote_stats["bytes"] == one["bytes"]


@pytest.mark.parametrize("setting, value", [("disk_cache_dir", "s3://bucket/cache"), ("disk_cache_dir", ""),
                                            ("disk_cache_bytes", 0), ("disk_cache_bytes", "1G")])
def test_bad_settings_are_refused_by_name(setting, value):
    with pytest.raises(ConfigError, match=setting):
        StreamLoader("unused", **{setting: value})


NODE_RANK = """
import json, sys
from dali_stream import StreamLoader
url, disk, rank, world, out, args = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], \\
    json.loads(sys.argv[6])
state = args.pop("state", None)
stop = args.pop("stop", None)
loader = StreamLoader(url, rank=rank, world_size=world, disk_cache_dir=disk, **args)
elastic = None
if state:
    loader.load_state_dict(state)
    elastic = loader.state_dict()["elastic"]
epochs, stats = [], []
for epoch in range(1 if state else 3):
    seen = []
    for i, batch in enumerate(loader):
        seen.append({"episodes": batch["episode_index"].tolist(), "index": batch["index"].tolist()})
        if stop is not None and epoch == 2 and i == stop:
            break
    epochs.append(seen)
    stats.append(dict(loader.remote_stats))
json.dump({"epochs": epochs, "stats": stats, "state": loader.state_dict(), "elastic": elastic}, open(out, "w"))
"""


def _node_ranks(urls, tmp_path, world, per_node, tag, **args):
    """`world` ranks, each a process of its own, `per_node` a node sharing the node's disk folder (LOCAL_WORLD_SIZE)
    and reading through the node's own server (`urls[node]`): started together, their reports read back in rank
    order."""
    env = {**os.environ, "LOCAL_WORLD_SIZE": str(per_node)}
    args = {**ARGS, "delta_timestamps": {}, "partition": "node", **args}
    outs = [tmp_path / f"{tag}-rank{r}.json" for r in range(world)]
    ranks = [subprocess.Popen([sys.executable, "-c", NODE_RANK, urls[r // per_node],
                               str(tmp_path / f"{tag}-node{r // per_node}"), str(r), str(world), str(outs[r]),
                               json.dumps(args)], env=env) for r in range(world)]
    assert [p.wait(timeout=600) for p in ranks] == [0] * world
    return [json.loads(o.read_text()) for o in outs]


def test_four_nodes_of_two_ranks_keep_their_share_then_resume_on_two(dataset, tmp_path):
    """partition='node' over HTTP, four nodes of two ranks (eight processes, a disk folder and a server a node),
    three epochs: each node's ranks draw the same episodes every epoch, disjoint from other nodes'; each node's
    server sends no byte twice over the three epochs (the node fetched its share once; later epochs read its disk);
    stopped mid-epoch 3 and resumed on two nodes of two ranks from one checkpoint: every frame of that epoch once."""
    with contextlib.ExitStack() as stack:
        servers = [Server(dataset) for _ in range(4)]
        urls = [stack.enter_context(server) for server in servers]
        cache_bytes = _cache_bytes(dataset) // 4  # a sixteenth of the dataset: less than a node's share
        first = _node_ranks(urls, tmp_path, 8, 2, "four", stop=2, cache_bytes=cache_bytes)
        drawn: dict = {}  # (node, epoch) -> the episodes its ranks drew
        for rank, report in enumerate(first):
            for e, epoch in enumerate(report["epochs"]):
                drawn.setdefault((rank // 2, e), set()).update(x for b in epoch for x in b["episodes"])
        node = [drawn[(n, 0)] for n in range(4)]
        assert all(drawn[(n, 1)] == node[n] and drawn[(n, 2)] <= node[n] for n in range(4)), \
            "a node keeps its episodes (epoch 3 stops after three batches)"
        assert all(a.isdisjoint(b) for i, a in enumerate(node) for b in node[i + 1:]), "nodes share no episode"
        assert sorted(set().union(*node)) == list(range(40))
        for n, server in enumerate(servers):
            ranks = first[2 * n:2 * n + 2]
            sent = server.counts["ranges"]
            assert sent and _overlaps(sent) == [], f"node {n} was sent bytes twice"
            assert sum(r["stats"][-1]["bytes"] for r in ranks) == sum(b - a for _, a, b in sent)
            for e in (1, 2):  # later epochs: the node's drive (a rank may still fetch what its peer, an epoch
                # behind, has not fetched yet; never what the node holds)
                assert sum(r["stats"][e]["disk_bytes_read"] - r["stats"][e - 1]["disk_bytes_read"] for r in ranks) > 0
        state = first[0]["state"]
        assert state["ranks_per_node"] == 2 and state["selection"]["partition"] == "node"
        with pytest.raises(Exception, match="selection"):
            StreamLoader(str(dataset), rank=0, world_size=4, **{**ARGS, "delta_timestamps": {}, "partition": "rank"}) \
                .load_state_dict(state)
        seen = [i for r in first for b in r["epochs"][2] for i in b["index"]]
        rest = _node_ranks(urls, tmp_path, 4, 2, "two", state=state, cache_bytes=cache_bytes)
    assert all(r["elastic"] == [[8, 3, 2]] for r in rest)
    after = [i for r in rest for i in dict.fromkeys(i for b in r["epochs"][0] for i in b["index"])]
    assert len(after) == len(set(after)) and not set(after) & set(seen)
    total = int(json.loads((Path(dataset) / "meta/info.json").read_text())["total_frames"])
    assert sorted(set(after) | set(seen)) == list(range(total)), "no frame lost or repeated"


@pytest.mark.parametrize("budget, per_node, most", [(None, 1, None), (4, 1, 4), (4, 2, 2)])
def test_remote_concurrency_bounds_the_requests_in_flight(dataset, local, monkeypatch, budget, per_node, most):
    """A slow store (every request 50 ms): with remote_concurrency a node's budget, split over its ranks, the proxy
    never sees more of this rank's requests at once than its part; without, prefetch has many in flight."""
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(per_node))
    with Server(dataset) as upstream:
        proxy = FaultProxy(upstream, delay_s=0.05)
        with proxy as url:
            loader = StreamLoader(url, remote_concurrency=budget, **ARGS)
            got = list(loader)
    same_batches(got, local[0])
    peak = proxy.counts["in_flight_peak"]
    assert peak > 4 if most is None else peak <= most, proxy.counts


def test_s3_epoch_two_reads_the_disk(dataset, local, tmp_path):
    """The same over moto's S3 server behind 20 ms a GET and a 4 MB/s link: blocks named by S3's ETag, epoch 2
    fetches nothing."""
    from tests.support.s3server import S3
    from tests.support.s3server import options as s3_options

    with S3() as server, FaultProxy(server.url, delay_s=0.02, bytes_per_s=4e6) as url:
        server.upload(dataset, "robots/tier")
        loader = StreamLoader("s3://robots/tier", storage_options=s3_options(url),
                              cache_bytes=_cache_bytes(dataset), disk_cache_dir=str(tmp_path / "disk"), **ARGS)
        first = list(loader)
        one = dict(loader.remote_stats)
        second = list(loader)
        two = loader.remote_stats
    same_batches(first, local[0])
    same_batches(second, local[1])
    assert one["bytes"] > 0 and two["bytes"] == one["bytes"] and two["disk_bytes_read"] > one["disk_bytes_read"]
    identities = [p.read_text() for p in (tmp_path / "disk").rglob("identity")]
    assert identities and all(i.split("\n")[2] for i in identities), "each file named with its ETag"


def test_a_dead_ranks_claim_beside_a_written_block_is_removed_by_the_next_reader(tmp_path):
    """A rank killed after writing a block and before releasing its claim leaves the claim beside the block; no
    fetch asks about that block again, so the next process to read the file removes it (a live holder's claim and
    another host's fresh one stay)."""
    from dali_stream.source.storage import RemoteOptions, open_fs

    root = tmp_path / "remote"
    root.mkdir()
    payload = os.urandom(600_000)
    (root / "blob.bin").write_bytes(payload)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid no process holds now
    with Server(root) as url:
        fs, base = open_fs(url, RemoteOptions(disk_dir=str(tmp_path / "disk")))
        assert fs.read_range(f"{base}/blob.bin", 0, len(payload)) == payload
        (folder,) = {p.parent for p in (tmp_path / "disk").rglob("*.blk")}
        host = socket.gethostname()
        (folder / "0.claim").write_text(f"{host}\n{dead.pid}\n")  # the killed rank's, beside block 0
        (folder / "1.claim").write_text(f"{host}\n{os.getpid()}\n")  # a live holder's
        (folder / "2.claim").write_text("another-host\n123\n")  # another host's, fresh
        later, base = open_fs(url, RemoteOptions(disk_dir=str(tmp_path / "disk")))  # a new process's view
        assert later.read_range(f"{base}/blob.bin", 0, len(payload)) == payload
        assert later.counts()["disk_damaged"] == 0
    assert sorted(p.name for p in folder.glob("*.claim")) == ["1.claim", "2.claim"]
