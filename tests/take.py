"""The first batches of a loader's next epoch, for tests that compare loaders batch by batch."""

from __future__ import annotations


def take(loader, n: int) -> list[dict]:
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == n:
            break
    return out
