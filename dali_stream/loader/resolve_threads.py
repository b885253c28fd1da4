"""Resolvers of `loader.resolve` for how a rank draws and how many threads and processes do the work: the sampling
(`sampling`), the worker and DALI threads and the decoders they keep (`worker_threads`), the open-decoder engines'
threads or processes (`engines`), and lerobot's `image_transforms` and the `augment=` hook (`transforms`). Pure
(`loader.resolve_base`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Mapping

from ..config import LoaderConfig, pool_size
from ..decode.route import OPEN_NVDEC_THREADS, Route
from .resolve_base import Facts, Part

UNKNOWN_ENGINES = 2  # NVDEC engines assumed of a GPU the capability table does not know
MIN_WORKERS = 2  # worker threads of a rank with one or two cores (the 2-core VM's measured default)
MAX_WORKERS = 16  # worker threads at most by default: the most the CPU route was measured with (a 16-core H200 node)
GIVEN = "given"


@dataclass(frozen=True, kw_only=True)
class Sampling(Part):
    drop_last: bool = field(metadata={"what": "an epoch's partial last batch is dropped"})
    pool: int | None = field(metadata={  # the planner's pool size
        "what": "episodes a rank keeps open and draws samples from (None: every episode, a global shuffle)"})
    global_shuffle: bool = field(metadata={"what": "every batch drawn from all of a rank's episodes"})


def sampling(cfg: LoaderConfig) -> Sampling:
    """Whether a partial last batch is dropped, the episodes a rank draws from at once, and whether that is all."""
    why: dict[str, str] = {}
    if cfg.drop_last is not None:
        drop_last, why["drop_last"] = cfg.drop_last, GIVEN
    else:  # lerobot's evaluation loaders keep every sample: an unshuffled pass drops no tail unless asked to
        drop_last = cfg.shuffle
        why["drop_last"] = "shuffle=True drops a partial last batch" if cfg.shuffle else \
            "shuffle=False keeps the partial last batch (an evaluation pass)"
    pool = pool_size(cfg)
    global_shuffle = pool is None and cfg.shuffle
    why["global_shuffle"] = "episode_pool_size='all' with shuffle" if global_shuffle else \
        f"episode_pool_size={cfg.episode_pool_size!r}" + ("" if cfg.shuffle else ", shuffle=False")
    return Sampling(drop_last=drop_last, pool=pool, global_shuffle=global_shuffle, why=why)


@dataclass(frozen=True, kw_only=True)
class Threads(Part):
    num_workers: int = field(metadata={
        "what": "threads that fetch and CPU-decode batches ahead (0: in the calling thread)"})
    nvdec_engines: int = field(metadata={  # 0: no GPU
        "what": "the GPU's video decoding engines the loader plans for"})
    dali_threads: int = field(metadata={"what": "threads of the DALI graph"})
    max_decoders: int = field(metadata={"what": "CPU decoders kept open between batches"})


def worker_threads(cfg: LoaderConfig, facts: Facts, drawn: Sampling) -> Threads:
    """The worker threads, the GPU's NVDEC engines, the DALI graph's threads and the CPU decoders kept open."""
    routes, why = facts.routes, {}
    # Decoding on the CPU scales with its threads (decoders release the interpreter's lock): a core each, one left
    # for the training loop, as docs/training.md advises. Where every camera decodes on the GPU the workers only
    # fetch and lay out: the GPU measurements were taken with MIN_WORKERS.
    if cfg.num_workers is not None:
        workers, why["num_workers"] = cfg.num_workers, GIVEN
    elif routes and all(r.on_gpu for r in routes.values()):
        workers, why["num_workers"] = MIN_WORKERS, "every camera decodes on the GPU: the workers only fetch and lay out"
    else:
        workers = max(MIN_WORKERS, min(MAX_WORKERS, facts.rank_cores - 1))
        why["num_workers"] = (f"the {facts.rank_cores} cores this rank may use less one for the training loop, at "
                              f"least {MIN_WORKERS}, at most {MAX_WORKERS} (the most measured)")
    if not facts.gpu:
        nvdec_engines, why["nvdec_engines"] = 0, "no GPU"
    elif facts.gpu_engines:
        nvdec_engines, why["nvdec_engines"] = facts.gpu_engines, "the GPU's, from the capability table"
    else:
        nvdec_engines = UNKNOWN_ENGINES
        why["nvdec_engines"] = f"{UNKNOWN_ENGINES}: the capability table does not know this GPU"
    # DALI's video decoder runs one decoder instance per pipeline thread, and one instance cannot use more than one
    # NVDEC engine: a thread per engine (H100: 7), not just num_workers. Measured on an H100 with DALI 2.4, the
    # decoder DALI creates for every sample (~8 ms) dominates and 2, 7 or 16 threads cost the same
    # (benchmarks/results/NVIDIA-H100-80GB-HBM3/).
    dali_nvdec = any(r.dali_gpu for r in routes.values())
    dali_threads = max(1, workers, nvdec_engines if dali_nvdec else 0)
    why["dali_threads"] = (f"one per NVDEC engine ({nvdec_engines}), at least num_workers" if dali_nvdec
                           else "num_workers, at least 1")
    cpu_cameras = sum(1 for r in routes.values() if r.torchcodec)
    if cfg.max_decoders is not None:
        max_decoders, why["max_decoders"] = cfg.max_decoders, GIVEN
    else:  # what the builders touch per batch: every distinct segment, every thread
        max_decoders = max(1, workers) * max(1, cpu_cameras) * min(cfg.batch_size, drawn.pool or cfg.batch_size)
        why["max_decoders"] = "num_workers x torchcodec cameras x min(batch_size, pool)"
    return Threads(num_workers=workers, nvdec_engines=nvdec_engines, dali_threads=dali_threads,
                   max_decoders=max_decoders, why=why)


@dataclass(frozen=True, kw_only=True)
class Engines(Part):
    """Per open-decoder engine route (by name), the count of each form of its engine: a field whose metadata names a
    `form` is the keyword of `decode.route.EngineRoute.make_engine` it is passed as (`engine_form`)."""

    engine_threads: Mapping[str, int] = field(metadata={"form": "threads", "what": (
        "decode threads of the open-decoder engine, per route (in each decode process where it runs in processes: 1)")})
    engine_processes: Mapping[str, int] = field(metadata={"form": "processes", "what": (
        "decode processes of the open-decoder engine, per route, each one thread with its decoders (0: its threads in "
        "the loader's process)")})

    def engine_form(self, route: str) -> dict[str, Any]:
        """What `EngineRoute.make_engine` takes for the engine of the route named `route`: each form's count under its
        keyword (threads=, processes=). A form's count travels from its resolver here to the engine with no one in
        between naming it (`loader.assemble`). Typed Any: mypy checks a `**` mapping's values against every
        parameter of `make_engine`, the counts' and the others'."""
        return {f.metadata["form"]: getattr(self, f.name)[route] for f in fields(Engines) if "form" in f.metadata}


def engines(cfg: LoaderConfig, facts: Facts, threads: Threads) -> Engines:
    """Each open-decoder route's decode threads and processes: as given (`decode_threads`, `decode_processes`), else
    the route's rules (`decode.route.Route.threads`, `Route.processes`). Where it runs in processes each is one
    thread with its decoders."""
    engine_routes: list[Route] = sorted({r for r in facts.routes.values() if r.engine}, key=lambda r: r.name)
    if not engine_routes:
        return Engines(engine_threads={}, engine_processes={}, why={})
    nvdec_engines, why = threads.nvdec_engines, {}
    # the open-decoder engine: one thread per NVDEC engine (one decoder instance cannot use more than one engine), at
    # most 4 (`decode.route.OPEN_NVDEC_THREADS`: past it the threads contend for the host)
    engine_threads = {r.name: cfg.decode_threads or r.threads(nvdec_engines, threads.num_workers) for r in engine_routes}
    why["engine_threads"] = GIVEN if cfg.decode_threads else (
        f"nvdec-open: one per NVDEC engine, at most {OPEN_NVDEC_THREADS} (past it the host binds, measured); "
        "cpu-open: num_workers, at least 1")
    if cfg.decode_processes is not None:
        engine_processes = {r.name: cfg.decode_processes for r in engine_routes}
        why["engine_processes"] = GIVEN
    else:
        engine_processes = {r.name: r.processes(nvdec_engines, facts.rank_cores) for r in engine_routes}
        why["engine_processes"] = (f"nvdec-open: one per NVDEC engine ({nvdec_engines}), at most the rank's "
                                   f"{facts.rank_cores} cores less one, where that makes 2 or more (processes scale "
                                   "where threads stop: measured); cpu-open: 0, its threads")
    for name, processes in engine_processes.items():
        engine_threads[name] = 1 if processes else engine_threads[name]
    return Engines(engine_threads=engine_threads, engine_processes=engine_processes, why=why)


@dataclass(frozen=True, kw_only=True)
class Transforms(Part):
    transform_processes: int = field(metadata={
        "what": "processes lerobot's image_transforms run in (0: the thread iterating the loader)"})
    augment_seed: int | None = field(metadata={  # `graph.batches.BuildSpec`
        "what": "what augment='s numbers per sample and camera are drawn from (None: no augment= hook)"})


def transforms(cfg: LoaderConfig, facts: Facts, threads: Threads) -> Transforms:
    """Where lerobot's `image_transforms` run, and the seed of the `augment=` hook's numbers (`graph.batches.
    BuildSpec.augment_seed`)."""
    why: dict[str, str] = {}
    # lerobot's image_transforms: in processes of their own for batches on the CPU, else in the iterating thread
    if cfg.image_transforms is None:
        transform_processes, why["transform_processes"] = 0, "no image_transforms"
    elif facts.cuda_batches:
        transform_processes, why["transform_processes"] = 0, "batches on a GPU: transformed there, in the loop's thread"
    elif cfg.transform_workers is not None:
        transform_processes, why["transform_processes"] = cfg.transform_workers, GIVEN
    else:
        transform_processes, why["transform_processes"] = threads.num_workers, "num_workers"
    # each sample's and camera's numbers are a pure function of (seed, epoch, batch, sample, camera): a resumed or
    # repeated run augments alike
    augment_seed = cfg.seed if cfg.augment is not None else None
    why["augment_seed"] = ("seed: augment='s numbers per sample and camera are drawn from it" if cfg.augment is not None
                           else "no augment= hook")
    return Transforms(transform_processes=transform_processes, augment_seed=augment_seed, why=why)
