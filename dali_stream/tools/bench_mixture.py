"""`dali-stream bench MIXTURE.json`: a mixture's samples/s against what its members give alone, in one run.

Each round streams every member alone and then the mixture, through the same steady window (`bench.stream`),
on the same loader settings, each member's cameras on the routes the mixture gives them (one route per key);
odd rounds go in the reverse order, so drift of the machine (another process,
thermal state) falls on both sides. A mixture's batch takes `share_m` of its samples from member m, so if
mixing cost nothing it would deliver

    expected = 1 / sum_m(share_m / rate_m)

samples/s (the members' rates weighted by their shares: each sample costs what it costs in its own member).
`ratio` = the mixture's rate / expected, per round and as the median; `share_m` is what the mixture's window
drew (its `dataset_index`), beside the epoch's target (frames x weight, `plan.mixture_epoch`).

`--gpu-load` runs the bfloat16 matmul loop (`bench_gpu.GpuLoad`) beside every window, the members' and the
mixture's alike, so the ratio compares streams under the same load; `gpu_load` records its TFLOP/s alone and beside
each stream. NVDEC's utilisation is read beside the mixture's last window where a camera decodes on NVDEC.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any

import numpy as np

from .bench import GPU_LOAD_ALONE_S, BenchConfig, RssSampler, _device, _versions, mode_deltas, stream
from .bench_gpu import GpuLoad, NvdecUtilisation


def _member_deltas(member, deltas: dict[str, list[float]]) -> dict[str, list[float]]:
    """The mixture's windows under a member's own keys (its own seconds where it gives them)."""
    out = {}
    for key, seconds in deltas.items():
        own = member.own.get(key)
        if own is not None:
            out[own] = list(member.delta_timestamps.get(key, seconds))
    return out


def run_mixture(cfg: BenchConfig, progress=None, measured=None, rounds: int = 2, estimated=None) -> dict[str, Any]:
    """Bench the mixture file `cfg.dataset` against its members (module doc); the result dict has the usual
    `samples_per_s` and friends of the mixture's last window, and `mixture` with every round's rates. (`estimated`:
    `bench.run`'s, not given: its rounds are not estimated.)"""
    from ..loader import StreamLoader
    from ..loader.source_setup import epoch_shares
    from ..meta.catalog import Catalog
    from ..mixture import load_mixture
    from ..plan.selection import select

    t_run = time.perf_counter()
    mixture = load_mixture(cfg.dataset)
    settings = dict(cfg.loader.__dict__)  # the loader's settings, for each member alone too
    per_round: list[dict[str, Any]] = []
    got: dict[str, Any] = {}
    loader = None
    with RssSampler() as rss:
        # the mode's windows in the mixture's keys, then the routes a loader with them takes (they may depend on
        # the frames per sample: `decode.speed`)
        keys = Catalog.open(mixture, select).fields
        deltas = mode_deltas(cfg.mode, [k for k, f in keys.items() if f.visual], keys)
        probe = StreamLoader(mixture, config=cfg.loader, delta_timestamps=deltas, drop_last=True)
        catalog = probe.catalog
        members = catalog.members
        targets = epoch_shares(catalog)
        # each member alone decodes its cameras the way the mixture does (a key takes one route: `mixture_routes`;
        # `Route.choice`: the decode= setting that gives a member alone that route)
        as_mixed = {m.name: {m.own[k]: r.choice for k, r in probe.decode_routes.items() if k in m.own}
                    for m in members}
        nvdec = probe.dali_device if any(r.on_gpu for r in probe.decode_routes.values()) else None
        device = probe.device
        probe.close()
        load = GpuLoad(device) if cfg.gpu_load else None
        gpu_load: dict[str, Any] | None = None
        if load is not None:
            if progress:
                progress("gpu load alone")
            gpu_load = {**load.alone(GPU_LOAD_ALONE_S), "beside": []}
        utilisation = None
        for r in range(rounds):
            order: list[Any] = [*members, None]  # None: the mixture
            if r % 2:
                order.reverse()
            rates: dict[str, float] = {}
            for who in order:
                name = "mixture" if who is None else who.name
                if progress:
                    progress(f"round {r + 1}/{rounds}: {name}")
                beside = load if load is not None else contextlib.nullcontext()
                if who is None:
                    loader = StreamLoader(mixture, config=cfg.loader, delta_timestamps=deltas, drop_last=True)
                    with NvdecUtilisation(nvdec) as utilisation, beside:
                        got = stream(loader, cfg, catalog.video_keys)
                    window = got.get("window", [])
                    drawn = np.concatenate([catalog.member_index(loader.batch_plan(e, i).episodes)
                                            for e, i in window]) if window else np.zeros(0, np.int64)
                    shares = np.bincount(drawn, minlength=len(members)) / max(1, len(drawn))
                    rates["mixture"] = got.get("samples_per_s", 0.0)
                    if measured is not None and got.get("samples"):
                        measured(got)
                else:
                    spec = mixture.members[who.index]
                    alone = StreamLoader(spec.source, **{
                        **settings, "delta_timestamps": _member_deltas(who, deltas), "episodes": list(who.episodes),
                        "drop_last": True, "data_files_root": spec.data_files_root, "revision": spec.revision,
                        "decode": as_mixed[who.name],
                        "storage_options": {**settings["storage_options"], **(spec.storage_options or {})},
                        "tolerance_s": who.tolerance_s if who.tolerance_s is not None else cfg.loader.tolerance_s})
                    with beside:
                        rates[name] = stream(alone, cfg, [who.own[k] for k in catalog.video_keys
                                                          if k in who.own]).get("samples_per_s", 0.0)
                    alone.close()
                if load is not None and gpu_load is not None:
                    gpu_load["beside"].append({"round": r + 1, "stream": name, "tflops": load.tflops})
            expected = 1.0 / sum(s / rates[m.name] for s, m in zip(shares, members) if s > 0 and rates[m.name])
            per_round.append({"order": [("mixture" if w is None else w.name) for w in order], "samples_per_s": rates,
                              "window_shares": dict(zip((m.name for m in members), shares.round(4).tolist())),
                              "expected_samples_per_s": expected, "ratio": rates["mixture"] / expected})
            if loader is not None and r < rounds - 1:
                loader.close()
    assert loader is not None
    ratios = [p["ratio"] for p in per_round]
    result: dict[str, Any] = {
        "config": cfg.record() | {"mixture": mixture.describe(), "num_workers": loader.resolved.num_workers},
        "samples_per_s": got.get("samples_per_s", 0.0), "frames_per_s_node": got.get("frames_per_s_node", 0.0),
        "first_batch_latency_s": got.get("first_batch_latency_s"),
        **{k: got.get(k) for k in ("p50_batch_latency_ms", "p95_batch_latency_ms", "p99_batch_latency_ms")},
        "peak_rss_gb": rss.peak / 2**30, "routes": dict(loader.routes), "route_reasons": dict(loader.route_reasons),
        "member_routes": loader.member_routes, "data_wait": loader.data_wait(), "device": _device(loader),
        "versions": _versions(), "memory_budget": loader.memory_budget(), "notes": [],
        "rank": loader.world.rank, "world_size": loader.world.world_size,
        "mixture": {"rounds": per_round, "ratio_median": statistics.median(ratios),
                    "epoch_shares": dict(zip((m.name for m in members), targets.round(4).tolist())),
                    "note": "ratio = the mixture's samples/s / the members' own rates weighted by the shares the "
                            "mixture's window drew (1 / sum(share / rate)); each round measures every member alone "
                            "and the mixture, odd rounds in reverse order"},
        "limit_ratio": None, "baseline_ratio": None, "nvdec_limit_ratio": None, "gpu_over_cpu_all_cores": None,
        "gpu_load": _load_summary(gpu_load),
        "nvdec_utilisation": utilisation.result() if utilisation is not None and nvdec is not None else None,
    }
    loader.close()
    result["wallclock_s"] = time.perf_counter() - t_run
    return result


def _load_summary(gpu_load: dict[str, Any] | None) -> dict[str, Any] | None:
    """`gpu_load` with the single path's keys (`bench.run`): beside the mixture's last window, and its ratio to the
    loop alone; every window's figure stays in `beside`."""
    if gpu_load is None:
        return None
    mixed = [b["tflops"] for b in gpu_load["beside"] if b["stream"] == "mixture"]
    return GpuLoad.beside(gpu_load, mixed[-1] if mixed else None)
