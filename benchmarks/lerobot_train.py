"""`make test-lerobot`: lerobot's own ACT and Diffusion policies trained by `dali-stream train` on StreamLoader batches
in an environment where lerobot imports (`make test-lerobot` builds one).

    LEROBOT_VENV/bin/python benchmarks/lerobot_train.py --out benchmarks/results/cpu-2core-lerobot-train

Two datasets, written here by the sample writer: the demo sample (`make demo`'s: H.264, AV1 and VP9 cameras at
128x96) and one written as lerobot 0.6.1's recorder writes it (two AV1 cameras at 160x128, lerobot's encoder
options); and a mixture of two embodiments (`MIXTURES`: a 6-dof arm with front and wrist cameras, a 7-dof arm with
one top camera mapped onto front, its frames weighted 2), the policy built from its `MixtureMeta` (merged stats,
the state padded to 7, the wrist camera zeros in the 7-dof arm's samples). Per policy and dataset: `--steps` optimizer steps on the CPU, the loss logged every `--log-every` steps,
then a resume from the last checkpoint for `--resume-steps` more. Checked: the loss falls (the mean of the last
three logged losses below the mean of the first three) and the resumed run starts at the checkpoint's step and
batch. Results: one JSON per run and a summary table (`summary.md`); exit 1 when a check fails. The policies'
pretrained ImageNet backbones are not downloaded (no internet here): `pretrained_backbone_weights=null`.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOSS = re.compile(r"step (\d+) epoch \d+ loss ([0-9.]+)")
WAIT = re.compile(r"data wait (\d+)%")
DATASETS = {
    "demo-sample": ["--episodes", "36"],
    "lerobot-recorder-av1": ["--recorder", "lerobot", "--cameras", "front:av1,wrist:av1", "--height", "128",
                             "--width", "160", "--episodes", "12"],
}
# mixtures: name -> (member -> (make-sample arguments, its entry in the mixture file))
MIXTURES = {
    "mixture-6dof-7dof": {
        "arm6": (["--episodes", "12", "--cameras", "front:h264,wrist:av1"], {"weight": 1.0}),
        "arm7": (["--episodes", "8", "--cameras", "top:av1", "--state-dim", "7", "--id-offset", "100"],
                 {"weight": 2.0, "keys": {"observation.images.top": "observation.images.front"}}),
    },
}


def write_mixture(root: Path, members: dict) -> Path:
    """The members of a `MIXTURES` entry under `root` (written once) and the mixture file beside them."""
    for member, (spec, _) in members.items():
        if not (root / member / "meta/info.json").exists():
            subprocess.run([sys.executable, "-m", "dali_stream", "make-sample", str(root / member), "--overwrite",
                            *spec], check=True, cwd=REPO)
    path = root / "mixture.json"
    path.write_text(json.dumps({"members": [{"source": member, "name": member, **entry}
                                            for member, (_, entry) in members.items()]}, indent=2))
    return path


def train(dataset: Path, policy: str, steps: int, log_every: int, ckpt: Path, *extra: str) -> tuple[str, float]:
    cmd = [sys.executable, "-m", "dali_stream", "train", str(dataset), "--policy", policy, "--decode", "cpu",
           "--lerobot-arg", "pretrained_backbone_weights=null", "--batch-size", "8", "--steps", str(steps),
           "--log-every", str(log_every), "--checkpoint-dir", str(ckpt), "--checkpoint-every", str(steps), *extra]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return proc.stdout, time.perf_counter() - t0


SNIPPET_STEPS = 3


def readme_snippet(root: Path) -> str:
    """The README's lerobot snippet ("Switching from `LeRobotDataset`"), run as written but for what this machine needs: the demo sample for the Hub
    id, no ImageNet backbone download, a few steps."""
    import re as _re

    text = (REPO / "README.md").read_text()
    code = next(b for b in _re.findall(r"```python\n(.*?)```", text, flags=_re.S) if "make_policy(" in b)
    code = code.replace('"lerobot/aloha_sim_insertion_human"', repr(str(root)))
    code = code.replace("push_to_hub=False)", "push_to_hub=False, pretrained_backbone_weights=None)")
    code = code.replace("    if step % 100 == 0:", f"    if step == {SNIPPET_STEPS}:\n        break\n    if step % 100 == 0:")
    try:
        exec(compile(code, "README.md training snippet", "exec"), {})
    except Exception as exc:  # noqa: BLE001 - reported in the summary, and the exit status
        return f"failed: {type(exc).__name__}: {exc}"
    return "ran"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="benchmarks/results/cpu-2core-lerobot-train")
    ap.add_argument("--work", default=".demo/lerobot-train", help="where the datasets and checkpoints go")
    ap.add_argument("--policies", default="act,diffusion")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--resume-steps", type=int, default=3)
    ap.add_argument("--log-every", type=int, default=3)
    args = ap.parse_args()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    import lerobot

    rows, failed = [], []
    sources = {}
    for name, spec in DATASETS.items():
        root = work / name
        if not (root / "meta/info.json").exists():
            subprocess.run([sys.executable, "-m", "dali_stream", "make-sample", str(root), "--overwrite", *spec],
                           check=True, cwd=REPO)
        sources[name] = root
    for name, members in MIXTURES.items():
        sources[name] = write_mixture(work / name, members)
    for name, root in sources.items():
        for policy in args.policies.split(","):
            ckpt = work / "checkpoints" / f"{name}-{policy}"
            stdout, seconds = train(root, policy, args.steps, args.log_every, ckpt)
            losses = [(int(s), float(v)) for s, v in LOSS.findall(stdout)]
            resumed, _ = train(root, policy, args.steps + args.resume_steps, args.resume_steps, ckpt,
                               "--resume-from", str(ckpt))
            first = sum(v for _, v in losses[:3]) / 3
            last = sum(v for _, v in losses[-3:]) / 3
            resumed_ok = f"resumed from step {args.steps}: epoch 0, batch {args.steps}" in resumed
            run = {"dataset": name, "policy": policy, "steps": args.steps, "batch_size": 8, "losses": losses,
                   "data_wait_pct": [int(w) for w in WAIT.findall(stdout)],
                   "first_3_mean": first, "last_3_mean": last, "falls": last < first, "seconds": seconds,
                   "resumed": resumed_ok, "resume_log": resumed.strip().splitlines()[-3:],
                   "lerobot": lerobot.__version__, "python": sys.version.split()[0]}
            (out / f"{name}-{policy}.json").write_text(json.dumps(run, indent=1))
            rows.append(run)
            if not (run["falls"] and resumed_ok):
                failed.append(f"{name}/{policy}: loss {first:.4f} -> {last:.4f}, resumed {resumed_ok}")
            print(f"{name} {policy}: loss {first:.4f} -> {last:.4f} in {args.steps} steps ({seconds:.0f} s); "
                  f"resumed at step {args.steps}: {resumed_ok}", flush=True)
    lines = [f"# lerobot {lerobot.__version__} policies on StreamLoader batches (dali-stream train, CPU, batch 8)",
             "", "| dataset | policy | steps | loss, first 3 logged | loss, last 3 logged | falls | resumed | s |",
             "|---|---|---|---|---|---|---|---|"]
    lines += [f"| {r['dataset']} | {r['policy']} | {r['steps']} | {r['first_3_mean']:.4f} | {r['last_3_mean']:.4f} | "
              f"{r['falls']} | {r['resumed']} | {r['seconds']:.0f} |" for r in rows]
    snippet = readme_snippet(work / "demo-sample")
    lines += ["", f"README's training snippet (ACT, {SNIPPET_STEPS} steps on the demo sample): {snippet}"]
    if snippet != "ran":
        failed.append(f"README snippet: {snippet}")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    for line in failed:
        print(f"FAILED {line}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
