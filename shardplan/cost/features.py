"""Per-shard features shared by the neural model and the gradient-boosting baseline.

Sizes enter as log2 so that the models see relative changes; lookup work uses
the expected share of the table's ids that land in the shard's rows and the
expected number of distinct rows the batch touches (what the fused optimizer
update writes), both from the Zipf law of DESIGN.md's id recipe.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from .ids import expected_shard_stats
from .specs import ShardSpec

FEATURE_NAMES = (
    "log_rows", "log_table_rows", "cols_frac", "log_cols", "log_pooling", "zipf_alpha", "log_batch",
    "log_lookups", "log_lookup_floats", "log_weight_bytes", "log_distinct_rows",
    "log_update_floats", "distinct_ratio", "row_fraction",
)


@lru_cache(maxsize=200_000)
def _stats(table: str, table_rows: int, alpha: float, row_offset: int, rows: int,
           lookups: float) -> tuple[float, float]:
    return expected_shard_stats(table, table_rows, alpha, row_offset, rows, lookups)


def shard_features(s: ShardSpec) -> np.ndarray:
    table_lookups = s.batch_size * s.pooling_factor
    share, distinct = _stats(s.table, s.table_rows, s.zipf_alpha, s.row_offset, s.rows,
                             float(table_lookups))
    lookups = table_lookups * share
    return np.array([
        np.log2(s.rows), np.log2(s.table_rows), s.cols / 128.0, np.log2(s.cols),
        np.log2(1.0 + s.pooling_factor * share), s.zipf_alpha, np.log2(s.batch_size),
        np.log2(1.0 + lookups), np.log2(1.0 + lookups * s.cols), np.log2(s.rows * s.cols * 4.0),
        np.log2(1.0 + distinct), np.log2(1.0 + distinct * s.cols), distinct / max(lookups, 1.0),
        s.rows / s.table_rows,
    ], dtype=np.float32)


def set_features(sets: list[list[ShardSpec]], max_shards: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Padded ``[N, S, F]`` features and ``[N, S]`` mask for ``N`` shard sets."""
    s_max = max_shards or max((len(x) for x in sets), default=1)
    out = np.zeros((len(sets), max(s_max, 1), len(FEATURE_NAMES)), dtype=np.float32)
    mask = np.zeros((len(sets), max(s_max, 1)), dtype=np.float32)
    for i, specs in enumerate(sets):
        for j, s in enumerate(specs):
            out[i, j] = shard_features(s)
            mask[i, j] = 1.0
    return out, mask


def touched_bytes(specs: list[ShardSpec], bytes_per_float: int = 4) -> float:
    """Bytes of rows a set's ids touch a batch: each shard's expected distinct rows times their width.
    What must come through the cache each step, where a rank's bytes held say what could."""
    col = FEATURE_NAMES.index("log_update_floats")
    return bytes_per_float * sum(float(np.exp2(shard_features(s)[col])) - 1.0 for s in specs)


def rank_aggregate_features(specs: list[ShardSpec]) -> np.ndarray:
    """Hand-made whole-rank features (for the gradient-boosting baseline)."""
    if not specs:
        return np.zeros(9, dtype=np.float32)
    f = np.stack([shard_features(s) for s in specs])
    lin = lambda col: np.exp2(f[:, FEATURE_NAMES.index(col)])  # noqa: E731
    return np.array([
        len(specs), np.log2(specs[0].batch_size), np.log2(1 + lin("log_lookups").sum()),
        np.log2(1 + lin("log_lookup_floats").sum()), np.log2(lin("log_weight_bytes").sum()),
        np.log2(1 + lin("log_distinct_rows").sum()), np.log2(1 + lin("log_update_floats").sum()),
        np.log2(lin("log_weight_bytes").max()), float(np.mean([s.cols for s in specs])),
    ], dtype=np.float32)
