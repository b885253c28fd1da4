"""`dali-stream` as a user runs it: the installed console script, in a real subprocess."""

from __future__ import annotations

import json

import pytest

from tests.support.console import dali_stream


def _cli(*args, check=True):
    proc = dali_stream(*args, env={"COLUMNS": "120"})
    if check and proc.returncode != 0:
        raise AssertionError(f"dali-stream {args} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = tmp_path_factory.mktemp("cli") / "sample"
    proc = _cli("make-sample", out, "--episodes", 5, "--min-length", 6, "--max-length", 10, "--cameras",
                "cam:vp9,side:hevc", "--height", 64, "--width", 96, "--episodes-per-file", 2, "--gop", 5)
    assert "wrote LeRobot v3.0 dataset" in proc.stderr
    return out


def test_make_sample_and_inspect(written):
    report = json.loads(_cli("inspect", written, "--json").stdout)
    assert report["codebase_version"] == "v3.0" and report["episodes"] == 5
    cam = report["cameras"]["observation.images.cam"]
    assert {k: cam[k] for k in ("codec", "height", "width", "pix_fmt", "route_auto")} == {
        "codec": "vp9", "height": 64, "width": 96, "pix_fmt": "yuv420p", "route_auto": "torchcodec"}
    assert "torchcodec (FFmpeg's vp9 decoder: lerobot's frames" in cam["reason"], cam["reason"]
    assert report["cameras"]["observation.images.side"]["route_auto"] == "torchcodec"
    sizes = sum(c["height"] * c["width"] * 3 for c in report["cameras"].values())
    assert report["decoded_bytes"] == sizes * report["frames"] > 0  # what frame_cache_bytes would hold
    assert report["memory_available_bytes"] > report["decoded_bytes"]  # and what this node has for it
    stored = sum(p.stat().st_size for d in ("data", "videos") for p in (written / d).rglob("*") if p.is_file())
    assert report["disk_tier"] == {"nodes": 1, "stored_bytes": stored, "per_node_bytes": stored, "node_share": 1.0}
    two = json.loads(_cli("inspect", written, "--json", "--nodes", "2").stdout)["disk_tier"]
    assert 0.5 <= two["node_share"] < 0.8 and two["per_node_bytes"] == int(stored * two["node_share"])
    resized = json.loads(_cli("inspect", written, "--json", "--resize", "40", "48", "--crop", "30", "41").stdout)
    assert resized["decoded_bytes"] == len(report["cameras"]) * 30 * 41 * 3 * report["frames"]  # kept cropped
    derived = report["derived"]  # the loader's defaults as resolved on this dataset and node (loader.resolve)
    # the pool's open episodes decoded once each, every camera through torchcodec (VP9 too), no stream joined
    assert derived["episode_frames"]["value"] == 1 << 30 and not derived["dali_on_workers"]["value"]
    assert derived["join_streams"]["value"] == 0 and derived["join_streams"]["why"] == "no camera decodes in DALI"
    assert all(d["what"] for d in derived.values())  # each says what it is
    assert derived["prefetch_batches"]["value"] == 3 and derived["drop_last"]["value"] is True
    table = _cli("inspect", written).stdout
    assert "decoded, every frame of every camera takes" in table and "no camera decodes in DALI" in table
    assert "GiB of memory available now" in " ".join(table.split()), table
    assert "observation.images.side" in table and "hevc" in table
    state = next(line for line in table.splitlines() if "observation.state" in line)
    action = next(line for line in table.splitlines() if "│ action " in line)
    assert "float32" in state and "(6,)" in state and "(6,)" in action, table


def test_inspect_says_which_data_files_hold_one_row_group_for_many_episodes(written, tmp_path):
    import shutil

    import pyarrow.parquet as pq

    report = json.loads(_cli("inspect", written, "--json").stdout)
    assert report["data_layout"] == {"data_files": 3, "looked_at": 3, "one_group_files": 0, "decoded_bytes": 0}
    assert report["derived"]["table_cache_dir"]["value"].endswith("tables")
    copy = tmp_path / "one-group"
    shutil.copytree(written, copy)
    paths = sorted((copy / "data").glob("*/*.parquet"))
    for path in paths[:2]:  # the last file holds one episode: a group per episode already
        pq.write_table(pq.read_table(path), path)
    layout = json.loads(_cli("inspect", copy, "--json").stdout)["data_layout"]
    assert layout["one_group_files"] == 2 and layout["decoded_bytes"] == sum(
        pq.ParquetFile(p).metadata.row_group(0).total_byte_size for p in paths[:2])
    said = " ".join(_cli("inspect", copy).stdout.split())
    assert "2 of the 3 data files looked at (of 3) hold one parquet row group for many episodes" in said, said


def test_make_sample_refuses_to_overwrite(written):
    proc = _cli("make-sample", written, "--episodes", 2, check=False)
    assert proc.returncode == 2 and "--overwrite" in proc.stderr and "written with other settings (" in proc.stderr


def test_make_sample_again_with_the_same_settings_writes_nothing(written):
    """The README's quickstart after `make demo`: the sample is there already, and the command says so."""
    before = (written / "meta" / "info.json").stat().st_mtime_ns
    proc = _cli("make-sample", written, "--episodes", 5, "--min-length", 6, "--max-length", 10, "--cameras",
                "cam:vp9,side:hevc", "--height", 64, "--width", 96, "--episodes-per-file", 2, "--gop", 5)
    assert "already holds this sample" in proc.stderr
    assert (written / "meta" / "info.json").stat().st_mtime_ns == before


def test_bad_camera_spec_is_a_clear_error(tmp_path):
    proc = _cli("make-sample", tmp_path / "x", "--cameras", "front:mpeg2", check=False)
    assert proc.returncode == 2 and "'mpeg2' is not one of" in proc.stderr


def test_demo_streams_and_summarises(written):
    proc = _cli("demo", written, "--batches", 6, "--batch-size", 2, "--pool-size", 2, "--action-horizon", 3)
    out = proc.stdout
    assert "using the sample dataset already at" in out
    for words in ("samples/s", "first-batch latency", "observation.images.cam", "vp9 -> torchcodec",
                  "hevc -> torchcodec", "6 x 2 on cpu", "none usable here"):
        assert words in out, (words, out)


def test_the_demo_on_a_gpu_node_says_why_its_cameras_run_on_the_cpu_and_how_to_see_nvdec(written):
    """On an H100 (simulated node, real routing rules) the demo's 128x96 sample never reaches NVDEC; the
    demo must say so, per camera, and give the command that shows NVDEC."""
    from dali_stream.decode.node import Node, NodeFacts
    from dali_stream.decode.proven import rule
    from dali_stream.decode.route import NVDEC
    from dali_stream.decode.routes import choose_routes, formats_of
    from dali_stream.meta.dataset import DatasetMeta
    from dali_stream.tools.cli_demo import demo_gpu_note

    h100 = Node.from_facts(NodeFacts(1, 1, "2.13.0+cu130", "13.0", "NVIDIA H100 80GB HBM3", (9, 0)))
    formats = formats_of(DatasetMeta.open(str(written)))
    choices = choose_routes(formats, "auto", h100, unproven=rule(formats, True, "2.4.0", ()))
    note = demo_gpu_note(h100, {k: c.route for k, c in choices.items()}, {k: c.reason for k, c in choices.items()})
    assert "NVIDIA H100 80GB HBM3 is usable, but every camera of this sample decodes on the CPU" in note
    assert "below NVDEC's minimum" in note and "--decode gpu" in note and "--height 480 --width 640" in note
    nvdec = demo_gpu_note(h100, {"observation.images.front": NVDEC}, {})
    assert nvdec == "NVIDIA H100 80GB HBM3: NVDEC decodes observation.images.front"


def test_demo_writes_the_sample_when_absent(tmp_path):
    out = tmp_path / "fresh"
    proc = _cli("demo", out, "--batches", 2, "--batch-size", 2, "--episodes", 3, "--min-length", 5,
                "--max-length", 6, "--cameras", "top:vp9", "--height", 64, "--width", 64)
    assert (out / "meta/info.json").exists() and "2 x 2 on cpu" in proc.stdout


def test_missing_dataset_is_a_clear_error(tmp_path):
    proc = _cli("inspect", tmp_path / "nowhere", check=False)
    assert proc.returncode == 2 and "DatasetNotFoundError" in proc.stderr and "nowhere" in proc.stderr


def test_version_and_python_dash_m():
    import subprocess
    import sys

    from dali_stream import __version__

    assert _cli("--version").stdout.strip() == f"dali-stream {__version__}"
    out = subprocess.run([sys.executable, "-m", "dali_stream", "--version"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == f"dali-stream {__version__}"


def test_make_sample_with_encoder_processes_through_python_dash_m(tmp_path):
    """`python -m dali_stream make-sample --workers 2`: the spawned encoders import dali_stream.__main__ without
    running the command again, and the dataset is the one a single process writes (as
    `test_sample_data.test_encoder_processes_write_the_same_dataset` compares them)."""
    import subprocess
    import sys

    args = ["make-sample", "--episodes", "4", "--min-length", "6", "--max-length", "9", "--cameras", "a:h264,b:vp9",
            "--height", "64", "--width", "96", "--episodes-per-file", "2", "--gop", "5"]
    for name, workers in (("one", "1"), ("two", "2")):
        proc = subprocess.run([sys.executable, "-m", "dali_stream", *args[:1], str(tmp_path / name), *args[1:],
                               "--workers", workers], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        assert proc.stderr.count("wrote LeRobot v3.0 dataset") == 1, proc.stderr
    from tests.tools.test_sample_data import _files

    assert _files(tmp_path / "one") == _files(tmp_path / "two")


def test_make_sample_refuses_zero_workers(tmp_path):
    proc = _cli("make-sample", tmp_path / "s", "--workers", 0, check=False)
    assert proc.returncode != 0 and "must be at least 1. Found: 0" in proc.stderr
    assert not (tmp_path / "s").exists()


def test_demo_over_a_folder_that_is_not_a_dataset(tmp_path):
    """An interrupted older demo (or any folder without meta/info.json): refused with the way out, and --overwrite
    replaces it with the sample."""
    out = tmp_path / "half"
    (out / "videos").mkdir(parents=True)
    args = ("demo", out, "--batches", 2, "--batch-size", 2, "--episodes", 3, "--min-length", 5, "--max-length", 6,
            "--cameras", "top:vp9", "--height", 64, "--width", 64)
    refused = _cli(*args, check=False)
    assert refused.returncode == 2 and "is not a dataset" in refused.stdout and "--overwrite" in refused.stdout
    proc = _cli(*args, "--overwrite")
    assert (out / "meta/info.json").exists() and "2 x 2 on cpu" in proc.stdout
    again = _cli(*args[:-6], "--cameras", "top:vp9,front:h264", "--height", 64, "--width", 64)
    assert "using the sample dataset already at" in again.stdout
    assert "other sample settings (cameras)" in again.stdout and "--overwrite" in again.stdout


@pytest.mark.parametrize("columns", [80, 130])
def test_inspect_and_diagnose_print_camera_keys_whole(written, columns):
    """Camera keys are never cut to `observation.ima…`: the other columns fold instead."""
    for command in ("inspect", "diagnose"):
        out = dali_stream(command, written, env={"COLUMNS": str(columns)}).stdout
        assert "observation.images.side" in out and "observation.images.cam" in out, (command, out)
        assert "observation.ima…" not in out and "…" not in out, (command, out)  # nothing cut, details fold


def test_diagnose_at_80_columns_keeps_every_header_whole_and_prints_extras_literally(written):
    """A table too wide for the terminal is printed a camera at a time, so no header is folded letter by letter;
    `pip install '.[nvdec]'` keeps its brackets (no rich markup)."""
    out = dali_stream("diagnose", written, env={"COLUMNS": "80"}).stdout
    flat = " ".join(out.split())
    for field in ("codec vp9", "pix_fmt yuv420p", "route (auto) torchcodec", "decodable yes"):
        assert field in flat, (field, out)
    assert "pipinstall'.[nvdec]'" in out.replace("\n", "").replace("│", "").replace(" ", ""), out
