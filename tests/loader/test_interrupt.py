"""Ctrl-C before (and around) the first batch ends the process promptly: real child processes, a real
SIGINT to their process group.

The race: a KeyboardInterrupt that lands in `ThreadPoolExecutor.submit` between a new worker thread's start and
its registration leaves a thread that interpreter exit never hands its end-of-work sentinel, and then joins
forever (it hung about 1 run in 40 with long episodes' pieces cut ahead). The first test puts the interrupt exactly
there, in each of the loader's pools; the second sends SIGINT at random moments from construction to the third
batch, with 0, 2 and 8 workers, episodes read whole and in pieces. The last one interrupts the first batch while
`image_transforms`' worker processes start, which takes seconds each: nothing waits for them."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

EXIT_S = 20.0  # every try must end this long after its SIGINT: 4x what a quiet machine needs, so a loaded 2-core
# machine (a CPU-heavy neighbour, two children at a time) still passes; a hang never ends

CHILD = r'''
import sys, threading
root, workers, pieces, interrupt_at = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "pieces", sys.argv[4]
if interrupt_at != "-":  # Ctrl-C landing right after a pool thread of that name starts, before it is registered
    start, hit = threading.Thread.start, []
    def started(self):
        start(self)
        if self.name.startswith(interrupt_at) and not hit and threading.current_thread() is threading.main_thread():
            hit.append(self.name)
            raise KeyboardInterrupt
    threading.Thread.start = started
import signal
# Ctrl-C as a terminal delivers it: a process started by a non-interactive shell's `&` (a CI script, a stress loop)
# inherits SIGINT ignored, and Python then installs no handler, so no Ctrl-C could ever stop the child
signal.signal(signal.SIGINT, signal.default_int_handler)
# CPython ignores an exception raised in a weakref callback, and importing runs one as each module's import lock is
# dropped (`_get_module_lock.<locals>.cb`): a Ctrl-C landing in those few bytecodes is printed and lost by Python
# itself, before any of the loader's code runs. Such a loss alone is re-raised here; one lost anywhere else (the
# loader's threads, callbacks, finalizers) is not, and fails the test
lost, unraisable = [], sys.unraisablehook
def noted(u):
    code = getattr(u.object, "__code__", None)
    if isinstance(u.exc_value, KeyboardInterrupt) and code and code.co_filename.startswith("<frozen importlib"):
        lost.append(u.object)
    unraisable(u)
sys.unraisablehook = noted
def python_lost_a_ctrl_c():
    if lost:
        raise KeyboardInterrupt(f"re-raised: Python's import machinery ignored it in {lost[0]!r}")
print("start", flush=True)
from dali_stream import StreamLoader
python_lost_a_ctrl_c()
loader = StreamLoader(root, batch_size=4, episode_pool_size=4, num_workers=workers, decode="cpu", device="cpu",
                      **({"segment_bytes": 1} if pieces else {}))
python_lost_a_ctrl_c()  # the loader imports lazily too
print("built", flush=True)
while True:
    for i, batch in enumerate(loader):
        python_lost_a_ctrl_c()
        print(f"batch {i}", flush=True)
'''


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=12, min_length=20, max_length=40, height=96, width=128,
                      cameras=parse_cameras("front:av1,wrist:av1"), seed=7)
    return write_sample(tmp_path_factory.mktemp("interrupt") / "av1x2", spec)


def _spawn(tmp: Path, root: Path, workers: int, pieces: bool, interrupt_at: str = "-") -> subprocess.Popen:
    tmp.mkdir(parents=True)
    script = tmp.parent / f"{tmp.name}.py"
    script.write_text(CHILD)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, str(script), str(root), str(workers), "pieces" if pieces else "whole",
                             interrupt_at], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)


def _ended(proc: subprocess.Popen, tmp: Path, what: str, timeout: float) -> tuple[int, str]:
    """Wait for the child; fail (killing it) if it is still alive after `timeout`, left processes in its group or
    files in its TMPDIR. Returns its exit status and its output."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"{what}: still running {timeout} s after Ctrl-C; output {out[-300:]!r}, stderr {err[-1500:]}")
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        pass
    else:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{what}: processes of its group outlived it")
    # torch makes its compile cache there on import (torchinductor_<user>), kept by design, interrupted or not
    left = [p.name for p in tmp.iterdir() if not p.name.startswith("torchinductor_")]
    assert not left, f"{what}: left temporary files {left}"
    return proc.returncode, out + err


@pytest.mark.parametrize("pool", ["dali-stream-piece", "dali-stream-fetch", "dali-stream_"],
                         ids=["piece-threads", "fetch-threads", "builder-threads"])
def test_ctrl_c_between_a_pool_threads_start_and_its_registration_ends_the_process(dataset, tmp_path, pool):
    proc = _spawn(tmp_path / "t", dataset, 2, True, interrupt_at=pool)
    _wait_for(proc, "built")  # the pools' first threads start once the loader iterates
    rc, out = _ended(proc, tmp_path / "t", f"interrupt as {pool} starts", 2 * EXIT_S)  # the first batch's work too
    assert rc != 0 and "KeyboardInterrupt" in out, out[-2000:]


def _wait_for(proc: subprocess.Popen, line: str) -> None:
    """Read the child's output until `line` (or its end), at most two minutes (a loaded machine's imports)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        got = proc.stdout.readline().strip()
        if got == line or not got:
            return


def _one_try(dataset: Path, tmp: Path, rng: random.Random) -> str:
    workers, pieces = rng.choice([0, 2, 8]), rng.random() < 0.5
    phase = rng.choice(["start", "built", "batch 0", "batch 1"])  # inside imports and __init__, before iter(), ...
    delay = rng.uniform(0, {"start": 1.0, "built": 0.3}.get(phase, 0.05))
    what = f"workers={workers} {'pieces' if pieces else 'whole'}, SIGINT {delay:.2f} s after {phase!r}"
    proc = _spawn(tmp, dataset, workers, pieces)
    _wait_for(proc, phase)
    time.sleep(delay)
    os.killpg(proc.pid, signal.SIGINT)
    rc, out = _ended(proc, tmp, what, EXIT_S)
    assert rc != 0, f"{what}: exit status 0 after Ctrl-C"
    assert rc != -signal.SIGABRT, f"{what}: aborted: {out[-1500:]}"
    return what


def test_ctrl_c_at_random_moments_of_the_start_ends_the_process_promptly(dataset, tmp_path):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}: random.Random({seed}) replays these tries")
    rng = random.Random(seed)
    tries = [(tmp_path / f"t{n}", random.Random(rng.random())) for n in range(6)]
    with ThreadPoolExecutor(2) as lanes:  # two children at a time
        done = list(lanes.map(lambda t: _one_try(dataset, *t), tries))
    assert len(done) == len(tries), f"seed {seed}"


def test_ctrl_c_while_an_epoch_ends_is_not_swallowed(dataset):
    """At an epoch's end the pieces cut ahead that nobody took are waited for and dropped (`drop_ahead`); a Ctrl-C
    landing in that wait is the caller's, not one of the pieces' errors to forget (it was caught with them, and a
    training loop went on into the next epoch). The wait is a real batch task, begun, whose wait is interrupted."""
    from dali_stream.fetch.pieces import _BatchTask
    from tests.support.parts import store_of

    class Interrupted(_BatchTask):
        def outcome(self, n):
            raise KeyboardInterrupt

    def fails(asks):
        raise ValueError("a piece's own error: nobody asked for it")

    # the store a loader with `segment_bytes=1` builds: its episodes read in pieces, cut ahead on threads of its own
    store = store_of(dataset, segment_bytes_limit=1, fetch_workers=2)
    try:
        running = Interrupted(["ask"])
        running.claim()  # begun: drop_ahead waits for it
        failed = _BatchTask(["ask"])
        assert failed.run(fails)
        store.pieces._ahead.update({"failed": (failed, 0), "interrupted": (running, 0)})  # (a batch's task, place)
        with pytest.raises(KeyboardInterrupt):
            store.drop_ahead()
    finally:
        store.close()


TRANSFORMS_EXIT_S = 5.0  # a quiet machine needs 1.5-2.5 s; the transform processes' start must not count

SLOW_START = r'''
import time

class SlowToStart:
    """A transform whose unpickling, in each transform process, takes 10 s: a heavy import (torchvision's, lerobot's)
    on a loaded machine."""

    def __init__(self):
        self.start_s = 10.0

    def __setstate__(self, state):
        time.sleep(state["start_s"])
        self.__dict__.update(state)

    def __call__(self, frames):
        return frames
'''

TRANSFORMED = r'''
import os, signal, sys, time
import multiprocessing.context
root = sys.argv[1]
signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C as a terminal delivers it (see CHILD)
# Ctrl-C during the first batch as the builder threads start the transform processes, before these exist: none of
# them receives it, and each then takes its time to start
start, starts = multiprocessing.context.SpawnProcess.start, []
def starting(self):
    starts.append(self)
    if len(starts) == 1:
        print(f"sigint {time.monotonic()}", flush=True)
        os.killpg(0, signal.SIGINT)
        time.sleep(0.2)  # the main thread takes it before the processes start
    start(self)
multiprocessing.context.SpawnProcess.start = starting
from slow_start import SlowToStart
from dali_stream import StreamLoader
loader = StreamLoader(root, batch_size=4, episode_pool_size=4, num_workers=2, decode="cpu", device="cpu",
                      image_transforms=SlowToStart())
transforms = loader.stats()["transforms"]
assert transforms["in_processes"] and transforms["processes"] == 2
for batch in loader:
    print("batch", flush=True)
'''


def test_ctrl_c_while_the_transform_processes_start_ends_the_process_promptly(dataset, tmp_path):
    """Ctrl-C during the first batch with `image_transforms` in worker processes, which start on that batch and take
    seconds to (importing torch, the transform's modules): the builder threads waiting on them stop waiting, so the
    process ends within TRANSFORMS_EXIT_S of it, as without transforms, and no transform process outlives it."""
    tmp = tmp_path / "t"
    tmp.mkdir()
    (tmp_path / "slow_start.py").write_text(SLOW_START)
    script = tmp_path / "transformed.py"
    script.write_text(TRANSFORMED)
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, str(script), str(dataset)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    assert proc.stdout is not None
    sent = None
    for line in proc.stdout:  # to the Ctrl-C (or the end, if it never came)
        if line.startswith("sigint "):
            sent = float(line.split()[1])
            break
    try:
        out, err = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(f"still running 120 s after Ctrl-C; {err[-2000:]}")
    assert sent is not None, f"no Ctrl-C sent: the transform processes never started; {out[-300:]!r} {err[-2000:]}"
    took = time.monotonic() - sent
    assert proc.returncode != 0 and "KeyboardInterrupt" in err, err[-2000:]
    # no process of its group outlives it: the transform processes end with it (multiprocessing's resource tracker,
    # which ends when it reads the end of its pipe, is given a moment)
    deadline = time.monotonic() + 2.0
    while True:
        try:
            os.killpg(proc.pid, 0)
        except ProcessLookupError:
            break
        if time.monotonic() > deadline:
            left = subprocess.run(["ps", "-o", "pid,stat,args", "-g", str(proc.pid)], capture_output=True, text=True)
            os.killpg(proc.pid, signal.SIGKILL)
            pytest.fail(f"processes of its group outlived it:\n{left.stdout}")
        time.sleep(0.05)
    assert took < TRANSFORMS_EXIT_S, f"exit {took:.1f} s after Ctrl-C; {err[-2000:]}"
