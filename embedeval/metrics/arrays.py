"""The checks every metric makes of its input: values as a flat float array, not empty and finite,
and two samples paired value for value (a ``ValueError`` saying what is wrong otherwise)."""

from __future__ import annotations

import numpy as np


def as_array(values, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float).ravel()
    if array.size == 0:
        raise ValueError(f"{name} is empty")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} contains NaN or infinite values")
    return array


def paired(a, b, name_a: str, name_b: str) -> tuple[np.ndarray, np.ndarray]:
    a, b = as_array(a, name_a), as_array(b, name_b)
    if a.shape != b.shape:
        raise ValueError(f"{name_a} and {name_b} have different lengths ({a.size} vs {b.size})")
    return a, b
