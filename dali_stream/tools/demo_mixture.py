"""`dali-stream demo --mixture` (or `demo MIXTURE.json`): stream a mixture of datasets of different embodiments.

With `--mixture`, two sample datasets are written under the demo folder (once) with a mixture file beside them:
`arm6`, a 30 fps arm with a front (H.264) and a wrist (AV1) camera and a 6-dof state, and `arm7`, a 10 fps arm
with one top camera (AV1, mapped onto the mixture's front camera) and a 7-dof state, weighted 2 (its frames
drawn twice as often). The summary shows each member's part of the samples streamed against its part of an epoch
(what `share=` sets, or frames x weight over the members' sum), the
route of each camera key, the masks (arm7 has no wrist camera; arm6's vectors are padded to 7), and the
painted ids of the last batch's frames, member by member.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable

DEMO_MEMBERS: dict[str, dict[str, Any]] = {
    "arm6": dict(episodes=12, min_length=40, max_length=90, cameras="front:h264,wrist:av1", fps=30, state_dim=6),
    "arm7": dict(episodes=10, min_length=15, max_length=30, cameras="top:av1", fps=10, state_dim=7, id_offset=1000),
}
DEMO_MIXTURE = {"members": [{"source": "arm6", "name": "arm6"},
                            {"source": "arm7", "name": "arm7", "weight": 2.0,
                             "keys": {"observation.images.top": "observation.images.front"}}]}


def write_demo_mixture(root: Path, write: Callable[[Path, Any], None]) -> Path:
    """The demo's members under `root` (each written with `write(path, spec)` when missing) and its mixture file;
    returns the file's path."""
    from .sample_data import SampleSpec, parse_cameras

    for name, settings in DEMO_MEMBERS.items():
        if not (root / name / "meta/info.json").exists():
            write(root / name, SampleSpec(**{**settings, "cameras": parse_cameras(settings["cameras"])}))
    path = root / "mixture.json"
    path.write_text(json.dumps(DEMO_MIXTURE, indent=2))
    return path


def run(path: str, batches: int, settings: dict[str, Any], seed: int, action_steps: int, console) -> int:
    """Stream `batches` batches of the mixture file `path` (an action window of `action_steps` steps of 0.1 s:
    whole frames at 10 and 30 fps) and print what they held."""
    import numpy as np
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from ..loader import StreamLoader
    from ..loader.source_setup import epoch_shares
    from ..mixture import load_mixture
    from .paint import UnreadableIds, read_ids
    from .sample_defaults import painted_offset

    mixture = load_mixture(path)
    t0 = time.perf_counter()
    # every member resolves the window's seconds at its own fps: 0.1 s steps are whole frames at 10 and 30 fps
    loader = StreamLoader(mixture, **settings, seed=seed,
                          delta_timestamps={"action": [i / 10 for i in range(max(1, action_steps))]})
    setup_s = time.perf_counter() - t0
    names = loader.meta.member_names
    counts = np.zeros(len(names), dtype=np.int64)
    samples = done = 0
    batch: dict[str, Any] = {}
    with Progress(TextColumn("[bold]streaming the mixture"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[rate]}"), console=console) as bar:
        task = bar.add_task("stream", total=batches, rate="")
        t_stream = time.perf_counter()
        while done < batches:
            for batch in loader:
                counts += np.bincount(batch["dataset_index"].numpy(), minlength=len(names))
                samples += len(batch["task"])
                done += 1
                bar.update(task, advance=1, rate=f"{samples / (time.perf_counter() - t_stream):.0f} samples/s")
                if done >= batches:
                    break
        stream_s = time.perf_counter() - t_stream
    summary = Table(title="dali_stream mixture demo", show_header=False)
    target = epoch_shares(loader.catalog)
    summary.add_row("mixture", f"{path}: " + ", ".join(
        f"{m.name} ({len(m.episodes)} episodes, {m.frames} frames, {m.meta.fps:g} fps, "
        + (f"share {m.share:g})" if m.share is not None else f"weight {m.weight:g})") for m in loader.catalog.members))
    summary.add_row("how a member's part of an epoch is set", "share= gives it outright; weight= (default 1) counts "
                    "each frame that many times: part = frames x weight / the sum over members (docs/mixtures.md)")
    summary.add_row("batches x batch size", f"{done} x {settings['batch_size']} on {loader.device}")
    summary.add_row("throughput", f"{samples / stream_s:.0f} samples/s (loader set-up {setup_s:.2f} s)")
    summary.add_row(f"part of the samples: in these {done} batches, and each epoch's", ", ".join(
        f"{n}: {c / max(1, samples):.2f} here, {t:.2f} an epoch" for n, c, t in zip(names, counts, target)))
    for key, route in loader.routes.items():
        summary.add_row(f"decode {key}", f"{route} (members alone: " + ", ".join(
            f"{n}: {r.get(key, '-')}" for n, r in loader.member_routes.items()) + ")")
    masks = sorted(k for k in batch if k.endswith(("_is_missing", "_dim_is_pad")))
    summary.add_row("masks in the batch", ", ".join(masks) or "none")
    checked = []
    for j in range(len(batch["task"])):  # the last batch, sample by sample
        m = int(batch["dataset_index"][j])
        offset = painted_offset(loader.catalog.members[m].meta.info)
        want = (int(batch["episode_index"][j]) + offset, int(batch["frame_index"][j]))
        for key in loader.routes:
            if batch.get(f"{key}_is_missing") is not None and bool(batch[f"{key}_is_missing"][j]):
                continue
            try:
                ok = read_ids(batch[key][j]) == want
            except UnreadableIds:
                ok = False
            checked.append(ok)
    summary.add_row("last batch's frames", f"{sum(checked)} of {len(checked)} show their sample's painted "
                                           "(episode + member offset, frame)")
    summary.add_row("resume state", json.dumps({k: v for k, v in loader.state_dict().items()
                                                if k in ("epoch", "batches_consumed")}))
    console.print(summary)
    loader.close()
    return 0 if all(checked) else 1
