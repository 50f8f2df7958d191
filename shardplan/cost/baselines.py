"""Baseline compute-cost estimators to hold the neural model against.

* :class:`RooflineCostModel` has the form of TorchRec's ``EmbeddingPerfEstimator``:
  per shard, bytes read for ids + embedding rows looked up (at least 32 bytes
  each) + pooled output written, divided by a memory bandwidth; backward is a
  multiple of forward; a rank's time is the sum over its shards. Its two
  constants (bandwidth, backward multiplier) are fitted on the training split so
  that it is judged at its best, not with TorchRec's GPU defaults.
  :meth:`RooflineCostModel.published` builds one from a GPU's published memory
  bandwidth instead, for a GPU profile that has no cost data yet.
* :class:`GBMCostModel`: scikit-learn gradient boosting on hand-made whole-rank
  features, predicting log ms.

Both share the neural model's ``fit(sets, fwd_ms, bwd_ms)`` / ``predict(sets)``.
"""
from __future__ import annotations

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor

from ..errors import InputError
from .features import rank_aggregate_features
from .ids import expected_shard_stats
from .profiles import get_profile
from .specs import ShardSpec


def roofline_bytes(s: ShardSpec) -> float:
    share, _ = expected_shard_stats(s.table, s.table_rows, s.zipf_alpha, s.row_offset, s.rows,
                                    s.batch_size * s.pooling_factor)
    lookups = s.batch_size * s.pooling_factor * share
    return lookups * 8 + lookups * max(s.cols * 4, 32) + s.batch_size * s.cols * 4


# The share of peak bandwidth a fused embedding lookup reaches, as TorchRec's planner assumes it:
# its default HBM figure for the FUSED CUDA kernel (planner/constants.py, HBM_MEM_BW = 897 GiB/s,
# 963 GB/s) is 0.62 of the 1,555 GB/s an A100 40GB's HBM2 is rated at.
LOOKUP_BANDWIDTH_EFFICIENCY = 0.62
# TorchRec's planner prices backward (with the fused optimizer) at 2x forward (BWD_COMPUTE_MULTIPLIER).
PUBLISHED_BWD_MULTIPLIER = 2.0


class RooflineCostModel:
    """``ms = bytes moved / bandwidth`` per shard, summed over a rank; backward a multiple of forward.

    Additive, so it also offers the incremental ``encode_shards``/``combine`` pair the
    searchers use (every code is zero; a rank is the sum of its shards' times).
    """

    code_width = 1
    time_width = 2  # own times: fwd, bwd
    split_batches = False

    def __init__(self, bytes_per_ms: float = 1.0, bwd_multiplier: float = 2.0, profile: str = "",
                 source: str = "fitted") -> None:
        self.bytes_per_ms = bytes_per_ms
        self.bwd_multiplier = bwd_multiplier
        self.profile = profile
        self.metadata = {"source": source, "optimizers": ["sgd"]}

    @classmethod
    def published(cls, profile: str) -> "RooflineCostModel":
        """The roofline of a GPU profile from the peak HBM bandwidth its ``profile.json`` publishes, with
        its source (no fitting: predicted, never measured)."""
        figures = get_profile(profile).published
        if figures is None:
            raise InputError("profile", f"profile {profile!r} publishes no HBM bandwidth (a CPU profile)",
                             "train a model for it: shardplan train")
        peak, source = figures.hbm_bytes_per_s, figures.hbm_source
        return cls(bytes_per_ms=peak * LOOKUP_BANDWIDTH_EFFICIENCY / 1e3, bwd_multiplier=PUBLISHED_BWD_MULTIPLIER,
                   profile=profile, source=f"{source}; x{LOOKUP_BANDWIDTH_EFFICIENCY} lookup efficiency and "
                   f"backward {PUBLISHED_BWD_MULTIPLIER:g}x forward, as TorchRec's planner assumes")

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

    def encode_shards(self, specs: list[ShardSpec]) -> tuple[np.ndarray, np.ndarray]:
        fwd, bwd = self.predict([[s] for s in specs])
        return np.zeros((len(specs), self.code_width), np.float32), np.stack([fwd, bwd], axis=1)

    def combine(self, code_sum: np.ndarray, time_sum: np.ndarray, count: np.ndarray) -> np.ndarray:
        count = np.asarray(count).reshape(-1, 1)
        return np.where(count > 0, np.asarray(time_sum, dtype=float), 0.0)


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
