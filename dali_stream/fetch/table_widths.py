"""A data file's numeric columns against the shapes meta/info.json declares for them: a column narrower or wider in
one file would hand batches that change shape mid-epoch, or numpy's own error when samples are stacked."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..errors import DatasetError


def check_widths(path: str, rows: Mapping[str, np.ndarray], features: Mapping[str, Any],
                 skip: frozenset[str] = frozenset()) -> None:
    """Each column of `rows` (an episode's rows of data file `path`, `tables.TableReader`) but those of `skip` has
    the values per row its feature's shape in `features` (info.json's) holds; a column without a shape is not
    checked."""
    for key, values in rows.items():
        shape = (features.get(key) or {}).get("shape")
        if key in skip or not shape or not isinstance(values, np.ndarray) or values.dtype == object:
            continue
        width = int(np.prod(values.shape[1:])) if values.ndim > 1 else 1
        if width != int(np.prod([int(x) for x in shape])):
            raise DatasetError(
                f"data file {path}: column {key!r} holds {width} values per row, but meta/info.json declares its "
                f"shape {list(shape)}; the dataset's data and meta disagree: re-download the file, or correct the "
                f"feature's shape in meta/info.json if every data file holds {width}")
