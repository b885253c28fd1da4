"""LoaderConfig: one frozen, validated object for every loader setting, read by the loader, its state, bench and
the command-line flags."""

from __future__ import annotations

import argparse
import dataclasses
import json

import numpy as np
import pytest
import torch

from dali_stream import ConfigError, LoaderConfig, Member, Mixture, StreamLoader
from dali_stream.config import (
    GROUPS,
    CacheConfig,
    DecodeConfig,
    SamplingConfig,
    StorageConfig,
    WorldConfig,
    as_dict,
)
from dali_stream.tools.flags import add_loader_flags, loader_settings


def test_defaults_are_valid_and_frozen():
    cfg = LoaderConfig()
    assert cfg.batch_size == 16 and cfg.decode == "auto" and cfg.delta_timestamps == {}
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.batch_size = 4  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.delta_timestamps["action"] = (0.0,)  # type: ignore[index]


def test_settings_are_normalised_when_made():
    cfg = LoaderConfig(delta_timestamps={"action": [0, 0.1]}, episodes=[3, 1], resize=[48, 64], mean=[0.5] * 3,
                       std=0.2, decode={"front": "cpu"})
    assert cfg.delta_timestamps == {"action": (0.0, 0.1)} and cfg.episodes == (3, 1) and cfg.resize == (48, 64)
    assert cfg.mean == (0.5, 0.5, 0.5) and dict(cfg.decode) == {"front": "cpu"}
    json.dumps(as_dict(cfg))  # results files and bench.csv take it as it is


# numpy's and torch's spellings of a setting, each beside its plain Python one: the same, equal config
NUMPY_SPELLINGS = [
    ({"batch_size": np.int64(4)}, {"batch_size": 4}),
    ({"episode_pool_size": np.int32(3), "seed": np.uint8(7)}, {"episode_pool_size": 3, "seed": 7}),
    ({"drop_n_first_frames": np.int64(2), "drop_n_last_frames": np.int16(1), "max_episodes": np.int64(5)},
     {"drop_n_first_frames": 2, "drop_n_last_frames": 1, "max_episodes": 5}),
    ({"num_workers": np.int64(0), "cache_bytes": np.int64(1 << 20), "rank": np.int64(1), "world_size": np.int64(2)},
     {"num_workers": 0, "cache_bytes": 1 << 20, "rank": 1, "world_size": 2}),
    ({"tolerance_s": np.float32(0.5), "remote_timeout_s": np.float64(30)}, {"tolerance_s": 0.5, "remote_timeout_s": 30}),
    ({"episodes": np.array([0, 1])}, {"episodes": [0, 1]}),
    ({"episodes": torch.tensor([2, 0])}, {"episodes": [2, 0]}),
    ({"episodes": range(3), "seed": np.int64(1)}, {"episodes": [0, 1, 2], "seed": 1}),
    ({"episodes": [np.int64(4), 1]}, {"episodes": [4, 1]}),
    ({"delta_timestamps": {"action": np.arange(3) / 30}}, {"delta_timestamps": {"action": [0, 1 / 30, 2 / 30]}}),
    ({"delta_timestamps": {"action": torch.tensor([-0.5, 0.0])}}, {"delta_timestamps": {"action": [-0.5, 0.0]}}),
    ({"delta_timestamps": {"action": [np.float32(0.25), np.int64(1)]}}, {"delta_timestamps": {"action": [0.25, 1]}}),
    ({"resize": np.array([48, 64]), "crop": (np.int64(32), 32), "mean": np.float32(0.5), "std": np.ones(3) / 4},
     {"resize": [48, 64], "crop": [32, 32], "mean": 0.5, "std": [0.25] * 3}),
    ({"shuffle": np.bool_(False), "drop_last": np.array(True), "check_frames": torch.tensor(False)},
     {"shuffle": False, "drop_last": True, "check_frames": False}),
]


@pytest.mark.parametrize("numpy_spelling,plain", NUMPY_SPELLINGS)
def test_numpy_and_torch_values_make_the_plain_config(numpy_spelling, plain):
    cfg = LoaderConfig(**numpy_spelling)
    assert cfg == LoaderConfig(**plain)
    for name in numpy_spelling:  # stored as Python's own values: state files and results take them as they are
        value = getattr(cfg, name)
        flat = [*value.values()][0] if name == "delta_timestamps" else value
        assert all(type(v) in (int, float, bool) for v in (flat if isinstance(flat, tuple) else (flat,))), (name, value)
    json.dumps(as_dict(cfg))


def test_a_members_numpy_values_make_the_plain_member():
    spelled = Member("/data/a", weight=np.float32(2), episodes=np.arange(3), max_episodes=np.int64(2),
                     tolerance_s=np.float64(0.25), delta_timestamps={"action": torch.arange(2) / 2})
    assert spelled == Member("/data/a", weight=2, episodes=[0, 1, 2], max_episodes=2, tolerance_s=0.25,
                             delta_timestamps={"action": [0.0, 0.5]})
    assert Member("/data/a", share=np.float32(0.5)) == Member("/data/a", share=0.5)
    assert Mixture(("/data/a",), samples_per_epoch=np.int64(10)).samples_per_epoch == 10
    with pytest.raises(ConfigError, match=r"member '/data/a': `max_episodes` must be a positive integer. Found: True"):
        Member("/data/a", max_episodes=True)
    with pytest.raises(ConfigError, match=r"member '/data/a': `episodes` must be a list of episode indices"):
        Member("/data/a", episodes=np.zeros((2, 2), dtype=int))


def test_numpy_values_that_are_no_setting_are_refused():
    """Bools stay refused where an integer is asked, numpy's too; an array that is no list of indices or offsets, or
    holding a bool or a nan, is refused when the config is made."""
    for options, match in [
        ({"batch_size": True}, r"`batch_size` must be a positive integer. Found: True"),
        ({"batch_size": np.bool_(True)}, r"`batch_size` must be a positive integer. Found: np.True_"),
        ({"seed": np.float64(1.0)}, r"`seed` must be an integer >= 0. Found: np.float64\(1.0\)"),
        ({"episodes": [True, 1]}, r"`episodes` must hold integer episode indices. Found: \[True\]"),
        ({"episodes": np.array([[0, 1]])}, r"`episodes` must be a list of episode indices .*Found: array"),
        ({"episodes": "01"}, r"`episodes` must be a list of episode indices"),
        ({"delta_timestamps": {"action": np.array([0.0, np.nan])}}, r"delta_timestamps\['action'\] holds nan"),
        ({"delta_timestamps": {"action": np.float64(0.1)}}, r"delta_timestamps\['action'\] must be a non-empty list"),
        ({"shuffle": np.int64(1)}, r"`shuffle` must be True or False. Found: np.int64\(1\)"),
        ({"drop_last": np.array([True])}, r"`drop_last` must be True or False. Found: array\(\[ True\]\)"),
    ]:
        with pytest.raises(ConfigError, match=match):
            LoaderConfig(**options)


def test_a_loader_takes_numpy_settings(small_dataset):
    with StreamLoader(str(small_dataset), device="cpu", batch_size=np.int64(4), episodes=np.array([0, 1]),
                      delta_timestamps={"action": np.arange(3) / 30}) as loader:
        assert loader.config == LoaderConfig(device="cpu", batch_size=4, episodes=[0, 1],
                                             delta_timestamps={"action": [0, 1 / 30, 2 / 30]})
        batch = next(iter(loader))
        assert batch["action"].shape[:2] == (4, 3) and set(batch["episode_index"].tolist()) <= {0, 1}
        json.dumps(loader.state_dict())


@pytest.mark.parametrize("options,match", [
    ({"batch_size": 0}, r"`batch_size` must be a positive integer. Found: 0"),
    ({"num_workers": 1.5}, r"`num_workers` must be an integer >= 0. Found: 1.5"),
    ({"shuffle": "no"}, r"`shuffle` must be True or False"),
    ({"check_frames": 0}, r"`check_frames` must be True or False. Found: 0"),
    ({"decode": "nvdec"}, r"decode='nvdec' is not one of \('auto', 'gpu', 'cpu', 'cpu-open', 'dali-cpu'\)"),
    ({"nvdec_engine": "pynv"}, r"`nvdec_engine` must be one of \('auto', 'dali', 'open'\). Found: 'pynv'"),
    ({"decode_threads": 0}, r"`decode_threads` must be a positive integer. Found: 0"),
    ({"image_dtype": "float16"}, r"`image_dtype` must be 'float32' or 'uint8'"),
    ({"tolerance_s": float("nan")}, r"`tolerance_s` must be a number >= 0"),
    ({"remote_timeout_s": 0}, r"`remote_timeout_s` must be a number of seconds > 0"),
    ({"delta_timestamps": {"action": []}}, r"delta_timestamps\['action'\] must be a non-empty list"),
    ({"augment": 3}, r"`augment` must be a function"),
])
def test_bad_settings_are_refused_without_a_dataset(options, match):
    with pytest.raises(ConfigError, match=match):
        LoaderConfig(**options)


def test_an_unknown_setting_names_the_closest_one():
    with pytest.raises(ConfigError, match=r"no setting `batchsize`; did you mean `batch_size`\?"):
        LoaderConfig.make(batchsize=4)


def test_the_loader_takes_keywords_only_after_the_source(small_dataset):
    with pytest.raises(TypeError):
        StreamLoader(str(small_dataset), 4)  # type: ignore[misc]
    with pytest.raises(ConfigError, match="did you mean `episode_pool_size`"):
        StreamLoader(str(small_dataset), episode_pool=4)


def test_config_and_keywords_together(small_dataset):
    base = LoaderConfig(batch_size=4, episode_pool_size=3, seed=7, device="cpu")
    with StreamLoader(str(small_dataset), config=base, seed=9) as loader:
        assert loader.config == dataclasses.replace(base, seed=9)
        state = loader.state_dict()
        assert (state["batch_size"], state["episode_pool_size"], state["seed"]) == (4, 3, 9)
        assert next(iter(loader))["index"].shape == (4,)


def test_flags_come_from_the_config():
    parser = argparse.ArgumentParser()
    add_loader_flags(parser, ("batch_size", "episode_pool_size", "decode", "tolerance_s", "device"), batch_size=8)
    args = parser.parse_args(["--pool", "4", "--decode", "cpu", "--tolerance-s", "1e-3"])
    assert loader_settings(args, ("batch_size", "episode_pool_size", "decode", "tolerance_s", "device")) == {
        "batch_size": 8, "episode_pool_size": 4, "decode": "cpu", "tolerance_s": 1e-3, "device": None}
    text = " ".join(parser.format_help().split())
    assert LoaderConfig().help("episode_pool_size") in text
    # one default each: a setting whose help says its default rule (device) is not also given "(default: None)"
    assert "(default: 8)" in text and "else cpu)" in text and "(default: None)" not in text, text
    with pytest.raises(SystemExit):
        parser.parse_args(["--decode", "nvdec"])


def test_help_lists_every_setting_with_its_help():
    import pydoc

    text = pydoc.render_doc(LoaderConfig, renderer=pydoc.plaintext)
    for f in dataclasses.fields(LoaderConfig):
        assert f"{f.name} = " in text and f.metadata["help"][:40] in text, f.name


def test_torch_dtypes_name_the_image_dtype():
    import torch

    assert LoaderConfig(image_dtype=torch.uint8).image_dtype == "uint8"
    assert LoaderConfig(image_dtype=torch.float32).image_dtype == "float32"
    with pytest.raises(ConfigError, match=r"'float32' or 'uint8' \(or torch.float32 / torch.uint8\). Found: 'float16'"):
        LoaderConfig(image_dtype=torch.float16)


def test_typed_keywords_come_from_the_config_and_a_type_checker_sees_them(tmp_path):
    """`StreamLoader(source, **settings)`, `open_meta` and `dali_stream.dali.Source` are typed with `LoaderCall`'s
    signature (LoaderConfig's fields and the loader's own four arguments), so an editor completes them and mypy refuses
    a misspelt setting or a value of the wrong type, with no second list of the settings."""
    import inspect
    import subprocess
    import sys
    from pathlib import Path

    from dali_stream import open_meta
    from dali_stream.config import LoaderCall
    from dali_stream.dali import Source

    own = [f.name for f in dataclasses.fields(LoaderCall) if f.name not in LoaderConfig.names()]
    for function in (StreamLoader.__init__, open_meta, Source.__init__):
        params = [p.name for p in inspect.signature(function).parameters.values()
                  if p.name != "self" and p.kind is not inspect.Parameter.VAR_KEYWORD]
        assert params == ["source", "config", "repo_id", "root"] and sorted(own) == sorted(params), function
    code = tmp_path / "use.py"
    code.write_text("from dali_stream import StreamLoader, open_meta\n"
                    "StreamLoader('x', batch_size=8, decode={'cam': 'cpu'}, delta_timestamps={'action': [0.0, 0.1]})\n"
                    "StreamLoader('x', batch_sise=8)\n"
                    "StreamLoader('x', batch_size='8')\n"
                    "mode = 'gpu' if len('x') else 'cpu'\n"
                    "StreamLoader(repo_id='a/b', decode=mode, resize=[48, 64], episodes=range(3), device=None)\n"
                    "open_meta('x', revison='main')\n"
                    "from dali_stream.dali import Source\n"
                    "Source('x', batch_size=4, seed=1)\n"
                    "Source('x', shufle=True)\n")
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--follow-imports=silent", str(code)],
                         capture_output=True, text=True, cwd=repo, timeout=300)
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert len(errors) == 4, out.stdout
    assert 'Unexpected keyword argument "batch_sise"' in errors[0] and "use.py:3" in errors[0]
    assert 'Argument "batch_size"' in errors[1] and '"str"' in errors[1] and "use.py:4" in errors[1]
    assert 'Unexpected keyword argument "revison" for "open_meta"' in errors[2] and "use.py:7" in errors[2]
    assert 'Unexpected keyword argument "shufle" for "Source"' in errors[3] and "use.py:10" in errors[3]


def test_every_setting_sits_in_one_documented_group():
    """The settings are declared once, in six sub-configs; LoaderConfig is all of them, flat, in the groups' order."""
    groups = LoaderConfig.groups()
    assert list(groups) == ["sampling", "decoding", "output", "caches", "storage", "world"]
    flat = [name for names in groups.values() for name in names]
    assert flat == list(LoaderConfig.names()) and len(set(flat)) == len(flat)
    for name, group in GROUPS.items():
        doc = group.__doc__ or ""
        assert len(doc.split("\n\n")[0]) > 80, name
        assert all(f"    {setting} = " in doc for setting in groups[name]), name
        assert getattr(LoaderConfig, name).__doc__, name  # `config.<group>` says what it reads


def test_a_group_reads_as_its_own_sub_config_and_checks_its_own_settings():
    cfg = LoaderConfig(batch_size=4, decode={"front": "cpu"}, resize=[48, 64], rank=1, world_size=2)
    assert cfg.sampling == SamplingConfig(batch_size=4) and cfg.world == WorldConfig(rank=1, world_size=2)
    assert dict(cfg.decoding.decode) == {"front": "cpu"} and cfg.output.resize == (48, 64)
    assert cfg.caches == CacheConfig() and cfg.storage == StorageConfig()
    with pytest.raises(ConfigError, match=r"decode='nvdec' is not one of"):
        DecodeConfig(decode="nvdec")
    with pytest.raises(ConfigError, match=r"`world_size` must be a positive integer. Found: 0"):
        LoaderConfig(world_size=0)
    with pytest.raises(ConfigError, match=r"`disk_cache_dir` must be a local folder's path"):
        LoaderConfig.make(cfg, disk_cache_dir="s3://bucket/cache")


def test_the_flat_keywords_and_reads_stay_as_they_were():
    """What callers did before the groups: flat keywords, flat reads, `dataclasses.replace`, `fields`, `as_dict`."""
    cfg = LoaderConfig.make(batch_size=8, nvdec_engine="open", table_cache_dir="off", seed=3)
    assert (cfg.batch_size, cfg.nvdec_engine, cfg.table_cache_dir, cfg.seed) == (8, "open", "off", 3)
    again = dataclasses.replace(cfg, batch_size=2, storage_options={"anon": True})
    assert again.batch_size == 2 and dict(again.storage_options) == {"anon": True} and again.seed == 3
    assert [f.name for f in dataclasses.fields(LoaderConfig)] == list(as_dict(cfg))
    with pytest.raises(ConfigError, match=r"`batch_size` must be a positive integer"):
        dataclasses.replace(cfg, batch_size=0)


def test_the_documentation_lists_each_group_with_its_settings():
    """docs/configuration.md's table of groups says what `LoaderConfig.groups()` holds."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "configuration.md").read_text()
    rows = {}
    for line in text.split("## Groups", 1)[1].split("\n## ", 1)[0].splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 4:
            rows[cells[0].strip("`")] = (cells[1].strip("`"), tuple(s.strip().strip("`") for s in cells[3].split(",")))
    assert rows == {name: (GROUPS[name].__name__, names) for name, names in LoaderConfig.groups().items()}
