"""The loader stage: `StreamLoader` (`loader.stream`, the facade) over its stages built in one place
(`loader.assemble`) from the settings derived by pure resolvers, one per concern (`loader.resolve`); an epoch's
run-ahead (`loader.schedule`) and the caller's batches (`loader.deliver`); where the run is and its resume state
(`loader.position`); what a loader's life needs at import and exit (`loader.lifecycle`); what it shows of its
insides (`loader.views`: `stats()`, its plans, the reads measurement tools make). The stages stay inside this
package: each part here gets the ones it reads (`deliver.Outlet`, `position.Planning`), nothing outside reads them.

`StreamLoader` and `open_meta` load on first use, so `loader.resolve` imports without DALI or torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .stream import StreamLoader, open_meta

__all__ = ["StreamLoader", "open_meta"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import stream

        return getattr(stream, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
