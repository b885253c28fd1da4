"""A dataset or a mixture file as the training recipe and the recipes in pipelines/ take it: its metadata without
building a loader, and what `StreamLoader` takes for it."""

from __future__ import annotations


def dataset_meta(source: str):
    """The metadata a loader of `source` would have (`loader.meta`): a dataset's `DatasetMeta`, or for a mixture
    file (.json, `dali_stream.mixture.load_mixture`) its `MixtureMeta` (features, fps and stats in the mixture's
    keys), without building a loader."""
    from dali_stream.mixture import is_mixture_file

    if not is_mixture_file(source):
        from dali_stream.meta import DatasetMeta

        return DatasetMeta.open(source)
    from dali_stream.catalog import Catalog, MixtureMeta
    from dali_stream.mixture import load_mixture
    from dali_stream.plan.selection import select

    return MixtureMeta(Catalog.open(load_mixture(source), select))


def loader_source(source: str):
    """What StreamLoader takes for `source`: a mixture file read into its Mixture, anything else as given."""
    from dali_stream.mixture import is_mixture_file, load_mixture

    return load_mixture(source) if is_mixture_file(source) else source


def video_keys(source: str) -> tuple[float, list[str]]:
    meta = dataset_meta(source)
    return meta.fps, list(meta.video_keys)
