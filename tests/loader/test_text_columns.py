"""Text columns of the frame tables: lerobot 0.6.1's language annotations (`language_persistent`, `language_events`:
a list of row dicts a frame, dtype "language", as `lerobot-annotate` writes them) and string features. The batch
carries each as a list with one value per sample, the sample's frame's, as lerobot's `dataset[i]` returns it."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pytest

from dali_stream import ConfigError, Member, Mixture, StreamLoader
from dali_stream.pairing import dali_present
from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample
from tests.support.columns import add_columns, ids

PERSISTENT, EVENTS, NOTE = "language_persistent", "language_events", "observation.note"


def persistent(episode: int) -> list[dict]:
    return [{"role": "assistant", "content": f"plan of episode {episode}", "style": "plan", "timestamp": 0.0,
             "camera": None, "tool_calls": None},
            {"role": "assistant", "content": f"subtask {episode}.1", "style": "subtask", "timestamp": 0.2,
             "camera": None, "tool_calls": None}]


def events(episode: int, frame: int) -> list[dict]:
    """Rows on every third frame (empty lists between, as the annotation writer leaves them)."""
    return [] if frame % 3 else [{"role": "user", "content": f"say {episode}/{frame}", "style": "interjection",
                                  "camera": None, "tool_calls": None}]


def note(episode: int, frame: int) -> str:
    return f"episode {episode} frame {frame}"


@pytest.fixture(scope="module")
def annotated(tmp_path_factory):
    """A sample with lerobot's two language columns appended to its frame tables (one row group per episode, as
    lerobot's annotation writer keeps them) and a string feature."""
    spec = SampleSpec(episodes=5, min_length=6, max_length=14, gop=4, episodes_per_file=2,
                      cameras=parse_cameras("front:h264"), seed=9)
    root = write_sample(tmp_path_factory.mktemp("text") / "annotated", spec)
    add_columns(root, {PERSISTENT: {"dtype": "language", "shape": [1], "names": None},
                       EVENTS: {"dtype": "language", "shape": [1], "names": None},
                       NOTE: {"dtype": "string", "shape": [1], "names": None}},
                lambda rows: {PERSISTENT: pa.array([persistent(e) for e, _ in ids(rows)]),
                              EVENTS: pa.array([events(e, f) for e, f in ids(rows)]),
                              NOTE: pa.array([note(e, f) for e, f in ids(rows)])})
    return root


def _check(batch, mixed: bool = False) -> int:
    for key in (PERSISTENT, EVENTS, NOTE, "task"):
        assert isinstance(batch[key], list) and len(batch[key]) == len(batch["index"])
    for j, (e, f) in enumerate(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist())):
        if mixed and int(batch["dataset_index"][j]) == 1:  # the member without annotations
            assert batch[PERSISTENT][j] is None and batch[EVENTS][j] is None and batch[NOTE][j] is None
            continue
        assert batch[PERSISTENT][j] == persistent(e) and batch[EVENTS][j] == events(e, f)
        assert batch[NOTE][j] == note(e, f)
    return len(batch["index"])


@pytest.mark.parametrize("settings", [{}, {"episode_pool_size": "all", "num_workers": 0},
                                      {"shuffle": False, "batch_size": 3}])
def test_each_sample_carries_its_frames_annotations(annotated, settings):
    with StreamLoader(str(annotated), **{"batch_size": 4, "device": "cpu", "drop_last": False, **settings}) as loader:
        assert loader.meta.text_keys == [PERSISTENT, EVENTS, NOTE]  # info.json's order
        assert sum(_check(batch) for batch in loader) == loader.meta.total_frames
        sample = loader.dataset[7]
        e, f = int(sample["episode_index"]), int(sample["frame_index"])
        assert sample[PERSISTENT] == persistent(e) and sample[EVENTS] == events(e, f) and sample[NOTE] == note(e, f)


@pytest.mark.skipif(not dali_present(), reason="resize= needs NVIDIA DALI's operators")
def test_annotations_beside_the_dali_graph(annotated):
    with StreamLoader(str(annotated), batch_size=4, device="cpu", resize=(48, 64),
                      delta_timestamps={"action": [0.0, 1 / 30]}) as loader:
        assert not loader.resolved.host_batches
        assert sum(_check(batch) for batch in loader) > 0


def test_text_is_not_windowed_and_a_member_without_it_gives_none(annotated, tmp_path):
    with pytest.raises(ConfigError, match=r"delta_timestamps asks windows of \['language_events'\], which are text"):
        StreamLoader(str(annotated), device="cpu", delta_timestamps={EVENTS: [0.0, 1 / 30]})
    plain = tmp_path / "plain"
    shutil.copytree(annotated, plain)
    info = json.loads((plain / "meta/info.json").read_text())
    for key in (PERSISTENT, EVENTS, NOTE):
        del info["features"][key]  # the data files keep the columns: nothing reads them
    (plain / "meta/info.json").write_text(json.dumps(info))
    mix = Mixture([Member(str(annotated), name="annotated"), Member(str(plain), name="plain")])
    with StreamLoader(mix, batch_size=6, device="cpu", drop_last=False) as loader:
        seen = sum(_check(batch, mixed=True) for batch in loader)
    assert seen == loader.meta.total_frames
    assert loader.meta.features[PERSISTENT]["dtype"] == "language"


def test_over_http_the_annotations_come_with_the_rows_range_reads(annotated):
    """A remote dataset reads the columns asked by byte ranges: a list of structs' leaves
    (`language_persistent.list.element.role`, ...) are among them."""
    from tests.support.httpserver import Server

    with Server(annotated.parent) as base:
        with StreamLoader(f"{base}/{annotated.name}", batch_size=4, device="cpu", drop_last=False) as loader:
            assert sum(_check(batch) for batch in loader) == loader.meta.total_frames


@pytest.mark.skipif(not dali_present(), reason="resize= needs NVIDIA DALI's operators")
def test_a_mixtures_text_features_keep_their_shape_beside_resized_cameras(annotated):
    mix = Mixture([Member(str(annotated), name="a"), Member(str(annotated), name="b")])
    with StreamLoader(mix, batch_size=4, device="cpu", resize=(32, 48)) as loader:
        assert loader.meta.features["observation.images.front"]["shape"] == [32, 48, 3]
        assert loader.meta.features[PERSISTENT] == {"dtype": "language", "shape": [1], "names": None}
