"""The GPU visit's first call, dry run on the CPU: `benchmarks/gpu_first.sh` as the device runs it, with FFmpeg's
decoders (`cpu-open`) in NVDEC's place, a small dataset, and the imports the GPU node lacks refused (DALI,
torchcodec, huggingface_hub, rich), so a plumbing error (an import, a path, a flag, a result file) fails here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu_first import NOT_ON_THE_NODE

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    data = tmp_path_factory.mktemp("gpu-first") / "data"
    proc = subprocess.run([sys.executable, "benchmarks/gpu_first.py", "prepare", "--small", "--data", str(data)],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "carried by one device call" in proc.stdout and "of 60 MiB" in proc.stdout
    return data


def test_prepare_writes_what_the_node_cannot_make(prepared):
    from dali_stream.meta.dataset import DatasetMeta

    for name, codec in (("h264", "h264"), ("hevc", "hevc"), ("h264-256", "h264")):
        root = prepared / name
        cameras = DatasetMeta.open(str(root)).cameras.values()
        assert {c.codec for c in cameras} == {codec}
        assert {(c.height, c.width) for c in cameras} == ({(64, 64)} if name == "h264-256" else {(96, 128)})
        colours = json.loads((root / "colours.json").read_text())
        assert colours and all(set(c) == {"matrix", "full_range"} for c in colours.values())
        import numpy as np

        reference = np.load(root / "reference.npz")
        assert len(reference.files) >= 4 and reference[reference.files[0]].dtype == np.uint8


def test_the_first_call_runs_as_on_the_node(prepared, tmp_path):
    out = tmp_path / "out"
    env = {**os.environ, "PY": sys.executable, "OUT": str(out), "DALI_STREAM_DENY_IMPORTS": NOT_ON_THE_NODE}
    proc = subprocess.run(["bash", "benchmarks/gpu_first.sh", "--route", "cpu-open", "--data", str(prepared),
                           "--threads", "1,2", "--window-s", "0.3", "--scaling"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((out / "gpu_first.json").read_text())
    assert report["preflight"]["ok"] and report["route"] == "cpu-open"
    runs = report["runs"]
    assert {(r["dataset"], r["mode"], r["threads"]) for r in runs} == {
        (c, m, t) for c in ("h264", "hevc", "h264-256") for m in ("single", "window8") for t in (1, 2)}
    for r in runs:
        assert r["samples_per_s"] > 0 and r["cpu_ms_per_sample"] > 0 and r["wrong_frames"] == 0, r
        assert r["frames_checked"] == r["samples"] * r["frames_per_camera"] * 2
        assert r["nvdec_utilisation"]["available"] is False  # no GPU in use: said, not faked
        ms = r["ms_per_sample"]
        assert set(ms) == {"builder_fetch", "builder_engine", "builder_check", "engine_feed", "engine_decoder",
                           "engine_convert", "engine_stack", "engine_sync"}
        assert ms["engine_decoder"] > 0 and ms["engine_convert"] > 0 and ms["builder_engine"] > 0, ms
    for codec, c in report["colour"].items():
        assert c["passed"] and c["max_levels"] == 0, (codec, c)  # FFmpeg against FFmpeg: the same pictures
    table = (out / "summary.md").read_text()
    assert "| h264 | 8 | 2 |" in table and "colour check hevc" in table and "thread-ms per sample" in table
    # what the decode threads wait for: processes of one thread against one process of as many threads, processes
    # handing frames over, and the interpreter's lock inside the decoder's calls (FFmpeg's decode through PyAV
    # releases it)
    scaled = report["scaling"]
    assert [p["processes"] for p in scaled["processes"]] == [1, 2], scaled
    for p in scaled["processes"]:
        assert p["samples_per_s"] > 0 and p["wrong_frames"] == 0 and len(p["each"]) == p["processes"], p
    assert scaled["gil"]["calls"] > 0 and 0 <= scaled["gil"]["gil_held_fraction"] <= 1, scaled["gil"]
    # two decoding processes handing their frames (shared memory here, CUDA IPC there) to one consumer reading ids
    (handed,) = scaled["handoff"]
    assert handed["processes"] == 2 and handed["samples_per_s"] > 0 and handed["frames"] > 0, handed
    assert handed["wrong_frames"] == 0 and handed["exit_codes"] == [0, 0], handed
    assert "processes ÷ threads" in table and "| 2 |" in table and "interpreter's lock" in table
    assert "samples/s received" in table


def test_a_wrong_frame_is_counted_not_hidden(prepared):
    """The check reads the painted ids of what the engine returned: a plan asking other frames than it decodes
    is reported frame by frame."""
    sys.path.insert(0, str(REPO))
    from benchmarks.gpu_rig import Rig

    rig = Rig(prepared / "h264", "cpu-open", 1, 1)
    try:
        plan = rig.plan(0).batch(0)
        decoded, wrong = rig.decode(plan)
        assert decoded > 0 and wrong == []
        rows = [rig.store.rows(int(p)) for p in plan.episodes]
        key = rig.cameras[0]
        segs, idx = rig.builder.locate(plan, rows, key)
        frames, _ = rig.engine.decode(key, segs, idx)
        shifted = [(e, f + 1) for e, f in rig.expected(plan, key)]
        said = rig._check(frames, shifted, key, plan)
        assert len(said) == plan.size and "painted" in said[0] and "planned" in said[0]
    finally:
        rig.close()


def test_the_second_tier_runs_as_on_the_node(prepared, tmp_path):
    """Tier 2's measuring call on the CPU: the loader on `cpu-open` in decode processes (0 and 2) against the CPU
    route on every core (H.264 at 640x480 and 256x256, one frame and windows, HEVC), every frame checked, the
    boundary tests of that route collected, the mixture, each step's status and JSON in `gpu_second.json`: no more
    files than a device call returns (8); `gpu_decide.py` reads the sweep and states the targets."""
    out = tmp_path / "out"
    env = {**os.environ, "PY": sys.executable, "OUT": str(out)}
    proc = subprocess.run(["bash", "benchmarks/gpu_second.sh", "--route", "cpu-open", "--data", str(prepared),
                           "--window-s", "0.5"], cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    report = json.loads((out / "gpu_second.json").read_text())
    assert proc.returncode == 0 and report["failed"] == [], (report, proc.stdout[-2000:], proc.stderr[-2000:])
    assert list(report["steps"]) == ["processes", "boundaries", "mixture_beside_kernel"]
    (sweep,) = report["steps"]["processes"]["results"]
    runs = {r["id"]: r for r in sweep["runs"]}
    assert {c for c in (r["case"] for r in sweep["runs"])} == {
        "h264/single", "h264-256/single", "hevc/single", "h264/window8", "h264-256/window8"}
    assert runs["h264/single/default"]["event"] == "same"  # cpu-open's default is 0, measured under its number
    assert runs["h264/single/2"]["engines"]["cpu-open"]["processes"] == 2
    assert set(runs["hevc/single/cpu"]["routes"].values()) == {"cpu-open"}
    for r in sweep["runs"]:
        if r.get("event") != "same":
            assert not r.get("error") and r["samples_per_s"] > 0, r
            assert r["wrong_frames"] == 0 and r["frames_checked"] > 0 and r.get("restarts", 0) == 0, r
    visit = tmp_path / "visit"
    (visit / "gpu-second").mkdir(parents=True)
    (visit / "gpu-second" / "gpu_second.json").write_text(json.dumps(report))
    decided = subprocess.run([sys.executable, "benchmarks/gpu_decide.py", str(visit)], cwd=REPO,
                             capture_output=True, text=True, timeout=60)
    assert decided.returncode == 1, decided.stderr  # no entry earned on cpu-open
    assert "| h264/single | 2 |" in decided.stdout and "target MET: 0 wrong frames" in decided.stdout
    assert "target not measured: NVDEC >= 50 % busy" in decided.stdout
    assert report["steps"]["mixture_beside_kernel"]["results"][0]["mixture"]["ratio_median"] > 0
    files = [p for p in out.rglob("*") if p.is_file()]
    assert len(files) <= 8, files
    collected = (out / "boundaries.log").read_text()
    assert "cpu-open" in collected and "collected" in collected, collected


def test_the_fetch_stage_and_packet_feed_run_without_pyav(prepared):
    """The GPU node has no PyAV (the first call brings none): indexing a file, cutting an episode's packets and
    building NVDEC's bitstream must not import it (the dry run above cannot refuse PyAV: `cpu-open` decodes with
    it)."""
    script = """
import sys
sys.path.insert(0, ".")
from pathlib import Path
from benchmarks.gpu_rig import Rig
from dali_stream.decode.feed import build_feed
for codec in ("h264", "hevc"):
    rig = Rig(Path(sys.argv[1]) / codec, "cpu-open", 1, 8)
    plan = rig.plan(0).batch(0)
    rows = [rig.store.rows(int(p)) for p in plan.episodes]
    for key in rig.cameras:
        segs, idx = rig.builder.locate(plan, rows, key)
        feed = build_feed(list(zip(segs, idx)))
        assert len(segs) == plan.size and feed is not None
    assert not rig.store.indexes.unsupported  # every file cut from our own index, none by the demuxer
    rig.close()
print("av" in sys.modules)
"""
    env = {**os.environ, "DALI_STREAM_DENY_IMPORTS": NOT_ON_THE_NODE + ",av"}
    proc = subprocess.run([sys.executable, "-c", script, str(prepared)], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "False"


def test_torchcodec_loads_the_ffmpeg_pyav_bundles(prepared, tmp_path):
    """Tier 2 gives torchcodec the FFmpeg inside PyAV's wheel (the node has none) through links named as
    torchcodec's libraries ask (`benchmarks/ffmpeg_links.sh`): here torchcodec then decodes with those libraries,
    not the system's."""
    import av

    libs = Path(av.__file__).resolve().parents[1] / "av.libs"
    if not libs.is_dir():
        pytest.skip(f"this PyAV was not installed from a wheel bundling FFmpeg ({libs} is missing)")
    path = subprocess.run(["bash", "benchmarks/ffmpeg_links.sh", str(libs), str(tmp_path / "links")], cwd=REPO,
                          capture_output=True, text=True, check=True).stdout.strip()
    video = next((prepared / "h264" / "videos").rglob("*.mp4"))
    script = """
import sys
from torchcodec.decoders import VideoDecoder
frame = VideoDecoder(sys.argv[1])[0]
print(frame.shape[0], [line.split()[-1] for line in open("/proc/self/maps") if "libavcodec" in line][0])
"""
    proc = subprocess.run([sys.executable, "-c", script, str(video)], env={**os.environ, "LD_LIBRARY_PATH": path},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    channels, loaded = proc.stdout.split()
    assert channels == "3" and Path(loaded).parent == libs, proc.stdout


@pytest.mark.skipif(sys.version_info[:2] == (3, 12), reason="the rehearsal would install ~3 GB of the node's wheels")
def test_the_rehearsal_asks_for_the_nodes_python(tmp_path):
    """`gpu_rehearse.sh` rehearses a visit on Python 3.12 (the node's): given another interpreter it says so and
    stops before making anything."""
    venv = tmp_path / "venv"
    proc = subprocess.run(["bash", "benchmarks/gpu_rehearse.sh", str(venv)], cwd=REPO,
                          env={**os.environ, "PY312": sys.executable}, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"PY312={sys.executable} is not a Python 3.12 interpreter" in proc.stderr and not venv.exists()


def test_the_lock_probe_tells_a_call_that_holds_the_interpreter_from_one_that_releases_it():
    """tier 1's question "do the decoder's calls hold the interpreter's lock" (`gpu_scaling.lock_share`), asked of
    calls whose answer is known: a C sort holds the lock for its whole call, a sleep releases it."""
    import random
    import time

    from benchmarks.gpu_scaling import lock_share

    items = random.Random(0).sample(range(200_000), 200_000)  # ~50 ms a sort, the lock held throughout
    held = lock_share([lambda: sorted(items)], 0.5)
    released = lock_share([lambda: time.sleep(0.005)], 0.5)
    assert held["calls"] > 0 and released["calls"] > 0
    # the time the spinning thread spends queued for a core is left out: a busy machine (the test suite's workers on
    # two cores) must not read a held lock as a released one
    assert held["gil_held_fraction"] > 0.8 and released["gil_held_fraction"] < 0.15, (held, released)


def test_a_scaling_part_that_fails_is_written_down_and_the_next_runs(tmp_path):
    """On the node a failure is a finding: each part of the scaling step that cannot run (here: no dataset) says
    why in its own entry, the summary shows it, and the parts after it still run, each saved as it ends."""
    from benchmarks.gpu_scaling import scaling, table

    saves = []
    out = scaling(tmp_path / "missing", "cpu-open", [1], 0.2, None, (2,), saved=lambda: saves.append(1))
    assert "does not exist" in out["gil"]["error"]
    assert [p["processes"] for p in out["processes"]] == [1] and "does not exist" in out["processes"][0]["error"]
    assert [h["processes"] for h in out["handoff"]] == [2] and "does not exist" in out["handoff"][0]["error"]
    assert len(saves) == 3
    shown = "\n".join(table(out, []))
    assert shown.count("failed: DatasetNotFoundError") == 2 and "not measured (DatasetNotFoundError" in shown
