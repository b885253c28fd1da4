"""The rule a GPU visit's results are read by for `decode/proven.py`'s OPEN_PROVEN (`benchmarks/gpu_decide.py`): on
the committed H200 visit, and on that visit's tier 1 beside tier-2 results as the next visit's tier 2 writes them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from benchmarks.gpu_decide import decide
from dali_stream.decode.proven import OpenProven, open_stream_unproven

REPO = Path(__file__).resolve().parents[2]
H200 = REPO / "benchmarks/results/NVIDIA-H200/2026-11-29"


def test_the_h200_visit_earned_nothing_and_says_why():
    """Its boundary matrix stopped at its time limit, and its bench results did not come back (a call returns at
    most 8 files): nothing is proven, for both reasons."""
    got = decide(H200)
    assert got["gpu"] == "NVIDIA H200" and got["entries"] == []
    for codec in ("h264", "hevc"):
        said = " ".join(got["withheld"][codec])
        assert "boundary matrix did not pass (status timeout)" in said and "did not measure the loader" in said


def test_the_second_h200_visit_earned_nothing_and_names_the_check_that_failed():
    """Every frame check passed there, the loader beat the CPU route at 640x480 and 256x256, but one test of the
    boundary step failed (batches waited behind the default stream's kernels) and HEVC's ratio is missing: the rule
    withholds both codecs and names that test."""
    got = decide(H200.parent / "2026-11-29-2")
    assert got["gpu"] == "NVIDIA H200" and got["entries"] == []
    assert "failed test_the_open_engine_does_not_wait_behind_the_training_stream" in got["withheld"]["h264"][0]
    assert "did not measure the loader" in " ".join(got["withheld"]["hevc"])


def _bench(codec: str, height: int, width: int, ratio: float, route: str = "nvdec-open",
           against: str = "torchcodec") -> dict:
    keys = ("observation.images.front", "observation.images.wrist")
    return {"gpu_over_cpu_all_cores": ratio, "image_shape": {k: [3, height, width] for k in keys},
            "codecs": dict.fromkeys(keys, codec), "routes": dict.fromkeys(keys, route),
            "cpu_all_cores": {"routes": dict.fromkeys(keys, against)}}


def _visit(tmp_path: Path, boundaries: int | str, *results: dict, wrong: int = 0) -> Path:
    folder = tmp_path / "NVIDIA-H200" / "2026-12-01"
    (folder / "gpu-second").mkdir(parents=True)
    shutil.copytree(H200 / "gpu-first", folder / "gpu-first")
    if wrong:
        first = json.loads((folder / "gpu-first/gpu_first.json").read_text())
        first["runs"][-1]["wrong_frames"] = wrong  # the last run: h264-256
        (folder / "gpu-first/gpu_first.json").write_text(json.dumps(first))
    steps = {f"bench_{i}": {"status": 0, "results": [r]} for i, r in enumerate(results)}
    steps["boundaries"] = {"status": boundaries}
    (folder / "gpu-second/gpu_second.json").write_text(json.dumps({"steps": steps}))
    return folder


def test_a_codec_is_proven_from_the_smallest_size_the_loader_beat_the_cpu_route_at(tmp_path):
    folder = _visit(tmp_path, 0, _bench("h264", 480, 640, 1.11), _bench("h264", 256, 256, 0.95),
                    _bench("hevc", 480, 640, 1.3, against="cpu-open"))
    got = decide(folder)
    assert [(c, p) for c, p, _ in got["entries"]] == [("h264", 640 * 480), ("hevc", 640 * 480)]
    assert "1.11x torchcodec at 307,200 pixels" in got["entries"][0][2]
    assert "0.95x torchcodec at 65,536 pixels" in got["entries"][0][2]
    assert "1.30x cpu-open at 307,200 pixels" in got["entries"][1][2]  # the route each ratio was measured against
    # what it prints is the entry itself: 640x480 H.264 on the open engine, 256x256 kept on the CPU route
    proc = subprocess.run([sys.executable, "benchmarks/gpu_decide.py", str(folder)], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = [line.strip().rstrip(",") for line in proc.stdout.splitlines() if line.strip().startswith("OpenProven(")]
    entries = tuple(eval(line, {"OpenProven": OpenProven}) for line in lines)  # noqa: S307 - our own output
    assert open_stream_unproven("NVIDIA H200", "h264", 640 * 480, entries) is None
    assert "measured slower" in open_stream_unproven("NVIDIA H200", "h264", 256 * 256, entries)
    assert open_stream_unproven("NVIDIA H200", "hevc", 1920 * 1080, entries) is None


def test_nothing_is_proven_past_a_failed_check_or_a_slower_largest_size(tmp_path):
    failed = decide(_visit(tmp_path / "a", 1, _bench("h264", 480, 640, 1.5)))
    assert failed["entries"] == [] and "did not pass (status 1)" in failed["withheld"]["h264"][0]
    wrong = decide(_visit(tmp_path / "b", 0, _bench("h264", 480, 640, 1.5), wrong=3))
    assert wrong["entries"] == [] and "tier 1 read 3 wrong frames" in wrong["withheld"]["h264"]
    slower = decide(_visit(tmp_path / "c", 0, _bench("h264", 256, 256, 1.2), _bench("h264", 480, 640, 0.9)))
    assert slower["entries"] == [] and "not faster than the CPU route at its largest size" in \
        slower["withheld"]["h264"][-1]
    elsewhere = decide(_visit(tmp_path / "d", 0, _bench("h264", 480, 640, 1.5, route="torchcodec")))
    assert elsewhere["entries"] == []  # cameras that did not decode on the open engine measure nothing of it
