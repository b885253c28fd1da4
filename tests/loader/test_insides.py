"""A loader's insides stay inside dali_stream/loader/ (docs/architecture.md): its private attributes, which lead to
its store, builder and decoders, are read there and nowhere else. The guard installed for the whole suite
(`tests/support/insides.py`) checks each read as it happens, from the reading frame's module; these tests show it catches
every spelling of that read, lets dali_stream/loader/ itself through, and that what the loader shows in public holds
none of its parts. Code the suite never runs (benchmarks/) is read for the same attributes."""

from __future__ import annotations

import ast
import gc
import types
from pathlib import Path

import pytest

from dali_stream import StreamLoader
from dali_stream.loader.assemble import Stages
from tests.support.insides import InsideRead

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def loader(small_dataset):
    with StreamLoader(str(small_dataset), batch_size=2, device="cpu", num_workers=1) as opened:
        next(iter(opened))
        yield opened


def private_names(loader) -> set[str]:
    """The loader's private attributes, as the object holds them (read the way the guard lets through)."""
    return {n for n in object.__getattribute__(loader, "__dict__") if n.startswith("_") and not n.startswith("__")}


def test_every_spelling_of_a_read_of_the_stages_raises(loader):
    name = "_st" + "ages"  # however the name is made
    with pytest.raises(InsideRead, match=r"reads StreamLoader's '_stages'"):
        loader._stages  # noqa: B018
    with pytest.raises(InsideRead):
        getattr(loader, name)
    with pytest.raises(InsideRead):
        getattr(loader, name, None)
    with pytest.raises(InsideRead):
        hasattr(loader, name)
    with pytest.raises(InsideRead):
        vars(loader)[name]
    with pytest.raises(InsideRead):
        loader.__dict__  # noqa: B018
    for other in private_names(loader):  # the delivery, the position, the finalizer (its arguments: the store), ...
        with pytest.raises(InsideRead):
            getattr(loader, other)
    with pytest.raises(AttributeError, match=r"the loader's stages is its own, not shown; what it holds is in loader\.stats\(\)"):
        getattr(loader, "stages")  # noqa: B009 - the name it had before
    with pytest.raises(AttributeError, match=r"the loader's store is its own, not shown"):
        getattr(loader, "store")  # noqa: B009
    with pytest.raises(AttributeError, match=r"has no attribute '_nonsense'$"):
        getattr(loader, "_nonsense")  # noqa: B009 - a name it does not have is the plain error


def test_the_loaders_own_modules_read_them(loader):
    """The guard asks which module reads: the same read compiled as dali_stream/loader/'s passes, the loader's own
    methods work, and a module whose name only begins like it does not pass."""
    read = "def read(loader):\n    return loader._stages\n"
    own: dict = {"__name__": "dali_stream.loader.somewhere"}
    exec(compile(read, "<inside>", "exec"), own)
    assert isinstance(own["read"](loader), Stages)
    outside: dict = {"__name__": "dali_stream.loaders_elsewhere"}
    exec(compile(read, "<outside>", "exec"), outside)
    with pytest.raises(InsideRead):
        outside["read"](loader)
    assert loader.stats()["fetch"]["episodes"] > 0 and loader.memory_budget()["cache_bound"] > 0
    assert len(loader.epoch_plan(0).batch(0).episodes) == 2


def test_what_the_loader_shows_holds_none_of_its_parts(loader):
    """Its public attributes, and what they hold (walked a few references deep), never reach its stages, its
    store or its batch builder: the private attributes are the only way in."""
    stages = object.__getattribute__(loader, "_stages")
    parts = {id(stages), id(stages.store), id(stages.builder), id(stages.decoders)}
    skip = (types.ModuleType, type, types.FunctionType, types.BuiltinFunctionType, types.FrameType)
    held = object.__getattribute__(loader, "__dict__")
    for name, value in held.items():
        if name.startswith("_"):
            continue
        seen, level = {id(loader)}, [value]
        for _ in range(4):
            assert not any(id(v) in parts for v in level), f"loader.{name} reaches the loader's parts"
            nxt = []
            for v in level:
                if id(v) not in seen and not isinstance(v, skip):
                    seen.add(id(v))
                    nxt.extend(gc.get_referents(v))
            level = nxt


def test_code_the_suite_does_not_run_reads_no_private_attribute_of_a_loader(loader):
    """benchmarks/ (and the tools' and recipes' paths the suite does not reach, a GPU's): no attribute named as one
    of a loader's private ones (or `stages`, its name before) is read there, on anything but `self`."""
    names = private_names(loader) | {"stages"}
    found = []
    for folder in ("benchmarks", "pipelines", "dali_stream/tools"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Attribute) and node.attr in names and not (
                        isinstance(node.value, ast.Name) and node.value.id == "self"):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: .{node.attr}")
    assert not found, "\n".join(found)
