"""lerobot's own policies on StreamLoader batches, built the way `lerobot-train` builds them (lerobot 0.5-0.6).

    trainer = LerobotTrainer("act", DatasetMeta.open(source), device="cuda", steps=10_000)
    loader = StreamLoader(source, delta_timestamps=trainer.delta_timestamps, ...)
    trainer.build(loader.meta)
    for batch in loader:
        loss = trainer.step(batch, accelerator)

What is lerobot's, unchanged: the policy config (`make_policy_config`, lerobot's defaults), the policy itself from
the loader's metadata (`make_policy(cfg, ds_meta=loader.meta)`: features, shapes and stats of `meta/info.json`
and `meta/stats.json`), its pre/post-processors with the dataset's stats (`make_pre_post_processors`), the
delta indices turned into `delta_timestamps` (`resolve_delta_timestamps`), the optimizer and scheduler presets
of the policy config, grad clipping at the preset's norm, and a checkpoint laid out as lerobot's
(`pretrained_model/` with config, weights and processors; `training_state/` with optimizer, scheduler, step and
RNG). dali_stream adds the loader's state (`loader_state.json`) beside them, so `--resume-from` continues with the
batches the uninterrupted run would have seen next.

lerobot is no dependency of dali_stream: this module imports it, and says how to get it when it is missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from ..errors import DatasetError, InstallError

LOADER_STATE = "loader_state.json"
# the statistics each of lerobot's normalisation modes reads (its NormalizerProcessorStep); IDENTITY reads none
NEEDED_STATS = {"MEAN_STD": ("mean", "std"), "MIN_MAX": ("min", "max"), "QUANTILES": ("q01", "q99"),
                "QUANTILE10": ("q10", "q90")}


def _name(value: Any) -> str:
    """A lerobot enum member (FeatureType, NormalizationMode) or its name, as its name ("STATE", "MEAN_STD")."""
    return str(getattr(value, "value", value))


def require_stats(features: Mapping[str, Any], modes: Mapping[str, Any], stats: Mapping[str, Mapping[str, Any]],
                  source: str) -> None:
    """Refuse, before training, a policy whose normalisation would get no statistics: lerobot's normalisers pass a
    feature without stats through unnormalised, without a word (and fail on a missing statistic only at the first
    batch). `features`: feature key -> lerobot feature type (the policy config's input and output features' types);
    `modes`: feature type -> normalisation mode (its `normalization_mapping`); `stats`: the loader's `meta.stats`."""
    kinds = {key: _name(kind) for key, kind in features.items()}
    mode = {_name(kind): _name(m) for kind, m in modes.items()}
    lacking: dict[str, list[str]] = {}
    for key, kind in kinds.items():
        missing = [n for n in NEEDED_STATS.get(mode.get(kind, "IDENTITY"), ()) if n not in stats.get(key, {})]
        if missing:
            lacking[key] = missing
    if not lacking:
        return
    said = "; ".join(f"{k!r} ({kinds[k]}, normalised {mode[kinds[k]]}) needs {v}" for k, v in lacking.items())
    raise DatasetError(f"the policy normalises features whose statistics {source!r} lacks in meta/stats.json "
                       f"({'the file is absent' if not stats else 'present, but without them'}): {said}. "
                       "Compute the dataset's stats with lerobot (`compute_episode_stats` and `aggregate_stats` of "
                       "lerobot.datasets.compute_stats) into meta/stats.json, or give the policy a "
                       "normalization_mapping of IDENTITY for those feature types to train on raw values")


def _lerobot():
    try:
        from lerobot.common.train_utils import load_training_state, save_training_state
        from lerobot.datasets.factory import resolve_delta_timestamps
        from lerobot.policies.factory import make_policy, make_policy_config, make_pre_post_processors
    except Exception as exc:  # noqa: BLE001 - not installed, or an incompatible version
        raise InstallError(
            f"--policy needs lerobot 0.5-0.6, which does not import here ({type(exc).__name__}: {exc}). lerobot "
            "needs Python >= 3.12; install both into one environment: `pip install 'lerobot[dataset,training]==0.6.1'`"
            ", then in the dali_stream checkout `pip list --format=freeze > held.txt; pip install -c held.txt '.[cu12]'` ('.[cu13]' on NVIDIA drivers >= 580, "
            "'.[cpu]' without a GPU; docs/install.md, \"Into lerobot's environment\", holds lerobot's versions). "
            "--policy builtin needs no lerobot") from None
    return (make_policy_config, make_policy, make_pre_post_processors, resolve_delta_timestamps,
            save_training_state, load_training_state)


class LerobotTrainer:
    """One lerobot policy with its processors, optimizer and scheduler (module doc)."""

    def __init__(self, policy_type: str, meta, device: str, steps: int, **overrides: Any) -> None:
        """`overrides`: policy config fields (e.g. pretrained_backbone_weights=None on a node without internet)."""
        (make_policy_config, self._make_policy, self._make_processors, resolve_delta_timestamps,
         self._save_state, self._load_state) = _lerobot()
        self.cfg = make_policy_config(policy_type, device=device, push_to_hub=False, **overrides)
        self.steps = steps
        # lerobot's delta indices in seconds, for the dataset's features (as its dataset factory does)
        self.delta_timestamps: dict[str, list[float]] = resolve_delta_timestamps(self.cfg, meta) or {}
        # built by `build` from the loader's metadata (lerobot's objects: untyped here)
        self.policy: Any = None
        self.optimizer: Any = None
        self.scheduler: Any = None
        self.preprocessor: Any = None
        self.postprocessor: Any = None

    def build(self, meta) -> None:
        """The policy from the loader's metadata, its processors with the dataset's stats (refused where the policy
        normalises a feature the stats lack: `require_stats`), the optimizer and the scheduler from the policy
        config's presets."""
        self.policy = self._make_policy(self.cfg, ds_meta=meta)  # sets the config's input and output features
        features = {**self.cfg.input_features, **self.cfg.output_features}
        require_stats({k: f.type for k, f in features.items()}, dict(self.cfg.normalization_mapping), meta.stats,
                      str(getattr(meta, "source", getattr(meta, "repo_id", "the dataset"))))
        self.preprocessor, self.postprocessor = self._make_processors(self.cfg, dataset_stats=meta.stats)
        preset = self.cfg.get_optimizer_preset()
        self.grad_clip_norm = float(preset.grad_clip_norm)
        self.optimizer = preset.build(self.policy.get_optim_params())
        scheduler = self.cfg.get_scheduler_preset()
        self.scheduler = scheduler.build(self.optimizer, self.steps) if scheduler is not None else None

    def step(self, batch: dict[str, Any], accelerator) -> float:
        """One update as lerobot-train's `update_policy`: preprocess, forward, backward (mixed precision through
        Accelerate), grad clip, optimizer and scheduler step."""
        import torch

        self.policy.train()
        batch = self.preprocessor(batch)
        with accelerator.autocast():
            loss, _ = self.policy.forward(batch)
        accelerator.backward(loss)
        if self.grad_clip_norm > 0:
            accelerator.clip_grad_norm_(self.policy.parameters(), self.grad_clip_norm)
        self.optimizer.step()
        self.optimizer.zero_grad()
        if self.scheduler is not None:
            self.scheduler.step()
        unwrapped = accelerator.unwrap_model(self.policy)
        if hasattr(unwrapped, "update"):
            unwrapped.update()
        return float(loss.detach().to(torch.float32).cpu())

    def save(self, directory: Path, step: int, loader_state: dict, accelerator) -> Path:
        """A lerobot checkpoint (policy, processors, training state) plus the loader's state."""
        directory.mkdir(parents=True, exist_ok=True)
        pretrained = directory / "pretrained_model"
        accelerator.unwrap_model(self.policy).save_pretrained(pretrained)
        self.preprocessor.save_pretrained(pretrained)
        self.postprocessor.save_pretrained(pretrained)
        self._save_state(directory, step, self.optimizer, self.scheduler)
        (directory / LOADER_STATE).write_text(json.dumps(loader_state))
        return directory

    def load(self, directory: Path, accelerator) -> tuple[int, dict]:
        """Weights, optimizer, scheduler, RNG and step from a checkpoint `save` wrote; returns (step, loader
        state)."""
        from safetensors.torch import load_file

        weights = load_file(str(directory / "pretrained_model" / "model.safetensors"))
        accelerator.unwrap_model(self.policy).load_state_dict(weights)
        step, self.optimizer, self.scheduler = self._load_state(directory, self.optimizer, self.scheduler)
        return step, json.loads((directory / LOADER_STATE).read_text())
