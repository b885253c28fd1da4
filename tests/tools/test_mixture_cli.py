"""The command line on a mixture file, in real processes: inspect and diagnose show each member's routes and the
route of each mixture key; bench measures the mixture against its members; demo streams one; make-sample writes
members of different embodiments."""

from __future__ import annotations

import json
import re

import pytest

from tests.support.console import dali_stream

FRONT, WRIST, TOP = "observation.images.front", "observation.images.wrist", "observation.images.top"


@pytest.fixture(scope="module")
def mixture_file(embodiments, small_dataset, tmp_path_factory):
    """arm6 (h264 front, av1 wrist) and small (h264 front, vp9 top as its wrist), arm7 weighted 2 (top as front)."""
    path = tmp_path_factory.mktemp("mix") / "mix.json"
    path.write_text(json.dumps({"members": [
        {"source": str(embodiments["arm6"]), "name": "arm6"},
        {"source": str(embodiments["arm7"]), "name": "arm7", "weight": 2, "keys": {TOP: FRONT}},
        {"source": str(small_dataset), "name": "small", "keys": {TOP: WRIST}}]}))
    return path


def test_inspect_shows_members_keys_and_routes(mixture_file):
    proc = dali_stream("inspect", mixture_file, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert list(report["members"]) == ["arm6", "arm7", "small"] and report["members"]["arm7"]["weight"] == 2
    assert report["members"]["arm7"]["fps"] == 10 and report["members"]["arm7"]["cameras"][FRONT]["own_key"] == TOP
    assert report["members"]["small"]["cameras"][WRIST]["route_auto"] == "torchcodec"
    keys = report["keys"]
    assert keys[WRIST]["lacking"] == ["arm7"] and keys[WRIST]["route_auto"] == "torchcodec"
    assert "members ['arm7'] lack it" in keys[WRIST]["reason"], keys[WRIST]["reason"]
    assert keys["observation.state"]["padded"] and keys["observation.state"]["shape"] == [7]
    assert keys["observation.state"]["lengths"] == {"arm6": [6], "arm7": [7], "small": [6]}
    table = dali_stream("inspect", mixture_file)
    assert table.returncode == 0 and "a mixture of 3 datasets" in table.stdout and "arm7" in table.stdout


def test_diagnose_probes_every_member(mixture_file):
    proc = dali_stream("diagnose", mixture_file, "--json", "--decode-test")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    dataset = json.loads(proc.stdout)["dataset"]
    assert set(dataset["members"]) == {"arm6", "arm7", "small"}
    assert set(dataset["cameras"]) == {f"arm6/{FRONT}", f"arm6/{WRIST}", f"arm7/{TOP}", f"small/{FRONT}",
                                       f"small/{TOP}"}
    assert dataset["cameras"][f"arm7/{TOP}"]["mixture_key"] == FRONT
    # the decode test reads each member's painted ids, shifted by the member's own offset (arm7 paints from 100)
    assert dataset["cameras"][f"arm7/{TOP}"]["decode_test"]["torchcodec"]["ids_match"] is True
    assert dataset["mixture_routes"][WRIST]["route"] == "torchcodec"


def test_bench_measures_the_mixture_against_its_members(mixture_file, tmp_path):
    proc = dali_stream("bench", mixture_file, "--batch-size", 4, "--duration-s", 0.4, "--warmup-batches", 1,
                       "--out-dir", tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    (path,) = tmp_path.glob("bench-*.json")
    result = json.loads(path.read_text())
    rounds = result["mixture"]["rounds"]
    assert len(rounds) == 2 and rounds[0]["order"] == ["arm6", "arm7", "small", "mixture"]
    assert rounds[1]["order"] == ["mixture", "small", "arm7", "arm6"]
    for r in rounds:
        assert all(v > 0 for v in r["samples_per_s"].values())
        assert r["ratio"] == pytest.approx(r["samples_per_s"]["mixture"] / r["expected_samples_per_s"])
        assert sum(r["window_shares"].values()) == pytest.approx(1.0, abs=1e-3)  # rounded to 4 places
    assert result["config"]["mixture"]["members"][1]["weight"] == 2.0
    assert "mixture:" in proc.stdout
    assert result["gpu_load"] is None and result["nvdec_utilisation"] is None  # neither asked for nor on NVDEC


def test_bench_gpu_load_on_a_mixture_is_run_or_refused_not_ignored(mixture_file, tmp_path):
    """`--gpu-load` beside a mixture runs the matmul loop beside every window (a GPU node) or says what it needs, as
    for one dataset: never a run that silently leaves it out."""
    proc = dali_stream("bench", mixture_file, "--batch-size", 4, "--duration-s", 0.4, "--gpu-load",
                       "--out-dir", tmp_path, timeout=600)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "--gpu-load runs a matmul loop on the loader's CUDA device" in proc.stderr
    assert not list(tmp_path.glob("bench-*.json"))


def test_demo_streams_a_mixture_of_two_embodiments(tmp_path):
    proc = dali_stream("demo", tmp_path / "mix", "--mixture", "--batches", 12, "--batch-size", 8, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "show their sample's painted" in proc.stdout and "observation.images.wrist_is_missing" in proc.stdout
    said = " ".join(proc.stdout.split())  # what the two figures are, and how weight and share set them
    assert "weight 2)" in said and "part = frames x weight" in said and "share= gives it" in said
    assert re.search(r"arm7: [01]\.\d\d here, [01]\.\d\d an epoch", said), said
    mixture = json.loads((tmp_path / "mix/mixture.json").read_text())
    assert [m["name"] for m in mixture["members"]] == ["arm6", "arm7"]
    info = json.loads((tmp_path / "mix/arm7/meta/info.json").read_text())
    assert info["fps"] == 10 and info["features"]["observation.state"]["shape"] == [7]
    assert info["dali_stream_sample"]["id_offset"] == 1000


def test_verify_names_the_members_to_check_one_by_one(mixture_file, embodiments):
    proc = dali_stream("verify", mixture_file)
    assert proc.returncode == 2 and "run it per member" in proc.stderr and str(embodiments["arm7"]) in proc.stderr
