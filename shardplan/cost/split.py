"""Which rows of the cost data a model is trained on, and which it is scored on.

A row is held out when a hash of its seed and sample index falls in the last
:data:`HOLDOUT_FRACTION` of the range: deterministic, the same on every
machine and in every session, and independent of the order rows were
collected in. Collectors that re-time held-out rows (``collect paired
--held-out``, ``collect decompositions``) read it from here, so they need none
of training's dependencies.
"""
from __future__ import annotations

import hashlib

import numpy as np
import pandas as pd

HOLDOUT_FRACTION = 0.15


def is_holdout(seed: int, sample: int) -> bool:
    h = hashlib.sha256(f"{seed}:{sample}".encode()).digest()
    return int.from_bytes(h[:4], "little") / 2**32 >= 1.0 - HOLDOUT_FRACTION


def holdout_mask(df: pd.DataFrame) -> np.ndarray:
    """Which rows of a cost-data frame (columns ``seed``, ``sample``) are held out (:func:`is_holdout`)."""
    return np.array([is_holdout(s, i) for s, i in zip(df["seed"], df["sample"])], dtype=bool)
