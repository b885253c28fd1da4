"""The open-decoder engine in decode processes (decode/process_engine.py) on the CPU's open decoders (cpu-open, PyAV),
as it runs NVDEC's on a GPU node: every painted frame right (windows past episode edges), the threaded engine's
batches exactly, a mixture, exact resume, a decode process killed mid-epoch (its chunks decoded again: the same
batches), close() with no process left, Ctrl-C, memory per process. Each check is also run against a deliberately
broken engine (a dropped chunk, reordered chunks, a process left running) to show it fails there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from dali_stream import DecodeError, StreamLoader
from dali_stream.decode import process_engine
from tests.loader.test_boundaries import check_every_frame
from tests.support.processes import alive, children
from tests.support.take import same_batches, take

REPO = Path(__file__).resolve().parents[2]
CAMERAS = ["front", "side", "wrist", "top"]  # h264 with B-frames, hevc, av1, vp9 (four_codec_dataset)
SETTINGS = dict(batch_size=6, decode="cpu-open", device="cpu", seed=5, image_dtype="uint8", num_workers=2,
                delta_timestamps={"observation.images.front": [-2 / 30, 0.0, 1 / 30],
                                  "observation.images.side": [-1 / 30, 0.0]})


def _engine(loader):
    """The cpu-open engine's counters (`stats()["engines"]`): its decode processes' ids among them."""
    return loader.stats()["engines"]["cpu-open"]


def _epoch(root, **settings) -> list[dict]:
    with StreamLoader(str(root), **{**SETTINGS, **settings}) as loader:
        return [dict(b) for b in loader]


def test_every_painted_frame_through_decode_processes(four_codec_dataset):
    """Single frames and windows reaching past both ends of every episode, four codecs, two processes."""
    for windowed in (False, True):
        check_every_frame(four_codec_dataset, 30, CAMERAS, decode="cpu-open", windowed=windowed, decode_processes=2)


def test_processes_give_the_threaded_engines_batches(four_codec_dataset):
    """Batch for batch, key for key, the batches of two decode processes are the threaded engine's; the loader says
    where it decodes (stats: the processes and their ids, the pictures decoded)."""
    threads = _epoch(four_codec_dataset, decode_processes=0)
    with StreamLoader(str(four_codec_dataset), **SETTINGS, decode_processes=2) as loader:
        assert loader.resolved.engine_processes == {"cpu-open": 2}
        got = [dict(b) for b in loader]
        stats = loader.stats()["engines"]["cpu-open"]
    same_batches(got, threads)
    assert stats["processes"] == 2 and len(stats["pids"]) == 2 and stats["pictures"] > 0 and stats["restarts"] == 0


def test_a_mixture_through_decode_processes(embodiments):
    """Members of different codecs under one key (and a camera one member lacks): each member's decoders kept apart
    in every process."""
    from dali_stream import Member, Mixture

    mix = Mixture([Member(str(embodiments["arm6"]), name="arm6"),  # front h264, wrist av1
                   Member(str(embodiments["arm7"]), name="arm7",  # top av1 at 10 fps, as the front camera
                          keys={"observation.images.top": "observation.images.front"})])
    settings = dict(batch_size=4, decode="cpu-open", device="cpu", seed=1, image_dtype="uint8")
    with StreamLoader(mix, **settings, decode_processes=0) as loader:
        want = [dict(b) for b in loader]
    with StreamLoader(mix, **settings, decode_processes=2) as loader:
        same_batches([dict(b) for b in loader], want)


def test_resume_through_decode_processes_is_exact(four_codec_dataset):
    with StreamLoader(str(four_codec_dataset), **SETTINGS, decode_processes=2) as loader:
        it = iter(loader)
        for _ in range(3):
            next(it)
        state = loader.state_dict()
        want = [dict(next(it)) for _ in range(4)]
        it.close()
    with StreamLoader(str(four_codec_dataset), **SETTINGS, decode_processes=2) as resumed:
        resumed.load_state_dict(state)
        same_batches([dict(b) for b in take(resumed, 4)], want)


def _killed_mid_epoch(root, caplog) -> tuple[list[dict], dict]:
    """An epoch on two decode processes, one of them SIGKILLed after the third batch."""
    out = []
    with caplog.at_level("WARNING", logger="dali_stream"), \
            StreamLoader(str(root), **SETTINGS, decode_processes=2) as loader:
        for n, batch in enumerate(loader):
            out.append(dict(batch))
            if n == 2:
                os.kill(_engine(loader)["pids"][0], signal.SIGKILL)
        stats = loader.stats()["engines"]["cpu-open"]
    return out, stats


def test_a_killed_decode_process_costs_no_frame(four_codec_dataset, caplog):
    """SIGKILL to a decode process mid-epoch: its chunks are decoded again in new processes, said once, and the epoch
    is the uninterrupted one, batch for batch."""
    want = _epoch(four_codec_dataset, decode_processes=2)
    got, stats = _killed_mid_epoch(four_codec_dataset, caplog)
    same_batches(got, want)
    assert stats["restarts"] >= 1
    assert any("decoded again in new processes" in r.getMessage() for r in caplog.records)


def test_a_process_that_dies_every_time_is_a_named_error(four_codec_dataset, monkeypatch):
    """A chunk whose process dies again after the restart: a DecodeError naming the camera, the episodes and the
    exit status, never a hang or a missing frame; the loader closes cleanly after it."""
    monkeypatch.setattr(process_engine, "_decode", _die)
    with StreamLoader(str(four_codec_dataset), **{**SETTINGS, "num_workers": 1}, decode_processes=2) as loader:
        with pytest.raises(DecodeError, match=r"decode process ended \(exit status 9.*camera 'observation.images.*"
                                              r"episodes \[.*decode_processes=0"):
            next(iter(loader))
        pids = _engine(loader)["pids_ever"]
    assert len(pids) >= 4 and not any(alive(p) for p in pids)  # the first pool's and its replacement's


def _die(*args):
    os._exit(9)


def test_a_loader_left_open_at_exit_is_closed_before_the_process_pools_are_joined(four_codec_dataset, tmp_path):
    """A script that ends mid-epoch without closing its loader: the loaders are closed in the interpreter's first
    exit hook, before concurrent.futures joins its process pools (imported only when the decode processes start), so
    the script ends at once and leaves no decode process."""
    script = tmp_path / "left_open.py"
    script.write_text(textwrap.dedent(f"""
        import threading
        from dali_stream import StreamLoader
        loader = StreamLoader({str(four_codec_dataset)!r}, batch_size=6, decode="cpu-open", device="cpu",
                              decode_processes=2)
        next(iter(loader))
        hooks = [getattr(h, "func", h).__name__ for h in threading._threading_atexits]
        print("pids", *loader.stats()["engines"]["cpu-open"]["pids"], flush=True)
        print("last hook", hooks[-1], "of", hooks, flush=True)
    """))
    proc = subprocess.run([sys.executable, str(script)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    pids, hooks = proc.stdout.splitlines()[:2]
    assert hooks.startswith("last hook close_open_loaders of"), hooks  # run first: threading runs them in reverse
    assert not any(alive(int(p)) for p in pids.split()[1:])


def test_close_leaves_no_decode_process(four_codec_dataset):
    with StreamLoader(str(four_codec_dataset), **SETTINGS, decode_processes=2) as loader:
        next(iter(loader))
        pids = _engine(loader)["pids"]
        assert len(pids) == 2 and all(alive(p) for p in pids)
    assert not any(alive(p) for p in pids)


_REAL_DECODE = process_engine._decode


def _slow(*args):
    """A chunk in a decode process that takes a second more (spawned processes import this module to find it)."""
    time.sleep(1.0)
    return _REAL_DECODE(*args)


def test_no_decode_process_starts_after_close(four_codec_dataset, monkeypatch):
    """close() while the workers decode batches ahead (an iterator still held, so they are not waited for): the
    chunks it cuts short are not decoded again in new processes. No process of this one's is alive after close()
    that was not before, nor starts later (a batch's retry once waited up to 3 s for the exit status, then started
    a new pool that lived as long as this process)."""
    before = set(children(os.getpid(), "spawn_main"))
    monkeypatch.setattr(process_engine, "_decode", _slow)
    loader = StreamLoader(str(four_codec_dataset), **SETTINGS, decode_processes=2)
    batches = iter(loader)
    try:
        next(batches)  # the workers go on with the batches ahead, a second a chunk
        time.sleep(0.3)
        loader.close()
        time.sleep(4)
        left = [p for p in children(os.getpid(), "spawn_main") if p not in before]
        assert not left, f"decode processes alive after close(): {left}"
    finally:
        batches.close()
        for p in set(children(os.getpid(), "spawn_main")) - before:
            os.kill(p, signal.SIGKILL)


def test_a_batch_whose_pool_another_batch_restarted_is_decoded_again(four_codec_dataset, monkeypatch):
    """Batches decoding at once (the loader's worker threads): one's chunks find the pool broken or hung and start
    it anew, which cancels another's chunks still queued there (or refuses its submissions). That batch is
    decoded again on the new pool, its frames those of a run without the restart, never a bare
    CancelledError or "cannot schedule new futures after shutdown"."""
    import threading

    from dali_stream.decode.route import CPU_OPEN
    from tests.decode.test_open_engine import episode_segments

    key = "observation.images.front"
    with StreamLoader(str(four_codec_dataset), batch_size=2, decode="cpu-open", device="cpu", num_workers=0) as loader:
        parts = [(seg, idx[:3]) for _, seg, idx in episode_segments(loader, key)][:8]
        size = (loader.meta.cameras[key].height, loader.meta.cameras[key].width)
    segs, idx = [p[0] for p in parts], [p[1] for p in parts]
    plain = CPU_OPEN.make_engine(1, None, {key: size}, processes=2)
    try:
        want = plain.decode(key, segs, idx)[0]
    finally:
        plain.close()
    monkeypatch.setattr(process_engine, "_decode", _slow)  # a second a chunk: chunks queue behind the running two
    engine = CPU_OPEN.make_engine(1, None, {key: size}, processes=2)
    got: list = [None] * 4
    try:
        batches = [threading.Thread(target=lambda n=n: got.__setitem__(n, _outcome(engine, key, segs, idx)))
                   for n in range(4)]
        for thread in batches:  # two chunks each: the first batch's running (a second each), the next three chunks
            thread.start()      # handed to the pool's queue (taken as running), the last three waiting: the last
            time.sleep(0.1)     # batch's both, which a shutdown cancels
        time.sleep(0.2)
        with engine._lock:  # what a batch does on a break: the pool replaced, the old one ended
            pool, engine._pool = engine._pool, None
            engine.restarts += 1
            process_engine._end(pool, processes=engine._procs.get(pool, []))
        for thread in batches:
            thread.join(timeout=120)
    finally:
        engine.close()
    assert not any(isinstance(g, BaseException) for g in got), got
    assert all(np.array_equal(g, want) for g in got)


def _outcome(engine, key, segs, idx):
    try:
        return engine.decode(key, segs, idx)[0]
    except BaseException as exc:  # noqa: BLE001 - the test asserts there was none
        return exc


def test_memory_per_decode_process_is_bounded(four_codec_dataset):
    """A decode process holds its interpreter, torch and FFmpeg, its decoders and one chunk's pictures: under 1 GiB
    resident after an epoch of four codecs."""
    with StreamLoader(str(four_codec_dataset), **SETTINGS, decode_processes=2) as loader:
        for _ in loader:
            pass
        rss = []
        for pid in _engine(loader)["pids"]:
            with open(f"/proc/{pid}/status") as f:
                rss += [int(line.split()[1]) << 10 for line in f if line.startswith("VmHWM:")]
    assert len(rss) == 2 and max(rss) < 1 << 30, rss


def test_ctrl_c_ends_a_loader_with_decode_processes_quickly(four_codec_dataset, tmp_path):
    """SIGINT to a training script (no `__main__` guard: the decode processes do not run it) while it iterates:
    KeyboardInterrupt within 5 s, and no decode process left."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(f"""
        import signal, sys, time
        # Ctrl-C as a terminal delivers it: started under a non-interactive shell's `&` (a CI script, a stress loop)
        # the test inherits SIGINT ignored, and Python then installs no handler: no Ctrl-C could stop the script
        signal.signal(signal.SIGINT, signal.default_int_handler)
        from dali_stream import StreamLoader
        print("script started", flush=True)
        loader = StreamLoader({str(four_codec_dataset)!r}, batch_size=6, decode="cpu-open", device="cpu",
                              decode_processes=2)
        batches = iter(loader)
        next(batches)  # the decode processes are up
        print("pids", *loader.stats()["engines"]["cpu-open"]["pids"], flush=True)
        for epoch in range(1000):
            for batch in batches:
                time.sleep(0.01)
            batches = iter(loader)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines = []
    while True:
        line = proc.stdout.readline()
        assert line, proc.stderr.read()[-3000:]
        lines.append(line)
        if line.startswith("pids"):
            break
    pids = [int(p) for p in line.split()[1:]]
    time.sleep(1)  # batches under way
    t0 = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    took = time.perf_counter() - t0
    assert "KeyboardInterrupt" in err, err[-3000:]
    assert took < 5, took
    assert lines.count("script started\n") == 1 and "script started" not in out  # the script ran once
    deadline = time.time() + 5
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.1)
    assert not any(alive(p) for p in pids)


# ---- the checks fail on a broken engine ------------------------------------------------------------------------
def _reordered(original):
    def answers(self, camera, segs, jobs):
        got = original(self, camera, segs, jobs)
        return got[::-1]
    return answers


def _dropped(original):
    def answers(self, camera, segs, jobs):
        got = original(self, camera, segs, jobs)
        if len(got) > 1:
            ok = got[-1]
            got[-1] = (ok[0], ok[1][:0], ok[2], ok[3])  # the last chunk's frames lost
        return got
    return answers


@pytest.mark.parametrize("break_it", ["reordered", "dropped", "left running"])
def test_the_checks_catch_a_broken_engine(four_codec_dataset, monkeypatch, break_it):
    """Chunks handed back in another order, a chunk's frames dropped, processes left running after close(): the
    equality check and the close check above fail on each (they are not checks that cannot fail)."""
    want = _epoch(four_codec_dataset, decode_processes=0)
    if break_it == "left running":
        monkeypatch.setattr(process_engine, "_end", lambda *args, **kwargs: None)
        with StreamLoader(str(four_codec_dataset), **SETTINGS, decode_processes=2) as loader:
            next(iter(loader))
            pids = _engine(loader)["pids"]
        try:
            assert any(alive(p) for p in pids)  # what test_close_leaves_no_decode_process asserts is not so
        finally:
            for p in pids:
                os.kill(p, signal.SIGKILL)
        return
    broken = {"reordered": _reordered, "dropped": _dropped}[break_it]
    monkeypatch.setattr(process_engine.ProcessEngine, "_answers", broken(process_engine.ProcessEngine._answers))
    with pytest.raises(Exception):  # noqa: B017 - any failure: a wrong batch, or none built
        same_batches(_epoch(four_codec_dataset, decode_processes=2), want)


def test_the_default_is_threads_on_the_cpu_and_processes_on_nvdec():
    """The route's rule (decode/route.py): cpu-open keeps its threads; nvdec-open takes a process per NVDEC engine
    within the rank's cores less one, where that makes two or more."""
    from dali_stream.decode.route import CPU_OPEN, NVDEC_OPEN

    assert CPU_OPEN.processes(7, 16) == 0
    assert NVDEC_OPEN.processes(7, 16) == 7 and NVDEC_OPEN.processes(7, 5) == 4 and NVDEC_OPEN.processes(5, 64) == 5
    assert NVDEC_OPEN.processes(7, 2) == 0 and NVDEC_OPEN.processes(0, 16) == 0
    assert np.array_equal(np.concatenate(process_engine.split(7, 3)), np.arange(7))


def test_decode_processes_end_when_the_loaders_process_is_killed(four_codec_dataset, tmp_path):
    """SIGKILL to the loader's process (no close ever comes): its decode processes end by themselves within seconds
    instead of living on as orphans."""
    script = tmp_path / "killed.py"
    script.write_text(textwrap.dedent(f"""
        import time
        from dali_stream import StreamLoader
        loader = StreamLoader({str(four_codec_dataset)!r}, batch_size=6, decode="cpu-open", device="cpu",
                              decode_processes=2)
        next(iter(loader))
        print("pids", *loader.stats()["engines"]["cpu-open"]["pids"], flush=True)
        time.sleep(600)
    """))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    line = proc.stdout.readline()
    assert line.startswith("pids"), proc.stderr.read()[-3000:]
    pids = [int(p) for p in line.split()[1:]]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    proc.kill()
    proc.wait()
    deadline = time.time() + 15
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.2)
    left = [p for p in pids if alive(p)]
    for p in left:
        os.kill(p, signal.SIGKILL)
    assert not left
