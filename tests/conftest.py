"""Datasets written once per test session by the project's own sample writer (no downloads)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("SVT_LOG", "1")
if "DALI_STREAM_CACHE" not in os.environ:  # the loader's default cache folder (decoded row groups): not the user's
    import atexit
    import shutil
    import tempfile

    os.environ["DALI_STREAM_CACHE"] = tempfile.mkdtemp(prefix="dali-stream-test-cache-")
    atexit.register(shutil.rmtree, os.environ["DALI_STREAM_CACHE"], True)


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs an NVIDIA GPU with a driver; skipped elsewhere")
    config.addinivalue_line("markers", "child: runs in a child process of its own (tests/support/child.py)")
    from tests.support.insides import install

    install()  # a loader's private attributes read from outside dali_stream/loader/ raise (tests/support/insides.py)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    """A `child` test runs in a child process (tests/support/child.py): a library that ends the process is a named failure."""
    from tests.support.child import in_child, run_in_child, verdict

    if pyfuncitem.get_closest_marker("child") is None or in_child():
        return None
    base = pyfuncitem.config._tmp_path_factory.mktemp("child", numbered=True)
    rc, output = run_in_child(pyfuncitem.nodeid, base)
    why = verdict(pyfuncitem.nodeid, rc, output)
    if why is not None:
        pytest.fail(why, pytrace=False)
    return True


def _gpu_node():
    """The routing node of this machine, probed before any test pins CPU routes (None: probing failed).
    With DALI_STREAM_CPU_ONLY=1 in the environment the `gpu` tests skip."""
    try:
        from dali_stream.decode.node import Node

        return Node.probe()
    except Exception:
        return None


# The files that take longest, longest first (seconds of their tests on a 2-core machine, 2026-12): `make test` hands
# work to its processes in collection order (`--dist loadfile --no-loadscope-reorder`), so these start first and
# short files fill the end, instead of one long file starting last while the other processes idle.
LONG_FIRST = ("test_readme_install",  # 200: a fresh environment from the README's install line
              "test_slurm", "test_docs", "test_loader", "test_diagnose", "test_train", "test_multirank",
              "test_wild_encodings", "test_remote", "test_long_episodes", "test_disk_tier", "test_interrupt",
              "test_process_engine", "test_sample_data", "test_range_reads", "test_bench", "test_mixture_cli",
              "test_pipelines", "test_map_style", "test_depth", "test_clips", "test_frame_guard", "test_boundaries",
              "test_nv12")  # the last: ~30
# ... and of those, the files whose tests are handed out one at a time rather than as the whole file (each test is
# long; their module fixtures, small datasets, are written again by each process that runs one, seconds each):
# test_docs alone took 400 s of one process while the others finished
SPLIT = ("test_docs", "test_diagnose", "test_train")


def _stem(nodeid: str) -> str:
    return nodeid.split("::", 1)[0].rsplit("/", 1)[-1].removesuffix(".py")


def _file_order(item) -> int:
    name = _stem(item.nodeid)
    return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)


@pytest.hookimpl(optionalhook=True)  # xdist's hook: absent with `-p no:xdist` (PYTEST_WORKERS=0)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, but the tests of the `SPLIT` files each a unit of work of their own."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FilesAndLongTests(LoadFileScheduling):  # `_split_scope` is xdist's own hook for this (pinned: 3.8.0)
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if _stem(nodeid) in SPLIT else super()._split_scope(nodeid)

    return FilesAndLongTests(config, log)


def pytest_collection_modifyitems(config, items):
    items.sort(key=_file_order)  # stable: tests keep their order within a file
    node = _gpu_node()
    if node is not None and node.gpus > 0:
        return
    why = (node.gpu_problem if node is not None else None) or "no NVIDIA GPU with a driver on this machine"
    skip = pytest.mark.skip(reason=f"needs a GPU that DALI and torch both use: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _cpu_routes_unless_gpu_test(request, monkeypatch):
    """Tests not marked `gpu` assume CPU routes (torchcodec, DALI's CPU decoder, batches on CPU): pin them, so
    `make test` passes on a GPU node too. The switch reaches subprocesses (CLI, SLURM, multi-rank tests)."""
    if "gpu" not in request.keywords:
        monkeypatch.setenv("DALI_STREAM_CPU_ONLY", "1")


@pytest.fixture(autouse=True)
def _spill_whatever_the_drive_has_free(monkeypatch):
    """The decoded-frame cache's folder stops being written where its drive is nearly full (5 % of it by default):
    tests that spill frames are not about the drive the tests run on, so they leave no floor (the test of the floor
    sets its own). The setting reaches subprocesses."""
    monkeypatch.setenv("DALI_STREAM_SPILL_KEEP_FREE_BYTES", "0")


@pytest.fixture(scope="session")
def four_codec_dataset(tmp_path_factory):
    """h264 (B-frames), hevc, av1, vp9 cameras; episodes start mid-GOP; several files and chunks per camera."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=10, min_length=12, max_length=40, gop=16, episodes_per_file=3, chunks_size=2,
                      cameras=parse_cameras("front:h264,side:hevc,wrist:av1,top:vp9"), seed=1)
    return write_sample(tmp_path_factory.mktemp("ds") / "four_codecs", spec)


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory):
    """Two cameras (h264 and vp9; `decode="dali-cpu"` sends the vp9 one through DALI's CPU decoder), short episodes:
    fast loops."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=7, min_length=8, max_length=20, gop=8, episodes_per_file=3,
                      cameras=parse_cameras("front:h264,top:vp9"), seed=2)
    return write_sample(tmp_path_factory.mktemp("ds") / "small", spec)


@pytest.fixture(scope="session")
def embodiments(tmp_path_factory):
    """Three datasets of different embodiments for mixtures, each painting its own episode ids (`id_offset`):
    arm6 (front h264 + wrist av1, 96x128, 30 fps, 6-dof), arm7 (top av1, 96x128, 10 fps, 7-dof, ids from 100) and
    big (front h264 at 120x160, 30 fps, 6-dof, ids from 200)."""
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    root = tmp_path_factory.mktemp("embodiments")
    specs = {
        "arm6": SampleSpec(episodes=6, min_length=10, max_length=24, gop=8, episodes_per_file=3,
                           cameras=parse_cameras("front:h264,wrist:av1"), seed=21),
        "arm7": SampleSpec(episodes=5, min_length=8, max_length=16, gop=4, episodes_per_file=2, fps=10,
                           cameras=parse_cameras("top:av1"), state_dim=7, id_offset=100, seed=22),
        "big": SampleSpec(episodes=4, min_length=8, max_length=14, gop=8, episodes_per_file=2, height=120,
                          width=160, cameras=parse_cameras("front:h264"), id_offset=200, seed=23),
    }
    return {name: write_sample(root / name, spec) for name, spec in specs.items()}
