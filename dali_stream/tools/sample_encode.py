"""The sample writer's video encoding: each camera's frames encoded as a recorder would (`_ENCODERS`, or the
recorder's own options), checked by reading the painted ids back (a file whose ids did not survive is encoded
again with careful settings), in worker processes with a time budget and a stall watch."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

from . import paint

if TYPE_CHECKING:
    from .sample_data import SampleSpec

_ENCODERS = {
    # SVT-AV1 at presets 8 and faster skips coding some 8-pixel id blocks (they show another frame's bits):
    # preset 6 keeps every frame's ids at every size the tests check; `_encode_checked` verifies the rest.
    "h264": ("libx264", lambda g: {"preset": "veryfast", "crf": "18", "bf": "2", "g": str(g),
                                   "x264-params": f"scenecut=0:keyint={g}:min-keyint={g}"}),
    "hevc": ("libx265", lambda g: {"preset": "veryfast", "crf": "20",
                                   "x265-params": f"log-level=error:scenecut=0:keyint={g}:min-keyint={g}:"
                                                  "bframes=2:open-gop=0"}),
    "av1": ("libsvtav1", lambda g: {"preset": "6", "crf": "28", "g": str(g), "svtav1-params": "scd=0"}),
    "vp9": ("libvpx-vp9", lambda g: {"deadline": "realtime", "cpu-used": "8", "crf": "20", "b": "0",
                                     "g": str(g)}),
}
# Slower, higher-quality settings for a file whose ids did not survive the settings above.
_CAREFUL = {"h264": {"preset": "medium", "crf": "12"}, "hevc": {"preset": "medium", "crf": "12"},
            "av1": {"preset": "3", "crf": "18"}, "vp9": {"deadline": "good", "cpu-used": "2", "crf": "10"}}


def encode_video(path: Path, frames: Iterable[np.ndarray], codec: str, fps: int, gop: int, height: int, width: int,
                 careful: bool = False, crf: int | None = None, pix_fmt: str = "yuv420p") -> None:
    """Encode RGB frames into one MP4 stream, frame k at pts k/fps; `crf` replaces the codec's own (`_ENCODERS`),
    `careful` replaces both with `_CAREFUL`'s."""
    import av

    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1: errors only
    encoder, options_of = _ENCODERS[codec]
    options = {**options_of(gop), **({} if crf is None else {"crf": str(crf)}), **(_CAREFUL[codec] if careful else {})}
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), "w", format="mp4") as container:
        stream = container.add_stream(encoder, rate=fps, options=options)
        stream.width, stream.height, stream.pix_fmt = width, height, pix_fmt
        stream.time_base = Fraction(1, fps)
        stream.codec_context.gop_size = gop
        for k, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = k
            container.mux(stream.encode(frame))
        container.mux(stream.encode())


def misread_frames(path: Path, ids: Sequence[tuple[int, int]], depth: bool = False) -> list[int]:
    """Frames of `path` (decoded with PyAV, in presentation order) whose painted ids are not `ids[k]` for the
    k-th frame shown (a depth camera's, `depth`: its codes' ids, modulo `paint.DEPTH_SPAN`); frames missing from
    the file (or extra ones) count as misread."""
    import av

    bad = []
    k = -1
    with av.open(str(path)) as container:
        for k, frame in enumerate(container.decode(video=0)):
            if not (k < len(ids) and paint.frame_shows(frame, ids[k], depth)):
                bad.append(k)
    return bad + list(range(k + 1, len(ids)))


Span = tuple[float, float]  # an episode's (from_timestamp, to_timestamp) in its video file


def _encode_checked(path: Path, ids: list[tuple[int, int]], camera: int, codec: str,
                    spec: "SampleSpec") -> tuple[bool, list[Span]]:
    """Encode the frames carrying `ids`, then decode them back: every frame must show its own ids. A file that
    does not is encoded again with careful settings (then True); one that still does not is an error. Returns
    that and each episode's span in the file, in the order of `ids`."""
    from . import default_recorder, lerobot_recorder

    episodes = [list(run) for _, run in itertools.groupby(ids, key=lambda i: i[0])]  # ids run episode by episode
    ends = np.cumsum([len(run) for run in episodes]) / spec.fps
    continuous = [(float(a), float(b)) for a, b in zip(np.concatenate([[0.0], ends[:-1]]), ends)]
    if spec.cameras[camera].depth:  # lerobot's depth encoder (lossless), as each recorder lays files out
        if spec.recorder == "lerobot":
            spans = lerobot_recorder.write_file(path, [spec.frames(run, camera) for run in episodes], codec, spec.fps,
                                                spec.gop, lerobot_recorder.LEROBOT_CRF, "", spec.height, spec.width,
                                                depth=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            lerobot_recorder.encode_depth(path, spec.frames(ids, camera), spec.fps, spec.gop)
            spans = continuous
        bad = misread_frames(path, spec.painted(ids), depth=True)
        if bad:
            raise RuntimeError(f"{path}: {len(bad)} of {len(ids)} depth frames do not show their codes after a "
                               f"lossless encode (first: frame {bad[0]}, ids {ids[bad[0]]}): FFmpeg's libx265 or "
                               "its 12-bit grey support is broken here")
        return False, spans
    for careful in (False, True):
        if spec.recorder == "lerobot":  # careful: a lower crf (and `CAREFUL`), lerobot's g and B-frames unchanged
            crf = 12 if careful else (lerobot_recorder.LEROBOT_CRF if spec.crf is None else spec.crf)
            spans = lerobot_recorder.write_file(
                path, [spec.frames(run, camera) for run in episodes], codec, spec.fps,
                spec.gop, crf, spec.pix_fmt_of(codec), spec.height, spec.width, careful=careful)
        else:  # one continuous stream: episode k spans its frames' times
            if spec.recorder == "encoder-defaults":  # careful: a lower crf (and SVT-AV1's preset 6)
                encoder = spec.cameras[camera].encoder or default_recorder.ENCODERS[codec]
                default_recorder.encode(path, spec.frames(ids, camera), encoder, spec.fps, spec.gop, spec.crf,
                                        spec.pix_fmt_of(codec), spec.height, spec.width, careful=careful)
            else:
                encode_video(path, spec.frames(ids, camera), codec, spec.fps, spec.gop, spec.height, spec.width,
                             careful=careful, crf=spec.crf, pix_fmt=spec.pix_fmt_of(codec))
            spans = continuous
        bad = misread_frames(path, spec.painted(ids))
        if not bad:
            return careful, spans
    raise RuntimeError(f"{path}: {len(bad)} of {len(ids)} frames ({codec}, {spec.height}x{spec.width}) do not show "
                       f"their painted ids even with careful encoder settings (first: frame {bad[0]}, ids "
                       f"{ids[bad[0]]}); use another size or codec")


PARALLEL_PIXELS = 200_000_000


def encode_workers(spec: "SampleSpec", files: int, workers: int | None = None) -> int:
    """Processes that encode the video files: `workers` if given, else one per core for a sample of at least
    PARALLEL_PIXELS of video (painting, encoding and reading the ids back run in Python per frame, so one
    file keeps about one core busy), else 1."""
    if workers is not None:
        return min(workers, max(1, files))
    pixels = int(spec.lengths().sum()) * len(spec.cameras) * spec.height * spec.width
    return min(os.cpu_count() or 1, files) if pixels >= PARALLEL_PIXELS else 1


_Job = tuple[Path, list[tuple[int, int]], int, str]  # a video file: path, painted ids, camera index, codec


ENV_ENCODE_TIMEOUT_S = "DALI_STREAM_ENCODE_TIMEOUT_S"  # a video file's encode budget (default: `encode_budget_s`)
ENV_ENCODE_STALL_S = "DALI_STREAM_ENCODE_STALL_S"  # seconds an encoding process may use no CPU (default 60)


def encode_stall_s() -> float:
    """Seconds an encoding child may go without using any CPU before it counts as hung: SVT-AV1's hang is a
    deadlock (every thread waiting on a futex, 0 % CPU), which this catches in a minute, where the whole-file
    budget allows an hour for an hour of video."""
    return float(os.environ.get(ENV_ENCODE_STALL_S) or 60.0)


def _cpu_ticks(pid: int) -> int | None:
    """CPU time a process (all its threads) has used, in clock ticks; None where /proc cannot say."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
    except (OSError, IndexError, ValueError):
        return None


def encode_budget_s(spec: "SampleSpec", frames: int) -> float:
    """Seconds one video file of `frames` frames may take to encode and check before it counts as hung: two
    minutes plus a second per 640x480 frame (~20x what SVT-AV1 needs on one busy core)."""
    override = os.environ.get(ENV_ENCODE_TIMEOUT_S)
    if override:
        return float(override)
    return 120.0 + frames * spec.height * spec.width / (640 * 480)


def _encode_files(jobs: list[_Job], spec: "SampleSpec", workers: int,
                  done: Callable[[], None]) -> tuple[list[Path], dict[Path, list[Span]]]:
    """`_encode_checked` for each job in `workers` child processes (`encode_child`), never in this one: libsvtav1
    run as root switches its caller's thread to SCHED_FIFO priority 99 and leaves it there, and every thread
    created afterwards inherits it (a loader's among them). A file that takes longer than `encode_budget_s`, or
    whose process uses no CPU for `encode_stall_s` (SVT-AV1 has hung inside svt_av1_enc_send_picture at 0 % CPU,
    every thread waiting on a futex), has its process killed and is encoded again once; Ctrl-C kills them too.
    Returns the files that needed careful settings and each file's episode spans."""
    careful: list[Path] = []
    spans: dict[Path, list[Span]] = {}
    pending = list(jobs)
    for attempt in (1, 2):
        stalled = _run_encodes(pending, spec, workers, careful, spans, done)
        if stalled is None:
            return careful, spans
        pending = [job for job in pending if job[0] not in spans]
        if attempt == 2:
            path, why = stalled
            raise RuntimeError(
                f"encoding {path} {why}, twice (the encoder's process was killed each time); {len(pending)} video "
                f"file(s) are not written. SVT-AV1 (libsvtav1) has been seen to hang this way (a deadlock at 0 % "
                f"CPU): run again, with fewer --workers or another --cameras codec; the limits are "
                f"{ENV_ENCODE_TIMEOUT_S}=SECONDS (a whole file) and {ENV_ENCODE_STALL_S}=SECONDS (no CPU used)")
    return careful, spans


DEMOTER_NAME = b"dali-demote"  # the demoting thread's name (/proc/<pid>/task/<tid>/comm)


def _demote_realtime_threads() -> None:
    """libsvtav1 run as root puts its threads in real-time SCHED_FIFO (priority 99): on a machine of few cores
    they then starve every other process (measured: a pip install beside three encodes got 8 % of a core). Put
    every thread of this process back to SCHED_OTHER, twice a second, for the process's life. This thread itself
    runs at real-time priority where it may (as root), or the threads it demotes would starve it too."""
    import ctypes

    try:
        ctypes.CDLL(None).prctl(15, DEMOTER_NAME, 0, 0, 0)  # PR_SET_NAME: how `top` and tests tell it apart
    except (OSError, AttributeError):
        pass
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(os.sched_get_priority_max(os.SCHED_FIFO)))
    except OSError:  # not root: SVT-AV1 cannot raise its threads either
        pass
    me = threading.get_native_id()
    while True:
        time.sleep(0.5)
        for task in os.listdir("/proc/self/task"):
            try:
                if int(task) != me and os.sched_getscheduler(int(task)) != os.SCHED_OTHER:
                    os.sched_setscheduler(int(task), os.SCHED_OTHER, os.sched_param(0))
            except OSError:  # the thread ended meanwhile
                pass


def encode_child(work: str, results: str) -> None:
    """A child process's loop (`_run_encodes`): the pickled (jobs, spec) in file `work`, each job's pickled
    ("ok", result) or ("error", exception) written to `results`/<n>.pkl as it finishes."""
    import pickle

    threading.Thread(target=_demote_realtime_threads, daemon=True, name="demote-realtime").start()

    import sys
    import traceback

    jobs, spec = pickle.loads(Path(work).read_bytes())
    for n, job in enumerate(jobs):
        path, ids, camera, codec = job
        for attempt in (1, 2):  # an encoder error is tried once more (seen once from SVT-AV1 under load: EINVAL)
            try:
                outcome: tuple = ("ok", _encode_checked(path, ids, camera, codec, spec))
                break
            except BaseException as exc:  # noqa: BLE001 - handed to the parent, which raises it
                print(f"encoding {path} (attempt {attempt}) failed:\n{traceback.format_exc()}", file=sys.stderr,
                      flush=True)  # the child's log, which the parent's error carries
                outcome = ("error", exc)
                if not isinstance(exc, Exception):  # KeyboardInterrupt, SystemExit: no second try
                    break
        tmp = Path(results) / f"{n}.tmp"
        tmp.write_bytes(pickle.dumps(outcome))
        tmp.rename(Path(results) / f"{n}.pkl")  # whole or absent: the parent polls for it
        if outcome[0] == "error":
            return


def _run_encodes(jobs: list[_Job], spec: "SampleSpec", workers: int, careful: list[Path],
                 spans: dict[Path, list[Span]], done: Callable[[], None]) -> tuple[Path, str] | None:
    """Encode `jobs` in up to `workers` child Python processes (plain subprocesses: nothing of the caller's
    `__main__` is imported again, unlike multiprocessing's spawn), a share of the jobs each. Returns None when
    all finished, else the first file past its budget or whose process used no CPU for `encode_stall_s`, and
    why; every child is killed on leaving, whatever happened."""
    import pickle
    import sys
    import tempfile

    stall_s = encode_stall_s()

    folder = Path(tempfile.mkdtemp(prefix="dali-stream-encode-"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    count = max(1, min(workers, len(jobs)))
    children: list[_Child] = []
    try:
        for w in range(count):
            child = _Child(jobs[w::count], folder / str(w), folder / f"{w}.log")
            child.results.mkdir()
            work = folder / f"{w}.work"
            work.write_bytes(pickle.dumps((child.jobs, spec)))
            code = ("from dali_stream.tools.sample_encode import encode_child; "
                    f"encode_child({str(work)!r}, {str(child.results)!r})")
            with child.log.open("wb") as log:
                child.proc = subprocess.Popen([sys.executable, "-c", code], stdout=log, stderr=log,
                                              stdin=subprocess.DEVNULL, env=env)
            child.started = time.monotonic()
            children.append(child)
        while any(c.finished < len(c.jobs) for c in children):
            for child in children:
                if child.finished == len(child.jobs):
                    continue
                path = child.jobs[child.finished][0]
                got = child.results / f"{child.finished}.pkl"
                if got.exists():
                    kind, value = pickle.loads(got.read_bytes())
                    if kind == "error":
                        if child.log.exists() and hasattr(value, "add_note"):
                            value.add_note(f"encoder log of {path}:\n{child.log.read_text(errors='replace')[-3000:]}")
                        raise value
                    was_careful, spans[path] = value
                    if was_careful:
                        careful.append(path)
                    done()
                    child.started, child.finished = time.monotonic(), child.finished + 1
                elif child.proc is not None and child.proc.poll() is not None:
                    tail = child.log.read_text(errors="replace").strip()[-2000:]
                    raise RuntimeError(f"the process encoding {path} ended with exit status {child.proc.returncode} "
                                       f"before finishing it; its output:\n{tail}")
                elif (time.monotonic() - child.started
                      > (budget := encode_budget_s(spec, len(child.jobs[child.finished][1])))):
                    return path, f"did not finish within {budget:.0f} s"
                elif child.proc is not None and child.stalled(stall_s):
                    return path, f"used no CPU for {stall_s:.0f} s (hung)"
            time.sleep(0.05)
        return None
    finally:
        for child in children:
            if child.proc is not None and child.proc.poll() is None:
                child.proc.kill()
            if child.proc is not None:
                child.proc.wait()
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class _Child:
    """One encoding child process of `_run_encodes`: its share of the jobs and how far it got."""

    jobs: list[_Job]
    results: Path
    log: Path
    proc: "subprocess.Popen | None" = None
    started: float = 0.0  # when its current job started (its previous one finished)
    finished: int = 0
    cpu: int | None = None  # CPU ticks it had used when last seen to change
    cpu_at: float = 0.0  # when that was

    def stalled(self, stall_s: float) -> bool:
        """No CPU used for `stall_s` seconds (False where /proc cannot say)."""
        assert self.proc is not None
        ticks, now = _cpu_ticks(self.proc.pid), time.monotonic()
        if ticks is None:
            return False
        if ticks != self.cpu:
            self.cpu, self.cpu_at = ticks, now
        return now - self.cpu_at > stall_s


