"""A loader's insides stay inside dali_stream/loader/: a guard installed for the whole suite (`conftest.py`) makes a
read of a `StreamLoader`'s private attributes (`_stages`, `_delivery`, `_position`, ...: what leads to its store,
builder, decoders) or of its `__dict__` (`vars(loader)`) raise `InsideRead` unless the code reading it is a module
of dali_stream/loader/ itself. It checks the read as it happens, whatever its spelling (`loader._stages`,
`getattr(loader, "_stages")`, `hasattr`, `vars(loader)["_stages"]`): the reading frame's module says who reads. Tests,
tools and benchmarks read `loader.stats()` and the loader's public methods instead (`dali_stream/loader/views.py`)."""

from __future__ import annotations

import sys
from typing import Any

INSIDE = "dali_stream.loader"  # the package whose modules may read a loader's private attributes


class InsideRead(AssertionError):
    """Code outside dali_stream/loader/ read a loader's private attribute."""


def inside(module: str) -> bool:
    """Whether module `module` (a frame's `__name__`) is dali_stream/loader/ or one of its modules."""
    return module == INSIDE or module.startswith(INSIDE + ".")


def install() -> None:
    """Guard `StreamLoader`'s private attributes from here on, once per process (module doc)."""
    from dali_stream.loader.stream import StreamLoader

    if getattr(StreamLoader.__getattribute__, "guards_the_insides", False):
        return
    plain = StreamLoader.__getattribute__

    def exists(loader: Any, name: str) -> bool:  # a name the loader has: others go on to `__getattr__`'s own error
        return name in plain(loader, "__dict__") or any(name in vars(c) for c in type(loader).__mro__)

    def __getattribute__(self: Any, name: str) -> Any:
        if name[:1] == "_" and (name == "__dict__" or name[1:2] != "_"):
            module = sys._getframe(1).f_globals.get("__name__", "")
            if not inside(module) and (name == "__dict__" or exists(self, name)):
                raise InsideRead(
                    f"{module} reads StreamLoader's {name!r}: a loader's insides stay inside dali_stream/loader/. "
                    "Read loader.stats() or a public method of the loader (dali_stream/loader/views.py), or build "
                    "the component under test directly")
        return plain(self, name)

    __getattribute__.guards_the_insides = True  # type: ignore[attr-defined]
    StreamLoader.__getattribute__ = __getattribute__  # type: ignore[method-assign]
