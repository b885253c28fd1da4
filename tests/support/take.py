"""The first batches of a loader's next epoch, whole epochs with the frames decoded in each, and batches compared key
by key, for tests that compare loaders batch by batch."""

from __future__ import annotations


def take(loader, n: int) -> list[dict]:
    out = []
    for batch in loader:
        out.append(batch)
        if len(out) == n:
            break
    return out


def epochs(loader, n: int = 2) -> list[tuple[list[dict], int]]:
    """`n` epochs of `loader`: each one's batches and the frames its batch builder decoded in it."""
    out = []
    for _ in range(n):
        before = loader.stats()["build"]["decoded_frames"]
        out.append(([dict(b) for b in loader], loader.stats()["build"]["decoded_frames"] - before))
    return out


def same_batches(got, want) -> None:
    """Assert two lists of batches are equal: as many, the same keys, every tensor equal, the same tasks."""
    import torch

    assert len(got) == len(want) > 0
    for x, y in zip(got, want):
        assert set(x) == set(y) and x["task"] == y["task"]
        for k in y:
            if k != "task":
                assert torch.equal(x[k], y[k]), k
