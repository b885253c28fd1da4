"""Installed packages whose requirements on the loader's own dependencies no longer hold (`dali-stream diagnose`).

pip's resolver weighs only what an install asks for: installing dali-stream into an environment that already
holds other packages (lerobot's) may move a dependency the two share past what one of those packages accepts.
Measured in lerobot 0.6.1's environment: `pip install '.[cpu,remote]'` takes the newest s3fs, which asks for the
fsspec of its own release, and moves fsspec from 2026.2.0 to 2026.9.0, past the `fsspec<=2026.2.0` of lerobot's `datasets`; pip
prints one line about it among hundreds, and lerobot still imports. Installing with that environment's versions
held (`pip list --format=freeze > held.txt; pip install -c held.txt ...`, docs/install.md) moves nothing.

`conflicts()` finds what `pip check` would say about the packages dali-stream requires (its extras included):
each installed distribution's requirement on one of them (markers evaluated here, extras' requirements left out)
that the installed version does not satisfy.
"""

from __future__ import annotations

import importlib.metadata as md
import re
from typing import Any, Iterable

OWN = "dali-stream"


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _dists(path: list[str] | None) -> list:
    return list(md.distributions() if path is None else md.distributions(path=path))


def _applying(dist):
    """The requirements of `dist` that apply here (markers evaluated; an extra's requirements left out)."""
    from packaging.requirements import InvalidRequirement, Requirement

    for line in dist.requires or []:
        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            yield req


def shared_names(dists: list) -> set[str]:
    """The (normalised) names of every package dali-stream's installed metadata (among `dists`) requires, extras
    included; none where dali-stream is not installed (a source tree on sys.path)."""
    from packaging.requirements import Requirement

    for dist in dists:
        if _name(dist.metadata["Name"] or "") == OWN:
            return {_name(Requirement(line).name) for line in dist.requires or []}
    return set()


def conflicts(path: list[str] | None = None, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Each requirement of an installed distribution on one of `names` (default: `shared_names`) that the
    installed version of that package does not satisfy: {"package", "version", "requires", "installed"} (the
    distribution, its version, the requirement as written, the installed version) and "follow" (the installed
    packages whose own requirement on that package excludes where it must move: they move with it). `path`: where
    to look (default sys.path)."""
    dists = _dists(path)
    installed: dict[str, str] = {}
    for dist in dists:
        installed.setdefault(_name(dist.metadata["Name"] or ""), dist.version)
    wanted = {_name(n) for n in names} if names is not None else shared_names(dists)
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for dist in dists:
        who = _name(dist.metadata["Name"] or "")
        if who == OWN or (who, dist.version) in seen:
            continue
        seen.add((who, dist.version))
        for req in _applying(dist):
            target = _name(req.name)
            if target in wanted and target in installed and not req.specifier.contains(installed[target],
                                                                                         prereleases=True):
                out.append({"package": dist.metadata["Name"], "version": dist.version, "requires": str(req),
                            "installed": f"{req.name} {installed[target]}", "follow": _following(dists, target, req)})
    return out


def _bounds(spec) -> tuple[tuple | None, tuple | None]:
    """The tightest (version, inclusive) floor and ceiling a specifier set puts on a version (None: unbounded)."""
    from packaging.version import InvalidVersion, Version

    low = high = None
    for one in spec:
        try:
            v = Version(one.version.rstrip(".*"))
        except InvalidVersion:
            continue
        if one.operator in (">", ">=", "==", "===", "~="):
            b = (v, one.operator != ">")
            low = b if low is None or b[0] > low[0] or (b[0] == low[0] and not b[1]) else low
        if one.operator in ("<", "<=", "==", "==="):
            b = (v, one.operator != "<")
            high = b if high is None or b[0] < high[0] or (b[0] == high[0] and not b[1]) else high
    return low, high


def _apart(low: tuple | None, high: tuple | None) -> bool:
    """Whether no version is at or above `low` and at or below `high`."""
    if low is None or high is None:
        return False
    return low[0] > high[0] or (low[0] == high[0] and not (low[1] and high[1]))


def _following(dists: list, target: str, wanted) -> list[str]:
    """The installed packages whose own requirement on `target` no version `wanted` allows meets (s3fs asks for
    the fsspec of its own release): moving `target` back moves them too, and naming them lets pip pick their
    release that fits."""
    w_low, w_high = _bounds(wanted.specifier)
    out = set()
    for dist in dists:
        if _name(dist.metadata["Name"] or "") == OWN:
            continue
        for req in _applying(dist):
            if _name(req.name) == target:
                low, high = _bounds(req.specifier)
                if _apart(low, w_high) or _apart(w_low, high):
                    out.add(dist.metadata["Name"])
    return sorted(out)


def describe(found: list[dict[str, Any]]) -> tuple[str, str]:
    """The warning and the fix for `conflicts()`'s findings."""
    what = "; ".join(f"{c['package']} {c['version']} requires {c['requires']}, {c['installed']} is installed"
                     for c in found)
    wanted = sorted({"'" + c["requires"].split(";")[0].strip() + "'" for c in found})
    follow = sorted({name for c in found for name in c["follow"]})  # pip picks their release of that version
    fix = (" ".join(["pip install", *wanted, *follow]) + ", then `pip check`; install dali-stream into an existing "
           "environment with its versions held: docs/install.md, 'Into lerobot's environment'")
    return what, fix
