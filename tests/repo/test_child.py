"""The `child` marker (tests/support/child.py): a test that ends its process is a named failure with its output, not the
end of the test run; one that passes in its child passes."""

from __future__ import annotations

import os

import pytest

from tests.support.child import in_child, run_in_child, verdict

TARGET = "tests/repo/test_child.py::test_target_in_a_child"


@pytest.mark.child
def test_target_in_a_child():
    """Runs in a child (the marker); there, with DALI_STREAM_TEST_CRASH=1, it ends the process as PyNvVideoCodec
    does on a failed driver call."""
    assert in_child()
    print("child ran", flush=True)
    if os.environ.get("DALI_STREAM_TEST_CRASH") == "1":
        os._exit(1)


def test_a_process_that_ends_itself_is_a_named_failure(tmp_path):
    rc, output = run_in_child(TARGET, tmp_path / "crash", env={"DALI_STREAM_TEST_CRASH": "1"})
    why = verdict(TARGET, rc, output)
    assert rc == 1 and why is not None
    assert "exit status 1 before pytest's summary: the process ended itself" in why and "child ran" in why


def test_a_passing_child_passes(tmp_path):
    rc, output = run_in_child(TARGET, tmp_path / "ok")
    assert rc == 0 and verdict(TARGET, rc, output) is None and "1 passed" in output
