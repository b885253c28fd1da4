"""The benchmarks' A/B harness (`benchmarks/_common.py`): a run of an earlier commit runs that commit's code. `-c`
and `-m` put the working folder first on `sys.path`, ahead of PYTHONPATH, so a child started from this checkout
with PYTHONPATH at the other tree would import this checkout's `dali_stream` and compare a tree with itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from _common import child, earlier_tree  # noqa: E402

WHERE = "import dali_stream; RESULT = {'file': dali_stream.__file__}"


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs the repository's git history")
def test_an_earlier_tree_runs_its_own_code_both_ways_the_benchmarks_start_it():
    with earlier_tree("HEAD", ROOT) as tree:
        assert tree is not None and (tree / "dali_stream" / "__init__.py").exists()
        # host_path.py, frame_cache.py: the tree as the child's working folder
        assert Path(child(WHERE, cwd=tree)["file"]).is_relative_to(tree)
        # ab_trees.py: `python -P` from this checkout, PYTHONPATH at the tree
        done = subprocess.run([sys.executable, "-P", "-c", f"{WHERE}; import json; print(json.dumps(RESULT))"],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
                              check=True)
        assert Path(json.loads(done.stdout)["file"]).is_relative_to(tree)
        # what the harness did before: PYTHONPATH alone loses to the working folder
        done = subprocess.run([sys.executable, "-c", f"{WHERE}; import json; print(json.dumps(RESULT))"],
                              cwd=ROOT, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True,
                              check=True)
        assert Path(json.loads(done.stdout)["file"]).is_relative_to(ROOT)
    assert not tree.exists()
    with earlier_tree(None, ROOT) as none:
        assert none is None
