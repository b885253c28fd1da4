"""`dali-stream demo`: the main job on a sample it writes (`make demo`)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from .cli_common import DEMO_SETTINGS, sample_spec, write_with_progress
from .flags import checked_settings, loader_settings, require_at_least


def cmd_demo(args: argparse.Namespace) -> int:
    from rich.console import Console

    from ..errors import DaliStreamError
    from ..loader import open_meta
    from ..meta.dataset import INFO_PATH
    from .sample_data import SAMPLE_KEY

    checked_settings(args, DEMO_SETTINGS)  # every flag checked before a sample is written
    require_at_least(args, batches=1, action_horizon=1)
    console = Console()
    if args.mixture or args.dataset.endswith(".json"):  # a mixture of datasets (`demo_mixture`)
        from . import demo_mixture

        def write(out: Path, spec) -> None:
            write_with_progress(out, spec, True, console, args.workers)

        path = args.dataset if args.dataset.endswith(".json") else \
            str(demo_mixture.write_demo_mixture(Path(args.dataset), write))
        return demo_mixture.run(path, args.batches, loader_settings(args, DEMO_SETTINGS), args.seed,
                                args.action_horizon, console)
    if _streamed(args.dataset):  # a Hub id or a URL: streamed as it is, nothing written
        try:
            meta = open_meta(args.dataset)
        except DaliStreamError:
            if "://" not in args.dataset:  # "out/sample" may have meant a new folder for the sample
                console.print(f"[yellow]{args.dataset} names no local folder, so demo read it as a Hub dataset id; "
                              f"to write the sample into a new folder of that name, pass ./{args.dataset}[/]")
            raise
        console.print(f"streaming {args.dataset} ({meta.source}); nothing is written")
        return _stream(args, args.dataset, meta, SAMPLE_KEY in meta.info, console)
    root = Path(args.dataset)
    spec = sample_spec(args)
    if args.overwrite or not (root / INFO_PATH).exists():
        if root.exists() and not args.overwrite and (root.is_file() or any(root.iterdir())):
            console.print(f"[red]{root} exists but is not a dataset (no {INFO_PATH}): pass --overwrite to replace it "
                          "with the sample, or another folder[/]")
            return 2
        write_with_progress(root, spec, True, console, args.workers)
    else:
        written = json.loads((root / INFO_PATH).read_text()).get(SAMPLE_KEY)
        console.print(f"using the sample dataset already at {root}" if written is not None else
                      f"streaming the dataset at {root} (not a dali-stream sample: its frames carry no painted ids to "
                      "check)")
        if written is not None:
            differ = sorted(k for k, v in json.loads(json.dumps(spec.record())).items() if written.get(k, v) != v)
            if differ:
                console.print(f"[yellow]it was written with other sample settings ({', '.join(differ)}) than these "
                              "flags ask for; pass --overwrite to write it again with them[/]")
    meta = open_meta(str(root))
    return _stream(args, root, meta, SAMPLE_KEY in meta.info, console)


def _streamed(dataset: str) -> bool:
    """Whether demo's argument names a dataset to stream rather than a folder to write the sample into: a URL, or a
    Hub id with no local folder of that name (as `StreamLoader` reads one: `source.storage.resolve_source`)."""
    from ..source.storage import resolve_source

    return "://" in dataset or resolve_source(dataset) != dataset


def _stream(args: argparse.Namespace, root, meta, sample: bool, console) -> int:
    """Stream `args.batches` batches of the opened dataset `meta` and print the summary; `sample`: it is one the
    sample writer wrote, whose RGB cameras carry painted ids to check."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from ..loader import StreamLoader

    t0 = time.perf_counter()
    loader = StreamLoader(meta, **loader_settings(args, DEMO_SETTINGS), seed=args.seed,
                          delta_timestamps={"action": [i / meta.fps for i in range(args.action_horizon)]})
    setup_s = time.perf_counter() - t0
    # the painted ids a sample's RGB video cameras carry, checked on the last sample (None: no such camera)
    first_key = next((k for k in loader.meta.video_keys if loader.meta.cameras[k].depth is None), None) \
        if sample else None
    samples = 0
    seen: set[tuple[int, int]] = set()
    with Progress(TextColumn("[bold]streaming batches"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[rate]}"), console=console) as bar:
        task = bar.add_task("stream", total=args.batches, rate="")
        t_stream = time.perf_counter()
        first_s = None
        done = 0
        while done < args.batches:
            for batch in loader:
                if first_s is None:
                    first_s = time.perf_counter() - t_stream
                samples += len(batch["task"])
                seen.update(zip(batch["episode_index"].tolist(), batch["frame_index"].tolist()))
                done += 1
                bar.update(task, advance=1,
                           rate=f"{samples / (time.perf_counter() - t_stream):.0f} samples/s")
                if done >= args.batches:
                    break
        stream_s = time.perf_counter() - t_stream
    from .paint import UnreadableIds, read_ids

    ids: object = None
    if first_key is not None:
        try:
            ids = read_ids(batch[first_key][0])
        except UnreadableIds as exc:  # e.g. a sample written by an older dali_stream (no check row)
            ids = f"unreadable ({exc}; delete {root} to write a fresh sample)"
    summary = Table(title="dali_stream demo", show_header=False)
    summary.add_row("dataset", f"{root} ({loader.meta.num_episodes} episodes, {loader.meta.total_frames} frames)")
    summary.add_row("batches x batch size", f"{done} x {args.batch_size} on {loader.device}")
    summary.add_row("throughput", f"{samples / stream_s:.0f} samples/s")
    summary.add_row("first-batch latency", f"{first_s:.2f} s (loader set-up {setup_s:.2f} s)")
    for key, route in loader.routes.items():
        codec = loader.meta.cameras[key].codec if key in loader.meta.cameras else "images in the tables"
        summary.add_row(f"decode {key}", f"{codec} -> {route}")
    summary.add_row("GPU", demo_gpu_note(loader.node, loader.decode_routes, loader.route_reasons))
    summary.add_row("distinct frames seen", f"{len(seen)} of {loader.meta.total_frames}")
    if first_key is not None:
        summary.add_row("last sample check", f"{first_key} shows painted (episode, frame) = {ids}, table says "
                        f"({int(batch['episode_index'][0])}, {int(batch['frame_index'][0])})")
    summary.add_row("resume state", json.dumps({k: v for k, v in loader.state_dict().items()
                                                if k in ("epoch", "batches_consumed")}))
    console.print(summary)
    return 0


def demo_gpu_note(node, routes: dict[str, Any], reasons: dict[str, str]) -> str:
    """What the demo says of the GPU: none usable (and why), NVDEC in use, or why every camera runs on the CPU
    here and the command that shows NVDEC (the sample's 128x96 cameras are below NVDEC's minimum for VP9/AV1/HEVC,
    and `auto` keeps unproven kinds of stream on the CPU)."""
    if node.gpus == 0:
        return f"none usable here ({node.gpu_problem or 'no CUDA GPU that DALI and torch both see'}): CPU routes"
    name = node.gpu.name if node.gpu is not None else "a CUDA GPU"
    nvdec = sorted(k for k, r in routes.items() if r.on_gpu)
    if nvdec:
        return f"{name}: NVDEC decodes {', '.join(nvdec)}"
    why = "; ".join(f"{k.rsplit('.', 1)[-1]}: {reasons[k]}" for k in routes)
    return (f"{name} is usable, but every camera of this sample decodes on the CPU ({why}). To see NVDEC: "
            "dali-stream demo .demo/nvdec --height 480 --width 640 --cameras front:h264,side:hevc --decode gpu")
