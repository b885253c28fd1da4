"""The README's Python snippets run as written (issue 29: `cache_bytes=None` in the Use snippet failed as copied),
on a sample dataset standing in for the paths they name ("path/to/dataset", "lerobot/pusht": 206 episodes, as
the snippets' episode splits expect, and the camera and fps they use)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
SOURCES = ('"path/to/dataset"', '"lerobot/pusht"')


def snippets() -> list[str]:
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 2, "the README's Use section holds the StreamLoader and LoaderConfig snippets"
    return blocks


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory):
    from dali_stream.tools.sample_data import SampleSpec, parse_cameras, write_sample

    spec = SampleSpec(episodes=206, min_length=4, max_length=6, height=64, width=64, gop=4, episodes_per_file=52,
                      cameras=parse_cameras("front:h264"), seed=7)
    return write_sample(tmp_path_factory.mktemp("readme") / "stand_in", spec)


@pytest.mark.parametrize("n", range(2))
def test_the_readme_snippets_run_as_written(stand_in, n):
    code = snippets()[n]
    named = [s for s in SOURCES if s in code]
    assert named, f"snippet {n} names none of {SOURCES}: update this test with the README"
    for source in named:
        code = code.replace(source, repr(str(stand_in)))
    scope: dict = {}
    exec(compile(code, f"README.md python block {n + 1}", "exec"), scope)
    for loader in (v for v in scope.values() if type(v).__name__ == "StreamLoader"):
        loader.close()


def test_the_mixtures_snippet_runs_as_written(embodiments, capsys):
    """README, Mixtures: the snippet over `make demo-mixture`'s members, stood in for by the test's embodiments
    (the same cameras, fps and state sizes)."""
    (code,) = [b for b in snippets() if "Mixture(" in b]
    for name in ("arm6", "arm7"):
        code = code.replace(f'".demo/mixture/{name}"', repr(str(embodiments[name])))
    exec(compile(code, "README.md Mixtures block", "exec"), {})
    printed = capsys.readouterr().out
    assert "tensor(" in printed and printed.count("\n") >= 4
