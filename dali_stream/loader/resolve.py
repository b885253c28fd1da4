"""Every setting a loader derives, from its `LoaderConfig` and what the source and the node are: pure functions, one
per concern, composed by `resolve`.

`resolve(config, facts)` is the one place each default is worked out (threads, streams joined per batch, batches
ahead, fetch threads, decoders kept open, the piece limit, ...), each with the reason it has that value; the
loader's stages are built from what it returns (`loader.assemble`) and `inspect`/`bench` print it
(`Resolved.describe`). Each concern is a resolver returning its values and their reasons (a `resolve_base.Part`):
how a rank draws and its threads, engines and transforms (`loader.resolve_threads`), the decoded frames held and
the batch's layout (`loader.resolve_frames`), fetching and remote reads (`loader.resolve_fetch`). Nothing here opens
a file, probes a device or imports torch or DALI: `Facts` carries what those found.

Declared once: each derived setting is a field of its resolver's part, typed, with what it is in plain words beside
it. `Resolved` is every part at once (it inherits them, as `LoaderConfig` inherits its groups of settings), so a value
a resolver adds to its part is `Resolved`'s, typed for mypy, and `describe`d, with nothing here to change.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Mapping

from ..config import LoaderConfig
from .resolve_base import Facts, Part
from .resolve_fetch import LONG_SEGMENT_FLOOR, REMOTE_CUT_AHEAD, Fetching, fetching
from .resolve_frames import (
    EPISODE_FRAMES_BYTES,
    KEPT_CHW_BYTES,
    Held,
    Kept,
    Layout,
    batch_layout,
    held_frames,
    kept_frames,
)
from .resolve_threads import (
    MAX_WORKERS,
    MIN_WORKERS,
    Engines,
    Sampling,
    Threads,
    Transforms,
    engines,
    sampling,
    transforms,
    worker_threads,
)

__all__ = ["EPISODE_FRAMES_BYTES", "KEPT_CHW_BYTES", "LONG_SEGMENT_FLOOR", "MAX_WORKERS", "MEANING", "MIN_WORKERS",
           "REMOTE_CUT_AHEAD", "Facts", "Resolved", "nvdec_joins", "resolve"]


# Bases last part first: a dataclass lists its bases' fields base-most first, so they read in `resolve`'s order.
@dataclass(frozen=True, kw_only=True)
class Resolved(Transforms, Engines, Fetching, Kept, Layout, Held, Sampling, Threads):
    """The derived settings (module doc): every part's, each declared once, typed, with what it is, in the part of
    the resolver that gives it (`resolve_base.Part`; each comes from exactly one part, `_merged`). `reasons[name]`
    says why each has its value, `MEANING[name]` what it is."""

    @property
    def reasons(self) -> Mapping[str, str]:
        """Why each derived setting has its value, by name, in the parts' order: the parts' `why`, merged."""
        return self.why

    def describe(self) -> dict[str, dict[str, object]]:
        """Each derived setting with its value, what it is and why it has that value, for `inspect` and `bench`."""
        out: dict[str, dict[str, object]] = {}
        for name, reason in self.reasons.items():
            value = getattr(self, name)
            out[name] = {"value": dict(value) if isinstance(value, Mapping) else value, "what": MEANING[name],
                         "why": reason}
        return out


# What each derived setting is, in plain words, as its part declares it (a field's metadata "what"): `describe()`
# hands it to inspect and bench beside the value and why.
MEANING: Mapping[str, str] = {f.name: f.metadata["what"] for f in fields(Resolved) if f.name != "why"}


def nvdec_joins(config: LoaderConfig) -> bool:
    """Whether NVDEC cameras would decode joined streams (`graph.joined`), before routes are chosen: the rule
    `decode="auto"` reads (`decode.proven`). With an augment hook a batch is one clip per sample."""
    return (1 if config.join_streams is None else config.join_streams) != 0 and config.augment is None


def resolve(config: LoaderConfig, facts: Facts) -> Resolved:
    """Every derived setting (module doc): each concern's resolver, fed the settings, the facts and the parts it
    follows from."""
    drawn = sampling(config)
    threads = worker_threads(config, facts, drawn)
    held = held_frames(config, facts, drawn)
    layout = batch_layout(config, facts, threads, held)
    return _merged(threads, drawn, held, layout, kept_frames(config, facts, held, layout),
                   fetching(config, facts, drawn), engines(config, facts, threads), transforms(config, facts, threads))


def _merged(*parts: Part) -> Resolved:
    """One `Resolved` of the parts' values and reasons, in the parts' order; a value two parts give is refused."""
    values: dict[str, Any] = {}
    reasons: dict[str, str] = {}
    for part in parts:
        found = part.values()
        twice = sorted(set(found) & set(values))
        if twice:
            raise ValueError(f"derived settings {twice} resolved twice (by {type(part).__name__} again)")
        values.update(found)
        reasons.update(part.why)
    return Resolved(**values, why=reasons)
