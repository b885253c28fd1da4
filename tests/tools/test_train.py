"""`dali-stream train`: a real training run, a SIGKILL mid-epoch, and a resume that sees exactly the right batches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

TRAIN = [sys.executable, "-m", "dali_stream", "train"]  # as torchrun -m and SLURM run it


def _args(dataset, log, ckpt, *extra):
    return [*TRAIN, str(dataset), "--epochs", "2", "--batch-size", "3", "--pool", "2",
            "--checkpoint-every", "4", "--sample-log", str(log), "--checkpoint-dir", str(ckpt), "--log-every", "5",
            *map(str, extra)]


def _steps(log_dir, rank=0):
    path = Path(log_dir) / f"rank{rank}.jsonl"
    return [json.loads(line)["indices"] for line in path.read_text().splitlines()] if path.exists() else []


def _env():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "SLURM_PROCID", "SLURM_NTASKS"):
        env.pop(key, None)
    return env


def test_sigkill_and_resume_continue_with_the_uninterrupted_batches(small_dataset, tmp_path):
    full = subprocess.run(_args(small_dataset, tmp_path / "full", tmp_path / "ckpt-full"), capture_output=True,
                          text=True, timeout=600, env=_env())
    assert full.returncode == 0, full.stderr[-3000:]
    expected = _steps(tmp_path / "full")
    assert len(expected) > 12 and len(expected) % 4, "the run's last step falls between periodic checkpoints"
    last = (tmp_path / "ckpt-full" / "latest").read_text().strip()
    assert int(last.split("-")[1].split(".")[0]) == len(expected), "the run's last step is checkpointed"

    run = subprocess.Popen(_args(small_dataset, tmp_path / "killed", tmp_path / "ckpt"), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, env=_env())
    deadline = time.time() + 300
    while len(_steps(tmp_path / "killed")) < 10 and time.time() < deadline and run.poll() is None:
        time.sleep(0.05)
    run.send_signal(signal.SIGKILL)
    run.wait()
    done = _steps(tmp_path / "killed")
    assert 10 <= len(done) < len(expected), "killed mid-run"
    latest = (tmp_path / "ckpt" / "latest").read_text().strip()
    saved_step = int(latest.split("-")[1].split(".")[0])
    assert saved_step >= 8

    resumed = subprocess.run(_args(small_dataset, tmp_path / "resumed", tmp_path / "ckpt", "--resume-from",
                                   tmp_path / "ckpt"), capture_output=True, text=True, timeout=600, env=_env())
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resumed from step {saved_step}" in resumed.stdout
    assert done[:saved_step] + _steps(tmp_path / "resumed") == expected


def test_torchrun_two_ranks_train_disjoint_shares(small_dataset, tmp_path):
    """The README's launch line, `torchrun --nproc-per-node N -m dali_stream train DATASET ...`, on two CPU ranks:
    an epoch in equal steps per rank, each on its own share, and one line for both; the recipe is the installed
    package's (no PYTHONPATH)."""
    env = _env()
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           *_args(small_dataset, tmp_path / "log", tmp_path / "ckpt", "--epochs", "1")[1:]],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    r0, r1 = _steps(tmp_path / "log", 0), _steps(tmp_path / "log", 1)
    assert len(r0) == len(r1) > 0, "equal steps per rank"
    own0, own1 = {i for b in r0 for i in b}, {i for b in r1 for i in b}
    assert own0.isdisjoint(own1), "each rank trains on its own share (drop_last: no padding)"
    assert "done:" in proc.stdout
    assert "[rank 0/2]" in proc.stdout and "[rank 1/2]" in proc.stdout and "max over ranks" in proc.stdout
    assert "all 2 ranks together" in proc.stdout


def test_steps_action_chunk_and_the_total_throughput_line(small_dataset, tmp_path):
    """Feature sizes from meta/info.json, a 4-step action chunk, a stop after --steps, one line for all ranks; the
    policy's convolution takes the loader's channels_last frames as they come."""
    proc = subprocess.run(_args(small_dataset, tmp_path / "log", tmp_path / "ckpt", "--steps", "5", "--chunk", "4",
                                "--tolerance-s", "1e-3", "--memory-format", "channels_last"),
                          capture_output=True, text=True, timeout=600, env=_env())
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert len(_steps(tmp_path / "log")) == 5
    assert "done: 5 steps; all 1 ranks together" in proc.stdout and "samples/s" in proc.stdout
    assert "data wait" in proc.stdout and "max over ranks" in proc.stdout, proc.stdout[-2000:]


def test_a_short_run_shows_its_progress_and_writes_no_checkpoint_unasked(small_dataset, tmp_path):
    """A run shorter than --log-every shows rank 0's progress bar (steps of the run, loss, samples/s); without
    --checkpoint-dir it writes nothing where it runs (a `./checkpoints/` folder was left behind), and says so."""
    proc = subprocess.run([*TRAIN, str(small_dataset), "--steps", "6", "--batch-size", "3", "--tolerance-s", "1e-3"],
                          capture_output=True, text=True, timeout=600, env=_env(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "6/6 steps" in proc.stderr and "loss " in proc.stderr and "samples/s" in proc.stderr, proc.stderr[-2000:]
    assert "writes no checkpoints" in proc.stdout
    assert list(tmp_path.iterdir()) == [], list(tmp_path.iterdir())


def test_a_resumed_run_ends_with_the_weights_of_the_uninterrupted_one(small_dataset, tmp_path):
    """8 steps at once, and 4 steps, a checkpoint, then a resume to 8: the same batches in the same order and the
    optimizer's state restored, so the final weights are equal, tensor for tensor (CPU, one thread)."""
    import torch

    def run(ckpt, steps, *extra):
        proc = subprocess.run(_args(small_dataset, tmp_path / f"log-{ckpt}-{steps}", tmp_path / ckpt, "--steps",
                                    steps, *extra), capture_output=True, text=True, timeout=600, env=_env())
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]

    run("straight", 8)
    run("split", 4)
    run("split", 8, "--resume-from", tmp_path / "split")
    straight = torch.load(tmp_path / "straight" / "step-0000008.pt", weights_only=False)
    resumed = torch.load(tmp_path / "split" / "step-0000008.pt", weights_only=False)
    assert straight["loader"] == resumed["loader"]
    assert straight["model"].keys() == resumed["model"].keys()
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name


def test_a_mixture_file_trains_and_resumes(embodiments, tmp_path):
    """The recipe on a mixture of two embodiments (6- and 7-dof, 30 and 10 fps, one camera missing in one member):
    the state comes padded to 7, and a resumed run ends with the uninterrupted run's weights."""
    import torch

    mix = tmp_path / "mix.json"
    mix.write_text(json.dumps({"members": [
        {"source": str(embodiments["arm6"]), "name": "arm6"},
        {"source": str(embodiments["arm7"]), "name": "arm7", "weight": 2,
         "keys": {"observation.images.top": "observation.images.front"}}]}))

    def run(ckpt, steps, *extra):
        proc = subprocess.run(_args(mix, tmp_path / f"log-{ckpt}-{steps}", tmp_path / ckpt, "--steps", steps,
                                    "--chunk", "2", "--tolerance-s", "1e-3", *extra),
                              capture_output=True, text=True, timeout=600, env=_env())
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
        return proc

    assert "done: 8 steps" in run("straight", 8).stdout
    run("split", 4)  # a checkpoint every 4 steps
    run("split", 8, "--resume-from", tmp_path / "split")
    straight = torch.load(tmp_path / "straight" / "step-0000008.pt", weights_only=False)
    resumed = torch.load(tmp_path / "split" / "step-0000008.pt", weights_only=False)
    assert straight["loader"] == resumed["loader"] and "mixture" in straight["loader"]["dataset"]
    for name, tensor in straight["model"].items():
        assert torch.equal(tensor, resumed["model"][name]), name




def test_a_checkpoint_folder_of_another_run_and_a_resume_with_nothing_left_are_said(small_dataset, tmp_path):
    """--checkpoint-dir holding another run's checkpoints (not resumed from there): a warning naming them and the
    fix. --resume-from a run already at --steps: a warning that nothing is trained (and no step is written)."""
    from dali_stream.tools.train import mixed_runs

    first = subprocess.run(_args(small_dataset, tmp_path / "log", tmp_path / "ckpt", "--steps", 4),
                           capture_output=True, text=True, timeout=600, env=_env())
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-3000:]
    assert "another run's checkpoints" not in first.stdout
    said = mixed_runs(str(tmp_path / "ckpt"), None)
    assert said is not None and "step-0000004.pt .. step-0000004.pt" in said and "--resume-from" in said
    assert mixed_runs(str(tmp_path / "ckpt"), tmp_path / "ckpt" / "step-0000004.pt") is None  # resumed from there
    assert mixed_runs(str(tmp_path / "new"), None) is None
    again = subprocess.run(_args(small_dataset, tmp_path / "log2", tmp_path / "ckpt", "--steps", 4, "--resume-from",
                                 tmp_path / "ckpt"), capture_output=True, text=True, timeout=600, env=_env())
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-3000:]
    assert "nothing to train: the run resumed is at step 4" in again.stdout and "--steps above 4" in again.stdout
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("step-*")) == ["step-0000004.pt"]
