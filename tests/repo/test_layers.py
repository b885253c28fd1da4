"""The package's stage rule, checked on the source (docs/architecture.md).

dali_stream's stages import only earlier stages: source -> meta -> plan -> fetch -> decode -> graph -> loader ->
dali (the loader's batches in a user's own DALI pipeline),
with the modules at the package's root (`errors`, `config`, `pairing`, `mixture`, and the self-contained
`augment` users import) below all of them and `tools` above all of them (the package's
`__init__`, the public surface, re-exports from any stage). A module's stage is the package it sits in: read
from the tree, declared nowhere else. The planner imports no IO, torch or
DALI; the runtime never imports the tools; no module imports itself back through others (no cycles, lazy
imports inside functions included). Imports under `if TYPE_CHECKING:` are for the type checker only and do
not count.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "dali_stream"

# Stages, lowest first: a module may import its own stage and any stage before it. "base": the package's root.
STAGES = ["base", "source", "meta", "plan", "fetch", "decode", "graph", "loader", "dali", "tools"]
# The planner's whole world: the standard library's pure parts and numpy.
PLAN_MAY_IMPORT = {"__future__", "bisect", "dataclasses", "hashlib", "heapq", "itertools", "math", "random",
                   "typing", "collections", "functools", "numpy"}


def stage_of(module: str) -> str:
    """The stage of `module`: the package under dali_stream it sits in, or "base" at the root (`__main__`, the
    command line's entry, is the tools')."""
    if module == "dali_stream.__main__":
        return "tools"
    parts = module.split(".")
    return parts[1] if len(parts) > 2 or (len(parts) == 2 and parts[1] in PACKAGES) else "base"


PACKAGES = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def imports(root: Path, package: str = "dali_stream") -> dict[str, set[str]]:
    """Module -> every module it imports (absolute names; `from . import x` of a submodule names the submodule)."""
    found: dict[str, set[str]] = {}
    modules = {".".join((package, *p.relative_to(root).with_suffix("").parts)).removesuffix(".__init__")
               for p in root.rglob("*.py")}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).with_suffix("").parts
        name = ".".join((package, *rel)).removesuffix(".__init__")
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        skip = _type_checking_lines(tree)
        out = found.setdefault(name, set())
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            if isinstance(node, ast.Import):
                out.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = name.split(".") if is_pkg else name.split(".")[:-1]
                    base = base[:len(base) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                out.add(target)
                for a in node.names:
                    if f"{target}.{a.name}" in modules:
                        out.add(f"{target}.{a.name}")
    return found


def violations(found: dict[str, set[str]], package: str = "dali_stream") -> list[str]:
    bad = []
    for module, targets in sorted(found.items()):
        if module == package:  # the public surface re-exports (lazily) what users need from every stage
            continue
        mine = STAGES.index(stage_of(module))
        for target in sorted(targets):
            top = target.split(".")[0]
            if module.split(".")[1:2] == ["plan"] and top != package and top not in PLAN_MAY_IMPORT:
                bad.append(f"{module} imports {target}: the planner imports no IO, torch or DALI")
            if top != package or target == package:
                continue
            theirs = STAGES.index(stage_of(target))
            if theirs > mine:
                bad.append(f"{module} ({STAGES[mine]}) imports {target} ({STAGES[theirs]}), a later stage")
    return bad


def cycles(found: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    graph = {m: {t for t in ts if t in found and t != m and not m.startswith(t + ".")} for m, ts in found.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_every_module_has_a_stage():
    found = imports(PACKAGE)
    assert len(found) > 30
    for module in found:
        assert stage_of(module) in STAGES, module
    assert PACKAGES == set(STAGES) - {"base"}, "every package under dali_stream/ is a stage, every stage a package"


def test_stages_import_only_earlier_stages_and_the_planner_no_io():
    assert violations(imports(PACKAGE)) == []


def test_no_import_cycles():
    assert cycles(imports(PACKAGE)) == []


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / "dali_stream" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "dali_stream"


@pytest.mark.parametrize("files,expected", [
    ({"plan/epoch.py": "import torch\n"}, "the planner imports no IO"),
    ({"plan/epoch.py": "def f():\n    import pyarrow\n"}, "the planner imports no IO"),
    ({"fetch/store.py": "from ..decode.cpu import DecoderCache\n", "decode/cpu.py": ""}, "a later stage"),
    ({"loader/stream.py": "from ..tools import bench\n", "tools/bench.py": ""}, "a later stage"),
    ({"config.py": "from .fetch import store\n", "fetch/store.py": ""}, "a later stage"),
])
def test_the_rules_catch_a_violation(tmp_path, files, expected):
    """The checker itself: each planted violation is reported (the rules can fail)."""
    root = _write(tmp_path, {"__init__.py": "", **{f"{d}/__init__.py": "" for d in ("plan", "fetch", "decode",
                                                                                     "loader", "tools")}, **files})
    assert any(expected in v for v in violations(imports(root))), violations(imports(root))


def test_the_cycle_check_catches_a_lazy_cycle(tmp_path):
    root = _write(tmp_path, {"__init__.py": "", "tools/__init__.py": "",
                             "tools/a.py": "def f():\n    from .b import g\n",
                             "tools/b.py": "from .a import f\n",
                             "decode/__init__.py": "",
                             "decode/routes.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                                 "    from .cpu import X\n",
                             "decode/cpu.py": "from .routes import Y\n"})
    assert cycles(imports(root)) == [["dali_stream.tools.a", "dali_stream.tools.b"]]


def test_the_public_surface_is_small_and_resolves():
    """What users import: the loader, a source's metadata before it, its config, mixtures, the errors and the version
    (docs/architecture.md)."""
    import dali_stream

    errors = {"DaliStreamError", "ConfigError", "DatasetError", "DatasetNotFoundError", "DecodeError", "DeviceError",
              "FrameTimestampError", "InstallError", "RemoteError", "StateError", "UnsupportedVersionError",
              "VideoFileError", "DamagedFileError"}
    assert set(dali_stream.__all__) == {"StreamLoader", "open_meta", "LoaderConfig", "Mixture", "Member",
                                        "__version__"} | errors
    for name in dali_stream.__all__:
        assert getattr(dali_stream, name) is not None
    assert all(issubclass(getattr(dali_stream, e), dali_stream.DaliStreamError) for e in errors)


def test_modules_stay_small():
    """One job per module: none of the package over 450 lines, and `StreamLoader`'s facade at most 300
    (docs/architecture.md, "The loader's house"): a module growing past it is split by job, not waved through."""
    sizes = {p.relative_to(PACKAGE).as_posix(): len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py")}
    assert {p: n for p, n in sizes.items() if n > 450} == {}
    assert sizes["loader/stream.py"] <= 300


def test_no_route_is_told_by_its_name_outside_decode():
    """What differs by route is on `decode.route.Route` (its decoder, device, codecs, thread rule): no code outside
    decode/ compares a camera's route with a route's name (a constant's `.name` or the name spelt out), so adding a
    route is decode/'s business. Route names as keys of results (diagnose's per-route tests) are no comparison."""
    import re

    from dali_stream.decode.route import ROUTES

    constants = r"\b(?:NVDEC|NVDEC_OPEN|DALI_CPU|TORCHCODEC|CPU_OPEN)\.name\b"
    names = "|".join(re.escape(n) for n in ROUTES)
    spelt = rf"""["'](?:{names})["']"""
    compared = re.compile(rf"(?:==|!=|\bin\b|\bnot in\b)\s*\(?\s*(?:{constants}|{spelt})|"
                          rf"(?:{constants}|{spelt})\s*(?:==|!=|\bin\b|\bnot in\b)")


    def compares(line: str) -> bool:
        code = re.sub(r"\bfor\s+[\w\s,()]+?\s+in\b", "for_in", line.split("#", 1)[0])  # a loop's `in` compares nothing
        return bool(compared.search(code))

    assert all(compares(line) for line in ("if r == NVDEC.name}", "gpu = route == 'nvdec'", "x in ('dali-cpu', 'nvdec')",
                                           "dali_nvdec = NVDEC.name in routes.values()",
                                           "for k, r in builder.routes.items() if r == NVDEC.name}"))
    assert not compares('for name in ("torchcodec", "pynvvideocodec"):')
    found = [f"{path.relative_to(PACKAGE)}:{n}: {line.strip()}"
             for path in PACKAGE.rglob("*.py") if path.relative_to(PACKAGE).parts[0] != "decode"
             for n, line in enumerate(path.read_text().splitlines(), 1) if compares(line)]
    assert not found, "route names compared outside decode/ (ask the Route's properties):\n" + "\n".join(found)


def test_the_batch_builder_loops_over_its_cameras_sources():
    """Each camera's frames come from one `graph.sources.FrameSource` (DALI's decoder in the graph, an open-decoder
    engine, the workers' decoders, host frames), which its route picks (`decode.route.Route.frame_source`, made by
    `graph.source_kit.SourceKit`): `BatchBuilder` takes at most 6 parameters and asks every source the same way,
    never which route or kind of source a camera has, nor the decoded-frame cache (behind the sources it keeps)."""
    import inspect
    import re

    from dali_stream.graph import batches
    from dali_stream.graph.batches import BatchBuilder

    params = [p for p in inspect.signature(BatchBuilder.__init__).parameters if p != "self"]
    assert len(params) <= 4, params  # catalog, store, sources, spec
    build = inspect.getsource(BatchBuilder.build)
    assert "frames_for(" in build
    assert not re.search(r"route_of|\.torchcodec\b|\.engine\b.*:|isinstance\(|frames\.look", build), build
    assert "route_of" not in inspect.getsource(batches)
    assert "isinstance(" not in inspect.getsource(BatchBuilder)


# The modules of graph/ that reach the decoded-frame cache: `CachedFrames`, which a cached camera's source sits behind,
# and the kit that builds it. Every other source, and the decode helpers under them, report what they decode through
# the batch's `CameraBatch.keep` and never hold the cache.
CACHE_KEEPERS = {"sources.py", "source_kit.py"}


def cache_reaches(source: str) -> list[str]:
    """Where `source` reaches the decoded-frame cache: an import of `decode.frame_cache` (or of something from it;
    under `if TYPE_CHECKING:` too: a helper typed with the cache holds it) or a cache's `put`, called or passed on (on
    a name or attribute saying frames or cache: `frames.put`, `self.frames.put`, `w.frames.put`, `self.cache.put`;
    a queue's `put` is none)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""] + [f"{node.module or ''}.{a.name}" for a in node.names]
        hit = any(n == "frame_cache" or n.endswith(".frame_cache") or ".frame_cache." in n for n in names)
        if isinstance(node, ast.Attribute) and node.attr == "put":
            hit = bool(re.search(r"frame|cache", ast.unparse(node.value), re.IGNORECASE))
        if hit:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_only_the_cached_wrapper_reaches_the_frame_cache():
    """The decoded-frame cache sits behind the frame-source protocol (`graph.sources.CachedFrames`): in graph/ only
    the wrapper's module, and the kit that builds it, import `decode.frame_cache` or call a cache's `put`; the sources
    and the decode helpers (`worker_decode`, `engine_pictures`, `table_images`, `depth_source`) and the locator
    never hold it, and what they decode of a cached camera goes back through `CameraBatch.keep`."""
    found = [f"graph/{path.name}:{hit}" for path in sorted((PACKAGE / "graph").glob("*.py"))
             if path.name not in CACHE_KEEPERS for hit in cache_reaches(path.read_text())]
    tree = ast.parse((PACKAGE / "graph" / "sources.py").read_text())  # there, within CachedFrames only
    found += [f"graph/sources.py {c.name}:{hit}" for c in tree.body if isinstance(c, ast.ClassDef)
              and c.name != "CachedFrames" for hit in cache_reaches(ast.unparse(c))]
    assert not found, "the decoded-frame cache reached outside CachedFrames:\n" + "\n".join(found)
    assert cache_reaches((PACKAGE / "graph" / "sources.py").read_text()), "the checker finds the wrapper's own"


@pytest.mark.parametrize("code", [
    "from ..decode.frame_cache import FrameCache",
    "from ..decode import frame_cache",
    "import dali_stream.decode.frame_cache",
    "from dali_stream.decode.frame_cache import micros",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..decode.frame_cache import FrameCache",
    "def f(frames, names, pictures):\n    frames.put(names, pictures)",
    "class A:\n    def f(self, names, pictures):\n        self.frames.put(names, pictures)",
    "keep = w.frames.put",
    "keep = self.cache.put",
])
def test_the_cache_rule_catches_every_spelling(code):
    assert cache_reaches(code), code
    assert not cache_reaches("results.put((job, 1))\nself._jobs.put(None)\nkeep = batch.keep\nkeep(names, frames)")


@pytest.mark.parametrize("decode", ["cpu", "cpu-open"])
def test_in_a_running_loader_only_the_wrapper_holds_the_frame_cache(small_dataset, decode):
    """What is reached, whatever the names: after an epoch with the decoded-frame cache on, the objects of graph/
    that hold the cache (found through the garbage collector's referrers, not through any attribute's name) are
    `CachedFrames` and the kit that built it; the sources' decode helpers only ever get its `put` in a batch."""
    import gc

    from dali_stream import StreamLoader
    from dali_stream.decode.frame_cache import FrameCache

    with StreamLoader(str(small_dataset), batch_size=2, device="cpu", decode=decode, frame_cache_bytes=1 << 28,
                      num_workers=1) as loader:
        for _ in loader:
            pass
        gc.collect()
        caches = [o for o in gc.get_objects() if type(o) is FrameCache]  # isinstance would wake lazy modules
        referrers = [ref for cache in caches for ref in gc.get_referrers(cache)]  # an instance, or its __dict__
        holders = {type(ref) for ref in referrers if not isinstance(ref, dict)} | {
            type(owner) for ref in referrers if isinstance(ref, dict)
            for owner in gc.get_referrers(ref) if getattr(owner, "__dict__", None) is ref}
    in_graph = {t.__name__ for t in holders if t.__module__.startswith("dali_stream.graph")}
    assert caches and "CachedFrames" in in_graph and in_graph <= {"CachedFrames", "SourceKit"}, in_graph


# Where a route may be found by its name: a name read back from a report (diagnose's per-member routes) and the
# registry's own module. Everywhere else a route travels as the `Route` object the settings' edge chose.
NAMED_AT_THE_EDGE = {"decode/route.py", "tools/diagnose_dataset.py"}


def route_lookups(source: str) -> list[str]:
    """Where `source` reaches a route by its name: any use of `route_named` (called, passed on or imported under
    another name), `ROUTES` subscripted or `.get` on it, or a Route's property read by a string (`getattr(r, "in_dali")`,
    `operator.attrgetter("on_gpu")`). Iterating `ROUTES` (listing the routes) is no look-up."""
    from dali_stream.decode.route import Route

    properties = {n for n, v in vars(Route).items() if isinstance(v, property)} | set(Route.__dataclass_fields__)
    tree = ast.parse(source)
    named = {"route_named"}  # the look-up and every name it is imported as
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            named |= {a.asname or a.name for a in node.names if a.name == "route_named"}
    found = []
    for node in ast.walk(tree):
        hit = (isinstance(node, ast.Name) and node.id in named) or (
            isinstance(node, ast.Attribute) and node.attr == "route_named")
        if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Name, ast.Attribute)):
            hit = hit or getattr(node.value, "id", getattr(node.value, "attr", "")) == "ROUTES"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            hit = hit or getattr(node.func.value, "id", getattr(node.func.value, "attr", "")) == "ROUTES"
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) in (
                "getattr", "attrgetter"):
            hit = hit or any(isinstance(a, ast.Constant) and a.value in properties for a in node.args)
        if hit:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
    return found


def test_routes_travel_as_objects():
    """No route is looked up by name past the settings' edge, and no property is named as a string
    (`route_lookups`): code holds the `Route` and asks it."""
    found = [f"{path.relative_to(PACKAGE)}:{hit}" for path in PACKAGE.rglob("*.py")
             if str(path.relative_to(PACKAGE)) not in NAMED_AT_THE_EDGE for hit in route_lookups(path.read_text())]
    assert not found, "routes looked up by name, or properties named as strings:\n" + "\n".join(found)


@pytest.mark.parametrize("code", [
    "from ..decode.route import route_named\nr = route_named(name)",
    "from ..decode.route import route_named as by\nr = by(name)",
    "from ..decode import route\nr = route.route_named(name)",
    "from ..decode.route import route_named\nlook = route_named\nr = look(name)",
    "from ..decode.route import ROUTES\nr = ROUTES[name]",
    "from ..decode import route\nr = route.ROUTES.get(name)",
    "ok = getattr(r, 'in_dali')",
    "from operator import attrgetter\nkeys = filter(attrgetter('on_gpu'), routes)",
])
def test_the_route_rule_catches_every_spelling(code):
    assert route_lookups(code), code
    assert not route_lookups("from ..decode.route import ROUTES\nnames = [r.name for r in ROUTES.values()]")


def test_a_new_engine_route_is_a_class_and_a_registration(tmp_path):
    """Adding an engine route: a subclass of `EngineRoute` saying which packet decoder it opens, registered. Its
    engine (threads, or decode processes) and its frame source come from the base class; a second route of one name
    is refused. Run in a child so the registry of this process stays the package's."""
    import subprocess
    import sys

    code = """
from dataclasses import dataclass
from dali_stream.decode.route import ROUTES, CpuOpenRoute, EngineRoute, register
from dali_stream.decode.packet_decoders import AvPacketDecoder

OPENED = []

@dataclass(frozen=True, eq=False)
class Counted(EngineRoute):
    def packet_decoder(self, codec, camera, device_index, sizes, colours):
        OPENED.append((codec, camera))
        return AvPacketDecoder(codec)

route = register(Counted("cpu-counted", "cpu", "engine", "av", "cpu-open", "FFmpeg's decoders, counted"))
assert ROUTES["cpu-counted"] is route and route.engine and route.cached
engine = route.make_engine(2, None, {})
dec = engine.make("h264", "front")
assert OPENED == [("h264", "front")] and type(dec).__name__ == "AvPacketDecoder"
engine.close()

class Kit:  # what `graph.source_kit.SourceKit` offers a route: the engine's source
    def engine(self, key, route):
        return ("engine", key, route.name)
assert route.frame_source("front", Kit()) == ("engine", "front", "cpu-counted")
try:
    register(CpuOpenRoute("cpu-counted", "cpu", "engine", "av", "cpu-open", "again"))
except ValueError as exc:
    assert "registered twice" in str(exc)
else:
    raise AssertionError("a second route of one name was taken")
from dali_stream.decode.route import Route
for wrong in (Route("engine-not", "cpu", "engine", "av", "cpu", "no engine class"),
              Counted("engine-wrong", "cpu", "torchcodec", "av", "cpu", "an engine class, another decoder")):
    try:
        register(wrong)
    except ValueError as exc:
        assert "EngineRoute with decoder='engine'" in str(exc)
    else:
        raise AssertionError(f"{wrong.name} was taken")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path,
                         env={**__import__("os").environ, "PYTHONPATH": str(PACKAGE.parent)})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]


FUNCTION_LINES = 80  # the most lines one function of dali_stream/loader/ spans (docs/architecture.md)


def long_functions(root: Path, limit: int = FUNCTION_LINES) -> list[str]:
    """Every function (methods and nested ones included) under `root` spanning more than `limit` lines, from its
    `def` to its last line."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno}: {node.name} ({lines} lines)")
    return found


def test_no_loader_function_is_long():
    """The loader is wiring: each of its functions does one thing (`loader.resolve` a composition of resolvers, one
    per concern; `loader.assemble.assemble` the stages in order), none over 80 lines; a longer one is split by job."""
    assert long_functions(PACKAGE / "loader") == []


def test_the_length_check_catches_a_long_function(tmp_path):
    """The checker itself: a method of 81 lines is reported, a function of 80 is not."""
    def lines(n: int, indent: str) -> str:
        return "".join(f"{indent}x{i} = {i}\n" for i in range(n))

    (tmp_path / "a.py").write_text(f"def fits():\n{lines(FUNCTION_LINES - 1, '    ')}\n\n"
                                   f"class C:\n    async def long(self):\n{lines(FUNCTION_LINES, '        ')}")
    assert long_functions(tmp_path) == [f"a.py:{FUNCTION_LINES + 4}: long ({FUNCTION_LINES + 1} lines)"]
