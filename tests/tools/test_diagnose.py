"""`dali-stream diagnose` in a real subprocess: verdicts, failure layers, exit codes, JSON, merge."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dali_stream.meta.dataset import DatasetMeta
from tests.support.console import dali_stream
from tests.support.damage import scramble_keyframes

REPO = Path(__file__).resolve().parents[2]
FRONT, WRIST, TOP = "observation.images.front", "observation.images.wrist", "observation.images.top"


def _diagnose(*args, env_extra=None):
    return dali_stream("diagnose", *args, env=env_extra)


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    """The default camera set (h264, av1, vp9), small."""
    from dali_stream.tools.sample_data import SampleSpec, write_sample

    return write_sample(tmp_path_factory.mktemp("diag") / "sample",
                        SampleSpec(episodes=4, min_length=20, max_length=30, gop=10, episodes_per_file=2))


@pytest.fixture()
def copy(sample, tmp_path):
    dst = tmp_path / "copy"
    shutil.copytree(sample, dst)
    return dst


def _first_file(root, key):
    return root / DatasetMeta.open(str(root)).video_file(0, key)


def test_sample_verdicts_match_this_machine(sample):
    proc = _diagnose(sample, "--json", "--decode-test")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert {"node", "software", "dataset", "exit_code", "verdict", "seconds"} <= set(report)
    assert report["node"]["cpu_cores"] >= 1 and report["node"]["gpus"] == []
    assert report["gpu"] == {"present": 0, "usable": 0, "layer": None, "problem": None}
    sw = report["software"]
    assert all(sw[p]["ok"] for p in ("torch", "nvidia.dali", "torchcodec", "av", "pyarrow"))
    assert sw["nvidia.dali"]["gpu_operators"] is False and "h264" in sw["system_ffmpeg"]["decoders"]
    cams = report["dataset"]["cameras"]
    assert {k: c["route"] for k, c in cams.items()} == {FRONT: "torchcodec", WRIST: "torchcodec", TOP: "torchcodec"}
    assert cams[FRONT]["b_frames"] is True and cams[TOP]["b_frames"] is False
    assert all(c["gop"] == 10 and c["decodable"] and (c["width"], c["height"]) == (128, 96) for c in cams.values())
    assert "DALI's CPU decoder, decode='dali-cpu', is slower" in cams[TOP]["reason"], cams[TOP]["reason"]
    for key, cam in cams.items():
        tests = cam["decode_test"]
        assert tests["torchcodec"]["ok"] and tests["torchcodec"]["ids_match"], key
        assert tests["nvdec"]["ok"] is None and tests["nvdec"]["layer"] == "dali-no-cuda"
    assert cams[TOP]["decode_test"]["dali-cpu"]["ids_match"] is True
    assert cams[FRONT]["decode_test"]["dali-cpu"]["layer"] == "codec-unsupported"
    assert report["verdict"].startswith("OK on ")


def test_human_output_has_tables_and_verdict(sample):
    proc = _diagnose(sample)
    assert proc.returncode == 0
    for words in ("software", "torchcodec", "route (auto)", "dali-cpu", "OK on", "CPU cores"):
        assert words in proc.stdout, words


def test_node_only(tmp_path):
    proc = _diagnose("--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 0 and "dataset" not in report and report["verdict"].endswith("install OK")


def test_corrupt_frames_are_a_bitstream_failure(copy):
    scramble_keyframes(_first_file(copy, TOP))
    proc = _diagnose(copy, "--json", "--decode-test")
    report = json.loads(proc.stdout)
    cam = report["dataset"]["cameras"][TOP]
    assert proc.returncode == 1 and cam["decodable"] is False and cam["layer"] == "bitstream"
    assert "re-download" in cam["fix"] and TOP in report["verdict"]
    assert report["dataset"]["cameras"][FRONT]["decodable"] is True


def test_git_lfs_pointer_is_a_placeholder(copy):
    path = _first_file(copy, FRONT)
    path.write_text("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 123456\n")
    proc = _diagnose(copy, "--json")
    cam = json.loads(proc.stdout)["dataset"]["cameras"][FRONT]
    assert proc.returncode == 1 and cam["layer"] == "placeholder"
    assert "first bytes b'version https://git-lfs" in cam["error"] and "git lfs pull" in cam["fix"]
    human = _diagnose(copy)
    assert human.returncode == 1 and "placeholder" in human.stdout and "git lfs pull" in human.stdout


@pytest.mark.parametrize("data, layer, words", [(b"", "empty", "is empty (0 bytes)"),
                                                 (bytes(range(256)) * 8, "not-mp4", r"is not an MP4: first bytes b'\x00")])
def test_an_empty_or_foreign_file_is_no_git_lfs_pointer(copy, data, layer, words):
    """0 bytes, or bytes of no MP4 nor Git LFS pointer: their own finding with the re-download fix, not `git lfs
    pull` (which cannot mend a file Git LFS does not manage)."""
    path = _first_file(copy, FRONT)
    path.write_bytes(data)
    proc = _diagnose(copy, "--json")
    cam = json.loads(proc.stdout)["dataset"]["cameras"][FRONT]
    assert proc.returncode == 1 and cam["layer"] == layer and words in cam["error"], cam
    assert "re-download" in cam["fix"] and "lfs" not in cam["fix"].lower(), cam["fix"]


def test_missing_video_file(copy):
    _first_file(copy, WRIST).unlink()
    cam = json.loads(_diagnose(copy, "--json").stdout)["dataset"]["cameras"][WRIST]
    assert cam["layer"] == "missing" and "does not exist" in cam["error"]


def test_broken_torchcodec_is_a_broken_install(sample, tmp_path):
    """A torchcodec whose FFmpeg libraries do not load (shadowed by a package that fails like it)."""
    shadow = tmp_path / "shadow" / "torchcodec"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(
        "raise OSError('libavutil.so.58: cannot open shared object file: No such file or directory')\n")
    env = {"PYTHONPATH": str(tmp_path / "shadow")}
    proc = _diagnose(sample, "--json", env_extra=env)
    report = json.loads(proc.stdout)
    assert proc.returncode == 2
    assert report["software"]["torchcodec"]["ok"] is False and "libavutil" in report["software"]["torchcodec"]["error"]
    # every camera's route is torchcodec (`auto` decodes VP9 with it too)
    assert {k: c["layer"] for k, c in report["dataset"]["cameras"].items()} == {
        k: "torchcodec-load" for k in report["dataset"]["cameras"]}
    assert report["verdict"].startswith("BROKEN INSTALL") and "torchcodec" in report["verdict"]
    human = _diagnose(sample, env_extra=env)
    assert human.returncode == 2 and "FAILED" in human.stdout and "apt-get install -y ffmpeg" in human.stdout


def test_unreadable_dataset(tmp_path):
    proc = _diagnose(tmp_path / "absent", "--json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and report["dataset"]["layer"] == "metadata"
    assert "DatasetNotFoundError" in report["dataset"]["error"]


def test_merge_nodes(sample, copy, tmp_path):
    _first_file(copy, TOP).unlink()
    reports = tmp_path / "reports"
    reports.mkdir()
    (reports / "node-a.json").write_text(_diagnose(sample, "--json").stdout)
    (reports / "node-b.json").write_text(_diagnose(copy, "--json").stdout)
    proc = _diagnose("--merge", reports, "--json")
    merged = json.loads(proc.stdout)
    assert proc.returncode == 1 and set(merged["nodes"]) == {"node-a", "node-b"}
    assert merged["nodes"]["node-a"]["cameras"][TOP] == "torchcodec"
    assert merged["nodes"]["node-b"]["cameras"][TOP] == "NO (missing)"
    assert "node-b" in _diagnose("--merge", reports).stdout


def test_sbatch_script_writes_one_report_per_node_and_merges(sample, tmp_path):
    """The launcher's wiring, with `srun` standing in as a one-node runner (a real SLURM: tests/tools/test_slurm.py)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "srun").write_text('#!/bin/bash\nwhile [[ "$1" == --* ]]; do shift; done\nexec "$@"\n')
    (bindir / "srun").chmod(0o755)
    out = tmp_path / "out"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "DIAGNOSE_OUT": str(out),
           "DALI_STREAM_PYTHON": sys.executable, "COLUMNS": "200"}
    proc = subprocess.run(["bash", str(REPO / "slurm/diagnose_nodes.sbatch"), str(sample)], capture_output=True,
                          text=True, timeout=300, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (report,) = out.glob("*.json")
    assert json.loads(report.read_text())["exit_code"] == 0
    assert "nodes x cameras" in proc.stdout


def test_damaged_container(copy):
    path = _first_file(copy, WRIST)
    data = path.read_bytes()
    path.write_bytes(data[:16] + bytes(200))  # an MP4 signature, then nothing readable
    cam = json.loads(_diagnose(copy, "--json").stdout)["dataset"]["cameras"][WRIST]
    assert cam["layer"] == "container" and "not a readable MP4" in cam["error"] and "re-download" in cam["fix"]


def test_cli_and_diagnose_import_only_the_standard_library():
    code = ("import sys, dali_stream.tools.cli, dali_stream.tools.diagnose; "
            "heavy = [m for m in ('torch', 'numpy', 'nvidia.dali', 'av', 'pyarrow', 'rich', 'torchcodec') "
            "if m in sys.modules]; print(heavy); sys.exit(1 if heavy else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _software(dali_devices, torch_devices, cuda_build="13.0"):
    return {"nvidia.dali": {"ok": True, "cuda_devices": dali_devices},
            "torch": {"ok": True, "version": "2.13.0", "cuda_build": cuda_build, "cuda_devices": torch_devices}}


@pytest.mark.parametrize("software,nvcuvid,name,layer", [
    (_software(8, 0, None), "loads", "NVIDIA H100 80GB HBM3", "torch-no-cuda"),
    (_software(0, 8), "loads", "NVIDIA H100 80GB HBM3", "dali-no-cuda"),
    (_software(8, 8), "libnvcuvid.so.1: cannot open shared object file", "NVIDIA H100 80GB HBM3", "nvdec-unavailable"),
    (_software(1, 1), "loads", "NVIDIA A100-SXM4-40GB MIG 1g.5gb", "nvdec-unavailable"),
    (_software(8, 8), "loads", "NVIDIA H100 80GB HBM3", None),
])
def test_gpu_layer_from_simulated_probes(software, nvcuvid, name, layer, monkeypatch):
    """The same rules as the loader's routing, on probe results of nodes this machine is not."""
    from dali_stream.tools.diagnose import gpu_verdict, routing_node

    monkeypatch.delenv("DALI_STREAM_CPU_ONLY")
    node_report = {"gpus": [{"name": name, "compute_capability": [8 if "A100" in name else 9, 0]}],
                   "nvcuvid": nvcuvid}
    node = routing_node(node_report, software)
    verdict = gpu_verdict(node_report, node)
    assert verdict["layer"] == layer and verdict["present"] == 1
    if layer is None:
        assert verdict["usable"] == 8 and "fix" not in verdict
    else:
        assert verdict["problem"] and verdict["fix"]


def test_diagnose_says_whether_the_open_decoder_engine_is_installed():
    """PyNvVideoCodec (nvdec_engine='open') by its installed version, read without importing it (it imports only
    where the NVIDIA driver is): None on CI, which never installs the [nvdec] extra."""
    import importlib.metadata as md

    from dali_stream.tools.diagnose import probe_software

    found = probe_software()["distributions"]
    try:
        want = md.version("pynvvideocodec")
    except md.PackageNotFoundError:
        want = None
    assert found["ok"] and found["pynvvideocodec"] == want and found["torchcodec"] == md.version("torchcodec")


def test_diagnose_says_why_pynvvideocodec_does_not_import(tmp_path, monkeypatch):
    """Installed but not importable (here: a stand-in distribution whose import opens the driver's NVENC library,
    as PyNvVideoCodec's does, on a machine without it): the software probe fails with the reason and the fix,
    tried in a child process; not installed is no failure."""
    import importlib

    from dali_stream.tools.diagnose import probe_software

    assert probe_software()["PyNvVideoCodec"] == {"ok": True, "version": None, "imports": None, "note": (
        "not installed (optional: nvdec_engine='open'; pip install '.[nvdec]' in the dali_stream checkout)")}
    info = tmp_path / "pynvvideocodec-2.2.4.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: pynvvideocodec\nVersion: 2.2.4\n")
    (tmp_path / "PyNvVideoCodec").mkdir()
    (tmp_path / "PyNvVideoCodec" / "__init__.py").write_text("import ctypes\nctypes.CDLL('libnvidia-encode.so.1')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    importlib.invalidate_caches()
    found = probe_software()["PyNvVideoCodec"]
    assert not found["ok"], found
    assert "PyNvVideoCodec 2.2.4 is installed but does not import" in found["error"]
    assert "libnvidia-encode.so.1" in found["error"] and "NVIDIA_DRIVER_CAPABILITIES" in found["error"]


def _installed(site: Path, name: str, requires: list[str]) -> None:
    """A real installed distribution's metadata (a .dist-info folder), as pip leaves it."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: " + name + "\nVersion: 1.0\n"
                                   + "".join(f"Requires-Dist: {r}\n" for r in requires))


def test_a_package_whose_requirement_the_install_moved_past_is_named_with_the_fix(tmp_path):
    """What lerobot's environment showed: `[remote]` moved fsspec past `datasets`' cap, and s3fs asks for the fsspec
    of its own release. Here a package capping fsspec below the installed one, a package asking for exactly the
    installed one (it must move too), and requirements that hold or do not apply (satisfied, an extra's, another
    platform's): one conflict, with the command that puts it back."""
    import importlib.metadata as md

    from dali_stream.tools.dependents import conflicts, describe

    fsspec = md.version("fsspec")
    cap = f"fsspec[http]<{fsspec},>=1.0"
    site = tmp_path / "site"
    _installed(site, "caps-fsspec", [cap, "numpy>=1", 'pyarrow<1; extra == "old"', 'av<1; sys_platform == "win32"'])
    _installed(site, "follows-fsspec", [f"fsspec<{fsspec}.1,>={fsspec}"])
    _installed(site, "lets-fsspec-go-back", ["fsspec>=1.0"])
    _installed(site, "unrelated", ["some-package-the-loader-does-not-use<0.1"])
    found = conflicts(path=[str(site), *sys.path])
    assert [{k: v for k, v in c.items() if k != "follow"} for c in found] == [
        {"package": "caps-fsspec", "version": "1.0", "requires": cap, "installed": f"fsspec {fsspec}"}]
    # this environment's own s3fs asks for its release's fsspec too; fsspec's other dependents do not move
    assert "follows-fsspec" in found[0]["follow"] and set(found[0]["follow"]) <= {"follows-fsspec", "s3fs"}
    problem, fix = describe(found)
    assert problem == f"caps-fsspec 1.0 requires {cap}, fsspec {fsspec} is installed"
    assert fix.startswith(f"pip install '{cap}' follows-fsspec") and ", then `pip check`" in fix
    assert conflicts() == []  # this environment as the suite installed it

    proc = _diagnose("--json", env_extra={"PYTHONPATH": str(site)})
    report = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the loader's own install is fine: a warning
    assert report["install"]["conflicts"]["found"] == found
    assert report["verdict"].endswith(f"install OK; WARNING: {problem}; fix: {fix}")


def test_info_json_that_contradicts_the_files_is_named(copy):
    """meta/info.json naming another codec, fps or size than a camera's file holds: the camera is not decodable as
    described, each disagreement named beside the file with the fix (the codec was once taken from info.json and an
    H.264 camera told to transcode as MPEG-2; a wrong fps reported OK)."""
    info_path = copy / "meta" / "info.json"
    info = json.loads(info_path.read_text())
    info["features"][FRONT]["info"]["video.codec"] = "mpeg2video"
    info["features"][WRIST]["shape"] = [480, 640, 3]
    info["features"][WRIST]["info"].update({"video.height": 480, "video.width": 640})
    info["fps"] = 25
    for key in info["features"]:
        if "video.fps" in info["features"][key].get("info", {}):
            info["features"][key]["info"]["video.fps"] = 25
    info_path.write_text(json.dumps(info))
    proc = _diagnose(copy, "--json")
    cameras = json.loads(proc.stdout)["dataset"]["cameras"]
    front, wrist = cameras[FRONT], cameras[WRIST]
    assert proc.returncode == 1
    assert front["layer"] == "disagrees" and "info.json says codec 'mpeg2video', the file holds 'h264'" in front["error"]
    assert "info.json says fps 25, the file runs at 30" in front["error"] and "video.codec" in front["fix"]
    assert wrist["layer"] == "disagrees" and "info.json says 480x640, the file is 96x128" in wrist["error"]


def test_what_the_loader_accepts_is_no_disagreement():
    """A codec info.json does not name ("unknown"), and a video at a whole multiple of the dataset's fps (a 30 fps
    recording of a 10 fps dataset: every frame asked for is there), are what the loader reads: diagnose agrees."""
    from dali_stream.decode.node import StreamFormat
    from dali_stream.tools.diagnose_dataset import disagreements

    facts = {"decoder": "h264", "fps": 30.0, "width": 128, "height": 96}
    assert disagreements(facts, StreamFormat("unknown", 128, 96), 10.0) == []
    assert disagreements(facts, StreamFormat("h264", 128, 96), 29.97) == []
    assert disagreements(facts, StreamFormat("av1", 128, 96), 25.0) == [
        "info.json says codec 'av1', the file holds 'h264'", "info.json says fps 25, the file runs at 30"]
