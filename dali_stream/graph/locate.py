"""Where each sample's frames are: the file times (or, for images stored in the tables, the rows) a sample of a batch
plan shows of a camera, the segment (an episode's whole segment, or a long episode's piece) holding them and the frame
indices in it. A sample whose frames the decoded-frame cache all holds gets what it holds instead of a segment: its
camera's source names them from these file times and rows (`graph.sources.CachedFrames`)."""

from __future__ import annotations

import functools
from typing import Any, Mapping

import numpy as np

from ..fetch.tables import FRAME_TIME_S
from ..plan.epoch import BatchPlan
from .sources import FrameSource
from .table_images import StoredImages


class Locator:
    """`catalog` (`meta.catalog.Catalog`): episode positions, members and each key's fields; `store`
    (`fetch.store.EpisodeStore`): the segments; `sources`: camera -> its frame source (`graph.sources`: asked
    whether the decoded-frame cache holds a sample's frames); `tolerance_s`: the loader's, unless a member sets its
    own."""

    def __init__(self, catalog, store, sources: Mapping[str, FrameSource], tolerance_s: float) -> None:
        self.catalog, self.fields, self.store = catalog, catalog.fields, store
        self.sources, self.tolerance_s = sources, tolerance_s
        self.routes = {k: s.route for k, s in sources.items()}

    def locate(self, plan: BatchPlan, rows: list[dict], key: str,
               held: list | None = None) -> tuple[list, list[np.ndarray]]:
        """Per sample of `plan`: camera `key`'s episode segment and the frame indices in it to show (for a
        mixture's sample whose member lacks the camera: None and as many zeros as the key's steps; for a sample
        whose frames the decoded-frame cache holds, `held[j]` (`worker_decode.Held`): that and 0..T-1)."""
        segs: list[Any] = []
        idx: list[np.ndarray] = []
        f = self.fields[key]
        steps = plan.windows[key].rows.shape[1] if key in plan.windows else 1
        stored = self.routes[key].in_tables  # images in the frame tables: the rows' bytes, no segment
        for j, (pos, r) in enumerate(zip(plan.episodes, rows)):
            member, local = self.catalog.locate(int(pos))
            own = f.own[member.index]
            if own is None:
                segs.append(None)
                idx.append(np.zeros(steps, dtype=np.int64))
                continue
            if held is not None and held[j] is not None:
                segs.append(held[j])
                idx.append(np.arange(steps))
                continue
            if stored:
                sel = self.rows_of(plan, j, key).tolist()
                blobs = r[own] if own in r else self.store.column(int(pos), own)  # left out: the cache held them
                segs.append(StoredImages([blobs[i] for i in sel], member.meta.episode_index(local), sel))
                idx.append(np.arange(steps))
                continue
            query = self.query_s(plan, j, key, r)
            seg = self.store.segment_for(int(pos), own, query, key=piece_key(plan, j, key))
            segs.append(seg)
            tolerance = member.tolerance_s if member.tolerance_s is not None else self.tolerance_s
            idx.append(seg.frame_indices(query, tolerance, f"frame {int(plan.frames[j])}"))
        return segs, idx

    @staticmethod
    def rows_of(plan: BatchPlan, j: int, key: str) -> np.ndarray:
        """The episode's rows (frame indices) sample `j` of `plan` shows of camera `key`."""
        return plan.windows[key].rows[j] if key in plan.windows else plan.frames[j:j + 1]

    def query_s(self, plan: BatchPlan, j: int, key: str, rows: dict) -> np.ndarray:
        """The file times sample `j` of `plan` shows of camera `key` (`rows`: its episode's table rows)."""
        member, local = self.catalog.locate(int(plan.episodes[j]))
        return float(member.camera(key).from_timestamp[local]) + rows[FRAME_TIME_S][self.rows_of(plan, j, key)]

    def _ahead_query(self, plan: BatchPlan, j: int, key: str, rows: dict) -> np.ndarray | None:
        """`query_s`, or None where the decoded-frame cache holds every frame of it: no piece to cut."""
        return None if self.sources[key].holds_all(plan, j, rows, self) else self.query_s(plan, j, key, rows)

    def cut_ahead(self, plan: BatchPlan) -> None:
        """Have the store begin cutting the pieces of long episodes `plan`'s samples will ask for (`fetch.store`),
        before a builder takes the batch up: one task for the batch, its reads coalesced."""
        # asked on the caller's thread for every batch: asks only for the episodes that may have pieces
        positions = plan.episodes.tolist()
        candidates = self.store.may_cut(positions)
        if not candidates:
            return
        asks = []
        for key in (k for k, r in self.routes.items() if not r.in_tables):
            f = self.fields[key]
            for j, pos in enumerate(positions):
                own = f.own[self.catalog.locate(pos)[0].index] if pos in candidates else None
                if own is not None:
                    asks.append((piece_key(plan, j, key), pos, own,
                                 functools.partial(self._ahead_query, plan, j, key)))
        self.store.cut_ahead(asks)


def piece_key(plan: BatchPlan, j: int, camera: str) -> tuple[int, int, int, str]:
    """What names the piece of a long episode sample `j` of `plan` reads of `camera` (`EpisodeStore.cut_ahead`)."""
    return plan.epoch, plan.index, j, camera
