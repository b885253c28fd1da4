"""lerobot's way of naming a dataset, `LeRobotDataset(repo_id, root=...)`, mapped onto a loader's one source.

lerobot reads a dataset from `root` when given (a local folder) and from the Hub's `repo_id` otherwise, downloading
into `root` (default `$HF_LEROBOT_HOME/<repo_id>`). The loader streams: `root` is used where it holds a dataset,
else `repo_id` is streamed from the Hub (nothing is downloaded into `root`). `LeRobotDataset` arguments the loader
has no setting for are in `lerobot_arguments.LEROBOT_ARGUMENTS`.
"""

from __future__ import annotations

import os
from typing import Any

from ..errors import ConfigError


def lerobot_source(source: Any, repo_id: str | None, root: Any) -> Any:
    """The one source `StreamLoader(source)` takes, from lerobot's `repo_id=`/`root=` (or `source` itself)."""
    if source is not None and (repo_id is not None or root is not None):
        given = ", ".join(f"{n}={v!r}" for n, v in (("repo_id", repo_id), ("root", root)) if v is not None)
        raise ConfigError(f"the dataset was given twice: as the first argument ({source!r}) and as {given}; give the "
                          "folder, URL or Hub id once (lerobot's repo_id=/root= are accepted in its place)")
    if source is not None:
        return source
    if root is not None:
        root = os.fspath(root)
        if repo_id is None or os.path.exists(os.path.join(root, "meta", "info.json")):
            return root  # a missing folder without repo_id fails where it is opened, naming the folder
        return repo_id  # lerobot would download into `root`; the loader streams from the Hub instead
    if repo_id is not None:
        return repo_id
    raise ConfigError("StreamLoader needs a dataset: its folder, an fsspec URL or a Hub id as the first argument, "
                      "e.g. StreamLoader('lerobot/pusht', batch_size=32) (or lerobot's repo_id=... / root=...)")


def named(meta: Any, repo_id: str | None) -> Any:
    """`meta` with lerobot's `repo_id` where one was given (read from `root=`, it would otherwise be the folder)."""
    if repo_id is not None:
        meta.repo_id = repo_id
    return meta
