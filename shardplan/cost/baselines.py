"""Baseline compute-cost estimators to hold the neural model against.

* :class:`RooflineCostModel` has the form of TorchRec's ``EmbeddingPerfEstimator``:
  per shard, bytes read for ids + embedding rows looked up (at least 32 bytes
  each) + pooled output written, divided by a memory bandwidth; backward is a
  multiple of forward; a rank's time is the sum over its shards. Its two
  constants (bandwidth, backward multiplier) are fitted on the training split so
  that it is judged at its best, not with TorchRec's GPU defaults.
* :class:`GBMCostModel`: scikit-learn gradient boosting on hand-made whole-rank
  features, predicting log ms.

Both share the neural model's ``fit(sets, fwd_ms, bwd_ms)`` / ``predict(sets)``.
"""
from __future__ import annotations

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor

from .features import rank_aggregate_features
from .ids import expected_shard_stats
from .specs import ShardSpec


def roofline_bytes(s: ShardSpec) -> float:
    share, _ = expected_shard_stats(s.table, s.table_rows, s.zipf_alpha, s.row_offset, s.rows,
                                    s.batch_size * s.pooling_factor)
    lookups = s.batch_size * s.pooling_factor * share
    return lookups * 8 + lookups * max(s.cols * 4, 32) + s.batch_size * s.cols * 4


class RooflineCostModel:
    def __init__(self) -> None:
        self.bytes_per_ms = 1.0
        self.bwd_multiplier = 2.0

    def _bytes(self, sets: list[list[ShardSpec]]) -> np.ndarray:
        return np.array([sum(roofline_bytes(s) for s in specs) for specs in sets])

    def fit(self, sets: list[list[ShardSpec]], fwd_ms: np.ndarray, bwd_ms: np.ndarray) -> "RooflineCostModel":
        b = self._bytes(sets)
        # Geometric-mean calibration: the constant that makes log-errors average zero.
        self.bytes_per_ms = float(np.exp(np.mean(np.log(b) - np.log(fwd_ms))))
        self.bwd_multiplier = float(np.exp(np.mean(np.log(bwd_ms) - np.log(fwd_ms))))
        return self

    def predict(self, sets: list[list[ShardSpec]]) -> tuple[np.ndarray, np.ndarray]:
        fwd = self._bytes(sets) / self.bytes_per_ms
        return fwd, fwd * self.bwd_multiplier


class GBMCostModel:
    def __init__(self, seed: int = 0) -> None:
        self.fwd = HistGradientBoostingRegressor(max_iter=500, learning_rate=0.05, random_state=seed)
        self.bwd = HistGradientBoostingRegressor(max_iter=500, learning_rate=0.05, random_state=seed)

    @staticmethod
    def _x(sets: list[list[ShardSpec]]) -> np.ndarray:
        return np.stack([rank_aggregate_features(s) for s in sets])

    def fit(self, sets: list[list[ShardSpec]], fwd_ms: np.ndarray, bwd_ms: np.ndarray) -> "GBMCostModel":
        x = self._x(sets)
        self.fwd.fit(x, np.log(fwd_ms))
        self.bwd.fit(x, np.log(bwd_ms))
        return self

    def predict(self, sets: list[list[ShardSpec]]) -> tuple[np.ndarray, np.ndarray]:
        x = self._x(sets)
        return np.exp(self.fwd.predict(x)), np.exp(self.bwd.predict(x))
