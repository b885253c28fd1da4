"""`dali-stream verify` in a real process: damaged files named with their episodes, against a mirror folder, the
Hub emulator's published hashes (LFS SHA-256, git blob SHA-1), and by decoding every frame."""

from __future__ import annotations

import json
import shutil

import pytest

from dali_stream.meta.dataset import DatasetMeta
from tests.support.console import dali_stream
from tests.support.damage import scribble_frames
from tests.support.hubserver import Hub

TOKEN = "hf_TESTtoken0123456789"
FRONT, TOP = "observation.images.front", "observation.images.top"


@pytest.fixture()
def damaged(small_dataset, tmp_path):
    """A copy with frame data scribbled in one H.264 and one VP9 file, and meta/info.json edited."""
    dst = tmp_path / "copy"
    shutil.copytree(small_dataset, dst)
    meta = DatasetMeta.open(str(dst))
    files = {key: meta.video_file(0, key) for key in (FRONT, TOP)}
    for path in files.values():
        scribble_frames(dst / path)
    holders = {key: sorted(meta.episode_index(p) for p in range(meta.num_episodes)
                           if meta.video_file(p, key) == files[key]) for key in files}
    rel = {key: str((dst / files[key]).relative_to(dst)) for key in files}
    return dst, rel, holders


def _verify(*args, env=None):
    return dali_stream("verify", *args, "--json", env=env)


def _by_file(report):
    return {f["file"]: f for f in report["damaged"]}


def test_against_a_mirror_names_the_damaged_files_and_their_episodes(damaged, small_dataset):
    root, rel, holders = damaged
    proc = _verify(root, "--against", small_dataset)
    assert proc.returncode == 1, proc.stderr
    found = _by_file(json.loads(proc.stdout))
    assert set(found) == set(rel.values())
    for key, path in rel.items():
        assert found[path]["episodes"] == holders[key] and "sha256" in found[path]["problems"][0]
    human = dali_stream("verify", root, "--against", small_dataset)
    assert human.returncode == 1 and "damaged file" in human.stdout and rel[TOP] in human.stdout


def test_against_the_hubs_published_hashes(damaged, small_dataset):
    root, rel, _ = damaged
    info = root / "meta/info.json"
    info.write_text(info.read_text().replace('"v3.0"', '"v3.1"', 1))  # same size, a non-LFS file: git SHA-1
    with Hub(TOKEN) as hub:
        hub.add_dataset("lab/arm", {"main": small_dataset})
        env = {"HF_ENDPOINT": hub.endpoint, "HF_TOKEN": TOKEN}
        proc = _verify(root, "--against", "hf://datasets/lab/arm", env=env)
        assert proc.returncode == 1, proc.stderr
        found = _by_file(json.loads(proc.stdout))
        assert set(found) == {*rel.values(), "meta/info.json"}
        assert "sha256" in found[rel[FRONT]]["problems"][0] and "git-sha1" in found["meta/info.json"]["problems"][0]
        assert found["meta/info.json"]["episodes"] == []
        # The Hub's own files against its published hashes: all match.
        clean = _verify("hf://datasets/lab/arm", env=env)
        assert clean.returncode == 0, clean.stdout + clean.stderr
        assert json.loads(clean.stdout)["files_compared"] > 10
    assert hub.unknown == []


def test_decoding_every_frame_finds_what_codecs_conceal(damaged, small_dataset):
    root, rel, holders = damaged
    proc = _verify(root, "--decode")
    assert proc.returncode == 1, proc.stderr
    found = _by_file(json.loads(proc.stdout))
    assert set(found) == set(rel.values())
    problem = found[rel[TOP]]["problems"][0]  # VP9 has no checksum: the painted ids and frame count tell
    assert problem.startswith("decode:") and ("show other painted ids" in problem or "frames decode" in problem)
    assert found[rel[TOP]]["episodes"] == holders[TOP]
    assert _verify(small_dataset, "--decode").returncode == 0


def test_nothing_to_compare_with_decodes(small_dataset):
    """No published hashes and no --against: verify decodes (what needs no reference) instead of stopping."""
    proc = dali_stream("verify", small_dataset)
    assert proc.returncode == 0, proc.stderr
    assert "every frame decoded, no published hashes to compare with" in " ".join(proc.stdout.split())


def test_files_with_one_row_group_for_many_episodes_verify_without_the_loaders_warning(small_dataset, tmp_path):
    """verify reads episodes in file order (each group decoded once whatever the layout): the loader's warning about
    such files, which lerobot's dataset tools write, would only be noise there."""
    import pyarrow.parquet as pq

    copy = tmp_path / "one-group"
    shutil.copytree(small_dataset, copy)
    for path in (copy / "data").glob("*/*.parquet"):
        pq.write_table(pq.read_table(path), path)
    proc = dali_stream("verify", copy)
    assert proc.returncode == 0, proc.stderr
    assert "every frame decoded" in " ".join(proc.stdout.split())
    assert "many episodes' worth" not in proc.stderr, proc.stderr


def test_decoding_every_frame_goes_in_chunks_and_still_finds_a_misread(damaged, small_dataset, monkeypatch):
    """`verify --decode` decodes an episode a chunk at a time (an hour-long 480p episode whole would need ~100 GB):
    with chunks of 3 frames, the clean sample stays clean and the damaged one is still found."""
    from dali_stream.meta.dataset import DatasetMeta
    from dali_stream.tools import verify

    monkeypatch.setattr(verify, "VERIFY_CHUNK", 3)
    assert verify.episode_problems(DatasetMeta.open(str(small_dataset)), 1e-4) == {}
    root, rel, _ = damaged
    found = verify.episode_problems(DatasetMeta.open(str(root)), 1e-4)
    assert set(found) == set(rel.values()), found  # both scribbled files, whichever way their damage shows
    assert all(problem.startswith("loader: ") for problems in found.values() for problem in problems)


def test_a_wrong_fps_is_the_datasets_problem_not_the_videos(small_dataset, tmp_path):
    """info.json's fps 25 on a 30 fps recording: the loader refuses at the first video it opens, naming both rates
    and the fix (its windows would be 1/30 s apart with no padding flags), and `verify` reports the dataset's fps,
    not every video as damaged ("... frames show other painted ids")."""
    from dali_stream import StreamLoader
    from dali_stream.errors import DatasetError

    root = tmp_path / "fps"
    shutil.copytree(small_dataset, root)
    info = json.loads((root / "meta/info.json").read_text())
    assert info["fps"] == 30
    info["fps"] = 25
    (root / "meta/info.json").write_text(json.dumps(info))
    with pytest.raises(DatasetError, match=r"info.json says fps 25, but video file .*\.mp4 shows 30 frames a second"
                                           r".*Correct `fps` in meta/info.json .* to 30"):
        with StreamLoader(str(root), batch_size=4, device="cpu", delta_timestamps={"action": [0, 1 / 25]}) as loader:
            next(iter(loader))
    ran = _verify(str(root))
    report = json.loads(ran.stdout)
    assert ran.returncode == 1 and report["damaged"] == [], report["damaged"]
    assert [p.split(":")[0] for p in report["dataset_problems"]] == [f"camera {FRONT!r}", f"camera {TOP!r}"]
    assert all("says fps 25" in p for p in report["dataset_problems"])
    text = dali_stream("verify", str(root))
    assert "the dataset, not a file: camera" in text.stdout and "no damaged file" in text.stdout, text.stdout


def test_the_frame_rate_check_takes_rounded_times_and_whole_multiples():
    """A video's rate is its mean decode step: 30 fps in milliseconds (steps of 33 and 34 ms, whose median says
    30.3) and 60 fps in milliseconds pass at 30 and 60 fps; a 30 fps video of a 10 fps dataset holds every frame
    asked for and passes; 30 fps against info.json's 25 does not."""
    import numpy as np

    from dali_stream.errors import DatasetError
    from dali_stream.fetch.indexes import check_rate
    from dali_stream.fetch.mp4index import Mp4Index

    def index(fps: float, timescale: int, n: int = 300) -> Mp4Index:
        dts = np.round(np.arange(n) * timescale / fps).astype(np.int64)
        steps = np.diff(dts)
        return Mp4Index.of(10 ** 6, (), timescale, np.arange(n) * 10, np.full(n, 10), dts, dts,
                           np.append(steps, steps[-1]), np.arange(n) % 30 == 0, b"")

    assert index(30, 1000).dts_step == 0  # the steps vary: the median would say 1000 / 33
    for fps, timescale, dataset in ((30, 1000, 30), (60, 1000, 60), (30, 15360, 30), (30, 1000, 10),
                                    (29.97, 30000, 30)):
        check_rate(index(fps, timescale), dataset, "cam.mp4")
    with pytest.raises(DatasetError, match=r"says fps 25, but video file cam.mp4 shows 30"):
        check_rate(index(30, 1000), 25, "cam.mp4")


def test_a_video_file_at_another_size_than_info_json_says_is_listed_with_its_episodes(tmp_path):
    """Read from each file's index (no decode, no reference): the file, its episodes, both sizes."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    def spec(**kw):
        return SampleSpec(episodes=4, min_length=8, max_length=12, gop=8, episodes_per_file=2,
                          cameras=parse_cameras("front:h264"), seed=1, **kw)

    mirror, large = write_sample(tmp_path / "small", spec()), write_sample(tmp_path / "large", spec(height=192, width=256))
    root, rel = tmp_path / "copy", f"videos/{FRONT}/chunk-000/file-001.mp4"
    shutil.copytree(mirror, root)
    shutil.copyfile(large / rel, root / rel)
    proc = _verify(root, "--against", mirror)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and not report["decoded"], proc.stderr
    found = _by_file(report)[rel]
    assert found["episodes"] == [2, 3]
    assert "is 256x192 (width x height) but meta/info.json gives the camera 128x96" in " ".join(found["problems"])


def test_an_episodes_file_without_a_cameras_column_is_the_metadata_finding(small_dataset, tmp_path):
    """verify reports the episodes file lacking a column as the metadata's problem, without a traceback."""
    import pyarrow.parquet as pq

    dst = tmp_path / "copy"
    shutil.copytree(small_dataset, dst)
    rel = "meta/episodes/chunk-000/file-000.parquet"
    column = f"videos/{FRONT}/from_timestamp"
    pq.write_table(pq.read_table(dst / rel).drop_columns([column]), dst / rel)
    proc = _verify(dst)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    error = json.loads(proc.stdout)["meta_error"]
    assert error.startswith("DatasetError: episodes file ") and rel in error and repr([column]) in error, error


def test_an_episode_row_lost_from_the_episodes_table_is_the_datasets_problem(small_dataset, tmp_path):
    """One row cut from an episodes file while info.json still counts it: the loader trains without that episode
    (the table is what it reads), so verify reports info.json's totals against the table's, with the fix."""
    import pyarrow.parquet as pq

    root = tmp_path / "lost"
    shutil.copytree(small_dataset, root)
    info = json.loads((root / "meta/info.json").read_text())
    path = sorted((root / "meta/episodes").rglob("*.parquet"))[-1]
    table = pq.read_table(path)
    pq.write_table(table.slice(0, table.num_rows - 1), path)
    report = json.loads(_verify(str(root)).stdout)
    said = report["dataset_problems"]
    assert report["exit_code"] == 1 and report["damaged"] == []
    assert f"meta/info.json says {info['total_episodes']} episodes (total_episodes), but meta/episodes holds " \
           f"{info['total_episodes'] - 1}: rows are missing" in said[0] and "re-download meta/" in said[0], said
    assert "frames (total_frames), but meta/episodes holds" in said[1], said
    # decoded: no video blamed for frames the table no longer places; the table's episodes read as the loader reads
    decoded = json.loads(_verify(str(root), "--decode").stdout)
    assert decoded["dataset_problems"] == said and decoded["damaged"] == [] and decoded["decoded"], decoded
