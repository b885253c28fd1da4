"""A dataset or a mixture file as the training recipe and the recipes in pipelines/ take it on their command line:
its metadata without building a loader."""

from __future__ import annotations


def dataset_meta(source: str):
    """`dali_stream.open_meta` of `source`, a mixture file (.json, `dali_stream.mixture.load_mixture`) read into its
    Mixture first: a dataset's `DatasetMeta` or a mixture's `MixtureMeta`, which `StreamLoader` takes in place of
    the source without opening it again."""
    from dali_stream import open_meta
    from dali_stream.mixture import is_mixture_file, load_mixture

    return open_meta(load_mixture(source) if is_mixture_file(source) else source)


def video_keys(source: str) -> tuple[float, list[str]]:
    meta = dataset_meta(source)
    return meta.fps, list(meta.video_keys)
