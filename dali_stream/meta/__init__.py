"""The meta stage: what a source holds, before anything is fetched. `dataset.py` one dataset's metadata
(`meta/info.json`, episodes, tasks), validated, and its fingerprint; `catalog.py` what a loader reads, one dataset
or a mixture's members as one list of episode positions, and a mixture's `MixtureMeta`; `schema.py` the members'
features merged into one schema and their stats merged."""

from .dataset import INFO_PATH, Camera, DatasetMeta, LerobotMetadata, normalise_codec

__all__ = ["INFO_PATH", "Camera", "DatasetMeta", "LerobotMetadata", "normalise_codec"]
