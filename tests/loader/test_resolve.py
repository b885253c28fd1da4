"""`loader.resolve`: every derived setting from the settings and plain facts, without DALI, torch or a dataset."""

from __future__ import annotations

import subprocess
import sys

import pytest

from dali_stream.config import LoaderConfig
from dali_stream.decode.route import route_named
from dali_stream.loader.resolve import (
    EPISODE_FRAMES_BYTES,
    LONG_SEGMENT_FLOOR,
    REMOTE_CUT_AHEAD,
    Facts,
    nvdec_joins,
    resolve,
)

CPU = {"front": "torchcodec", "top": "dali-cpu"}


def facts(routes, **kw) -> Facts:
    """`Facts` of cameras given by route names (the loader passes the routes themselves)."""
    return Facts(routes={k: route_named(v) for k, v in routes.items()}, **kw)
H100 = dict(gpu=True, gpu_engines=7, cuda_batches=True)


def test_it_imports_without_dali_or_torch():
    code = ("import sys; import dali_stream.loader.resolve; "
            "print(sorted(m for m in ('torch', 'nvidia.dali', 'torchcodec', 'av', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_cpu_defaults_and_their_reasons():
    r = resolve(LoaderConfig(num_workers=2, batch_size=8), facts(routes=CPU, cpu_count=2, episodes=10))
    assert (r.drop_last, r.pool, r.global_shuffle) == (True, 16, False)
    # a pool's open episodes decoded once each, DALI's CPU decoder on the workers for them: no graph
    assert r.episode_frames == EPISODE_FRAMES_BYTES and r.dali_on_workers == ("top",) and r.host_batches
    assert r.episode_frames_each == EPISODE_FRAMES_BYTES // (16 * 2)  # the pool's episodes, two cameras each
    assert (r.nvdec_engines, r.dali_threads, r.join_streams) == (0, 2, 0)
    in_graph = resolve(LoaderConfig(num_workers=2, episode_frames_bytes=0), facts(routes=CPU))
    assert in_graph.episode_frames == 0 and in_graph.reasons["episode_frames"] == "episode_frames_bytes given"
    assert in_graph.join_streams == 2 and in_graph.dali_on_workers == ()  # one stream per DALI thread
    assert r.host_frames and r.prefetch_batches == 3  # num_workers + 1 where frames skip the graph
    assert r.fetch_workers == 2 and r.cut_ahead == 0 and r.max_decoders == 2 * 1 * 8
    assert r.rank_episodes == 10 and r.epoch_episodes == 10 and r.segment_bytes == (4 << 30) // (2 * 16 * 2)
    assert r.engine_threads == {}
    described = r.describe()
    assert set(described) == set(r.reasons) and described["prefetch_batches"] == {
        "value": 3, "what": "batches built ahead of the training loop", "why": "num_workers + 1 (host frames)"}
    assert all(why for why in r.reasons.values())


@pytest.mark.parametrize("cores,workers", [(1, 2), (2, 2), (4, 3), (12, 11), (64, 16)])
def test_num_workers_are_the_ranks_cores_less_one(cores, workers):
    """The decoding threads follow the cores a rank may use (`decode.node.rank_cores`), one left for the training
    loop, at least MIN_WORKERS, at most MAX_WORKERS; they size what follows them (threads of the graph, batches
    ahead, decoders kept); a given value wins."""
    from dali_stream.loader.resolve import MAX_WORKERS, MIN_WORKERS

    r = resolve(LoaderConfig(batch_size=8), facts(routes=CPU, rank_cores=cores, episodes=10))
    assert r.num_workers == workers == max(MIN_WORKERS, min(MAX_WORKERS, cores - 1))
    assert f"the {cores} cores this rank may use less one" in r.reasons["num_workers"]
    assert (r.dali_threads, r.prefetch_batches, r.max_decoders) == (workers, workers + 1, workers * 1 * 8)
    given = resolve(LoaderConfig(num_workers=0), facts(routes=CPU, rank_cores=cores))
    assert given.num_workers == 0 and given.reasons["num_workers"] == "given"
    # every camera on NVDEC: the workers only fetch and lay out, as the GPU runs were measured
    gpu = resolve(LoaderConfig(), facts(routes={"front": "nvdec-open"}, rank_cores=cores, **H100))
    assert gpu.num_workers == MIN_WORKERS and "every camera decodes on the GPU" in gpu.reasons["num_workers"]


def test_every_derived_setting_says_what_it_is():
    """inspect and bench print each derived setting's name: each comes with what it is, in plain words, declared
    beside it in its resolver's part; `Resolved` is the parts at once, no field of its own."""
    from dataclasses import fields

    from dali_stream.loader.resolve import MEANING, Resolved
    from dali_stream.loader.resolve_base import Part

    assert set(MEANING) == {f.name for f in fields(Resolved)} - {"why"} and all(MEANING.values())
    parts = [c for c in Resolved.__mro__[1:] if issubclass(c, Part) and c is not Part]
    assert {f.name for p in parts for f in fields(p)} == {f.name for f in fields(Resolved)}
    assert all(f.metadata["what"] == MEANING[f.name] for p in parts for f in fields(p) if f.name != "why")


def test_a_value_two_parts_give_is_refused():
    """Each derived setting comes from exactly one resolver: a second part giving it is refused, naming it."""
    from dataclasses import dataclass, field

    from dali_stream.loader.resolve import _merged
    from dali_stream.loader.resolve_base import Part
    from dali_stream.loader.resolve_threads import sampling

    @dataclass(frozen=True, kw_only=True)
    class Again(Part):
        drop_last: bool = field(metadata={"what": "an epoch's partial last batch is dropped, again"})

    with pytest.raises(ValueError, match=r"\['drop_last'\] resolved twice \(by Again again\)"):
        _merged(sampling(LoaderConfig()), Again(drop_last=False, why={"drop_last": "again"}))


def test_each_engine_form_travels_to_make_engine_as_one_value():
    """The Engines part gives, per route, every form's count under the keyword `EngineRoute.make_engine` takes it by:
    the loader passes it on as it is (`loader.assemble.open_engines`), knowing no form."""
    import inspect

    from dali_stream.decode.route import EngineRoute

    r = resolve(LoaderConfig(num_workers=2), facts(routes={"front": "nvdec-open", "top": "cpu-open"}, rank_cores=16,
                                                   **H100))
    assert r.engine_form("nvdec-open") == {"threads": 1, "processes": 7}
    assert r.engine_form("cpu-open") == {"threads": 2, "processes": 0}
    given = resolve(LoaderConfig(decode_processes=0, decode_threads=3), facts(routes={"a": "nvdec-open"}, **H100))
    assert given.engine_form("nvdec-open") == {"threads": 3, "processes": 0}
    make_engine = inspect.signature(EngineRoute.make_engine)
    for name in ("nvdec-open", "cpu-open"):
        make_engine.bind(None, device_index=None, sizes={}, **r.engine_form(name))  # every keyword one it takes


def test_the_engine_settings_are_those_that_size_an_engine_form():
    """`ENGINE_SETTINGS` (the settings marked `engine=True`: bench's flags, and what its CPU-route run leaves derived)
    each change an engine route's form, and bench takes each as a flag."""
    from dali_stream.config_groups import ENGINE_SETTINGS
    from dali_stream.tools.cli_common import BENCH_SETTINGS

    assert ENGINE_SETTINGS == ("decode_threads", "decode_processes") and set(ENGINE_SETTINGS) <= set(BENCH_SETTINGS)
    cpu_open = facts(routes={"a": "cpu-open"}, rank_cores=4)
    derived = resolve(LoaderConfig(), cpu_open).engine_form("cpu-open")
    for name in ENGINE_SETTINGS:
        assert resolve(LoaderConfig(**{name: 5}), cpu_open).engine_form("cpu-open") != derived, name


def test_given_settings_win_and_say_so():
    cfg = LoaderConfig(prefetch_batches=5, fetch_workers=1, max_decoders=3, segment_bytes=123, join_streams=4,
                       drop_last=False, episode_frames_bytes=0)
    r = resolve(cfg, facts(routes=CPU))
    assert (r.prefetch_batches, r.fetch_workers, r.max_decoders, r.segment_bytes, r.join_streams, r.drop_last) == \
        (5, 1, 3, 123, 4, False)
    assert {r.reasons[k] for k in ("prefetch_batches", "fetch_workers", "max_decoders", "segment_bytes",
                                   "join_streams", "drop_last")} == {"given"}


def test_nvdec_node():
    routes = {"front": "nvdec", "wrist": "torchcodec"}
    r = resolve(LoaderConfig(num_workers=2), facts(routes=routes, **H100))
    assert (r.nvdec_engines, r.dali_threads, r.join_streams) == (7, 7, 7)
    assert not r.host_frames and r.prefetch_batches == 4
    unknown = resolve(LoaderConfig(), facts(routes=routes, gpu=True, gpu_engines=None, cuda_batches=True))
    assert unknown.nvdec_engines == 2 and "does not know" in unknown.reasons["nvdec_engines"]
    opened = resolve(LoaderConfig(num_workers=2), facts(routes={"front": "nvdec-open", "top": "cpu-open"}, **H100))
    # one decode thread per NVDEC engine, at most 4: past 4 the H200's engine lost samples/s (host-bound)
    assert opened.engine_threads == {"cpu-open": 2, "nvdec-open": 4} and opened.join_streams == 0
    assert "at most 4" in opened.reasons["engine_threads"]
    two = resolve(LoaderConfig(), facts(routes={"a": "nvdec-open"}, gpu=True, gpu_engines=2, cuda_batches=True))
    assert two.engine_threads == {"nvdec-open": 2}
    assert resolve(LoaderConfig(decode_threads=3), facts(routes={"a": "nvdec-open"}, **H100)).engine_threads == {
        "nvdec-open": 3}


@pytest.mark.parametrize("why, cfg, facts", [
    ("a mixture", LoaderConfig(), facts(routes=CPU, mixture=True)),
    ("augment", LoaderConfig(augment=lambda v, k, r: v), facts(routes=CPU)),
    ("no DALI camera", LoaderConfig(), facts(routes={"front": "torchcodec"})),
])
def test_one_clip_per_sample_where_joining_cannot_apply(why, cfg, facts):
    assert resolve(cfg, facts).join_streams == 0, why


def test_global_shuffle_and_remote_sources():
    cfg = LoaderConfig(episode_pool_size="all", cache_bytes=1 << 30)
    r = resolve(cfg, facts(routes=CPU, local=False, episodes=1000, world_size=4))
    assert r.global_shuffle and r.pool is None and r.epoch_episodes is None
    assert r.fetch_workers == 16 and r.cut_ahead == REMOTE_CUT_AHEAD
    assert r.rank_episodes == 250 and r.segment_bytes == (1 << 30) // (2 * 250 * 2)
    small = resolve(LoaderConfig(cache_bytes=1 << 20), facts(routes=CPU))
    assert small.segment_bytes == LONG_SEGMENT_FLOOR  # a pool's piece limit never goes below the floor
    pool = resolve(LoaderConfig(), facts(routes=CPU, local=False))
    assert pool.fetch_workers == 4 and not pool.global_shuffle
    evaluation = resolve(LoaderConfig(shuffle=False), facts(routes=CPU))
    assert evaluation.drop_last is False and "evaluation" in evaluation.reasons["drop_last"]
    assert evaluation.episode_frames == EPISODE_FRAMES_BYTES  # episodes in order: each decoded once
    assert r.episode_frames == 0 and "global shuffle" in r.reasons["episode_frames"]
    nvdec = resolve(LoaderConfig(), facts(routes={"front": "nvdec", "side": "cpu-open"}, **H100))
    assert nvdec.episode_frames == 0 and "no camera decoded on the CPU" in nvdec.reasons["episode_frames"]


def test_nvdec_joins_before_routes_are_known():
    assert nvdec_joins(LoaderConfig()) and not nvdec_joins(LoaderConfig(join_streams=0))
    assert not nvdec_joins(LoaderConfig(augment=lambda v, k, r: v))


def test_the_cache_keeps_resized_frames_where_the_workers_can_resize_them():
    """With the decoded-frame cache and `resize` or `crop`, CPU-decoded cameras are resized and cropped on the
    workers and kept so;
    not where batches land on a GPU (the graph resizes there) or an augment hook runs before the resize, nor for
    cameras NVDEC decodes, nor without the cache. DALI's CPU decoder runs on the workers with the cache."""
    routes = {"front": "torchcodec", "side": "cpu-open", "top": "dali-cpu", "wrist": "nvdec"}
    cached = LoaderConfig(resize=(96, 128), frame_cache_bytes=1 << 30)
    kept = ("front", "side", "top")
    assert resolve(cached, facts(routes=routes)).shaped_on_workers == kept
    assert resolve(LoaderConfig(resize=(96, 128), frame_cache_dir="frames"),
                   facts(routes=routes)).shaped_on_workers == kept
    assert resolve(LoaderConfig(crop=(64, 64), frame_cache_bytes=1), facts(routes=routes)).shaped_on_workers == kept
    assert resolve(cached, facts(routes=routes)).dali_on_workers == ("top",)
    assert resolve(LoaderConfig(episode_frames_bytes=0), facts(routes=routes)).dali_on_workers == ()
    for cfg, given in [(cached, facts(routes=routes, **H100)),
                       (LoaderConfig(resize=(96, 128), frame_cache_bytes=1 << 30, augment=lambda v, k, r: v),
                        facts(routes=routes)),
                       (LoaderConfig(resize=(96, 128)), facts(routes=routes)),
                       (LoaderConfig(frame_cache_bytes=1 << 30), facts(routes=routes))]:
        r = resolve(cfg, given)
        assert r.shaped_on_workers == ()
        assert ("shaped_on_workers" in r.reasons) == (cfg.resize is not None and bool(cfg.frame_cache_bytes))


def test_the_frame_cache_and_the_transform_processes_are_decided_here():
    cpu = facts(routes=CPU, cpu_count=2, episodes=10)
    plain = resolve(LoaderConfig(num_workers=3), cpu)
    assert not plain.frame_cache and plain.transform_processes == 0
    assert resolve(LoaderConfig(frame_cache_dir="/tmp/frames"), cpu).frame_cache
    hook = dict(image_transforms=abs, num_workers=3)
    assert resolve(LoaderConfig(**hook), cpu).transform_processes == 3  # one per worker
    assert resolve(LoaderConfig(**hook, transform_workers=1), cpu).transform_processes == 1
    on_gpu = resolve(LoaderConfig(**hook), facts(routes=CPU, cuda_batches=True))
    assert on_gpu.transform_processes == 0 and "GPU" in on_gpu.reasons["transform_processes"]


def test_which_cameras_skip_the_graph_and_whether_there_is_one():
    """Host frames: on a CPU node without image ops the workers lay out the torchcodec cameras (and, with the
    decoded-frame cache, DALI's CPU decoder's); no graph at all where every camera is laid out so."""
    r = resolve(LoaderConfig(episode_frames_bytes=0), facts(routes=CPU))
    assert r.host_cameras == ("front",) and not r.host_batches and "DALI graph" in r.reasons["host_batches"]
    r = resolve(LoaderConfig(frame_cache_bytes=1 << 20, episode_frames_bytes=0), facts(routes=CPU))
    assert r.dali_on_workers == ("top",) and r.host_cameras == ("front", "top") and r.host_batches
    r = resolve(LoaderConfig(), facts(routes={"front": "torchcodec"}))
    assert r.host_batches and r.reasons["host_batches"] == "every camera on host frames, batches on the CPU"
    r = resolve(LoaderConfig(resize=(32, 32)), facts(routes={"front": "torchcodec"}))
    assert r.host_cameras == () and not r.host_batches
    r = resolve(LoaderConfig(), facts(routes={"front": "torchcodec"}, cuda_batches=True))
    assert r.host_cameras == () and not r.host_batches and r.reasons["host_batches"] == "batches on a GPU"


def test_which_cameras_the_cache_keeps_channels_first():
    """The decoded-frame cache keeps a host camera laid out channels-first as (3, H, W) where its frames are small
    (a later epoch copies instead of transposing), as decoded where they are large (640x480: no faster, and epoch 1
    paid the copy), with `channels_last` (the decoder's order is the batch's) and off the host path."""
    from dali_stream.loader.resolve import KEPT_CHW_BYTES

    sizes = {"front": 3 * 96 * 128, "top": 3 * 480 * 640}
    cached = dict(frame_cache_bytes=1 << 30, episode_frames_bytes=0)
    r = resolve(LoaderConfig(**cached), facts(routes=CPU, frame_bytes=sizes))
    assert r.host_cameras == ("front", "top") and r.kept_chw == ("front",), r.reasons["kept_chw"]
    assert f"{KEPT_CHW_BYTES >> 10} KiB" in r.reasons["kept_chw"]
    r = resolve(LoaderConfig(**cached), facts(routes=CPU, frame_bytes=dict(sizes, top=3 * 256 * 256)))
    assert r.kept_chw == ("front", "top")
    r = resolve(LoaderConfig(**cached, memory_format="channels_last"), facts(routes=CPU, frame_bytes=sizes))
    assert r.kept_chw == () and "channels_last" in r.reasons["kept_chw"]
    r = resolve(LoaderConfig(episode_frames_bytes=0), facts(routes=CPU, frame_bytes=sizes))
    assert r.kept_chw == () and r.reasons["kept_chw"] == "no decoded-frame cache"
    r = resolve(LoaderConfig(**cached, resize=(32, 32)), facts(routes=CPU, frame_bytes=sizes))
    assert r.kept_chw == ()  # through the DALI graph: kept (H, W, 3)
    r = resolve(LoaderConfig(**cached), facts(routes=CPU))  # sizes not known: as decoded
    assert r.kept_chw == ()


def test_host_buffers_are_the_batches_alive_at_once_per_host_camera():
    """`BufferPool` keeps (prefetch_batches + 3) buffers of a shape per host camera: the batches built ahead
    (prefetch_batches + 1), the one DALI holds and the one the caller holds; at least one camera's worth."""
    two = resolve(LoaderConfig(prefetch_batches=5, frame_cache_bytes=1 << 20, episode_frames_bytes=0),
                  facts(routes=CPU))
    assert two.host_cameras == ("front", "top") and two.host_buffers == (5 + 3) * 2 == 16
    assert "prefetch_batches + 3" in two.reasons["host_buffers"]
    none = resolve(LoaderConfig(num_workers=2), facts(routes={"front": "nvdec"}, **H100))
    assert none.host_cameras == () and none.prefetch_batches == 4 and none.host_buffers == 4 + 3


def test_the_augment_seed_is_the_runs_seed_only_with_a_hook():
    hooked = resolve(LoaderConfig(seed=7, augment=lambda v, k, r: v), facts(routes=CPU))
    assert hooked.augment_seed == 7 and "seed" in hooked.reasons["augment_seed"]
    plain = resolve(LoaderConfig(seed=7), facts(routes=CPU))
    assert plain.augment_seed is None and plain.reasons["augment_seed"] == "no augment= hook"


@pytest.mark.parametrize("budget, ranks, each", [(None, 4, None), (10, 4, 2), (10, 1, 10), (3, 8, 1)])
def test_remote_concurrency_is_the_nodes_budget_over_its_ranks(budget, ranks, each, monkeypatch):
    """`remote_concurrency` is a node's: each of its ranks has its part, rounded down, at least 1 (None: no limit).
    The source opens with the same value (`loader.source_setup.remote_options`)."""
    from dali_stream.loader.source_setup import remote_options

    r = resolve(LoaderConfig(remote_concurrency=budget), facts(routes=CPU, local=False, local_world_size=ranks))
    assert r.remote_concurrency == each
    assert (f"over its {ranks} ranks" in r.reasons["remote_concurrency"]) == (budget is not None)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(ranks))
    assert remote_options(LoaderConfig(remote_concurrency=budget)).concurrency == each
