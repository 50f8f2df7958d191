"""bench/noise_decomposition.py: the within-plan split across runs, and a candidate model's re-pricing."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from shardplan.cost.specs import ShardSpec


def _runs(persistent: float, run_to_run: float, n_runs: int = 6, seed: int = 0,
          power: float = 1.0) -> list[pd.DataFrame]:
    """Bench rows of 60 four-rank plans whose ranks measure predicted ** power x exp(a rank's own lasting
    error + a fresh error every run), each run also slowed by one factor per plan (which a plan's mean
    absorbs)."""
    rng = np.random.default_rng(seed)
    pred = rng.uniform(5.0, 20.0, (60, 4))
    lasting = rng.normal(0.0, persistent, pred.shape)
    runs = []
    for _ in range(n_runs):
        meas = pred ** power * np.exp(lasting + rng.normal(0.0, run_to_run, pred.shape)) * rng.uniform(1, 2, (60, 1))
        runs.append(pd.DataFrame({
            "task": [f"t{i:02d}" for i in range(60)], "searcher": "neuroshard", "valid": True,
            "predicted_rank_compute_ms": [json.dumps(p.tolist()) for p in pred],
            "measured_rank_compute_ms": [json.dumps(m.tolist()) for m in meas]}))
    return runs


def test_across_runs_splits_a_lasting_error_from_the_instrument(load_script) -> None:
    nd = load_script("bench/noise_decomposition.py")
    row = nd.across_runs(_runs(persistent=0.08, run_to_run=0.03)).iloc[0]
    assert row["runs"] == 6 and row["ranks"] == 240
    # within a plan of 4 ranks, demeaning keeps 3/4 of each variance
    assert row["persistent sd (within plan)"] == pytest.approx(0.08 * np.sqrt(0.75), rel=0.15)
    assert row["run-to-run sd (within plan)"] == pytest.approx(0.03 * np.sqrt(0.75), rel=0.15)


def test_the_two_slopes_tell_a_compressing_model_from_a_noisy_one(load_script) -> None:
    nd = load_script("bench/noise_decomposition.py")
    exact = nd.across_runs(_runs(persistent=0.0, run_to_run=0.0, power=0.8)).iloc[0]
    # measured = predicted ** 0.8 within every plan: the model spreads a plan's ranks 1.25x too wide
    assert exact["slope measured on predicted"] == pytest.approx(0.8, abs=1e-6)
    assert exact["slope predicted on measured"] == pytest.approx(1.25, abs=1e-6)
    noisy = nd.across_runs(_runs(persistent=0.25, run_to_run=0.0)).iloc[0]
    # errors independent of the prediction (noise): one slope near 1, the other below, neither above
    assert noisy["slope measured on predicted"] == pytest.approx(1.0, abs=0.1)
    assert noisy["slope predicted on measured"] < 0.9


class _Flat:
    """A stand-in estimator: every rank costs ``per_shard`` ms per shard, split 1:2 fwd:bwd."""

    def __init__(self, per_shard: float) -> None:
        self.per_shard = per_shard

    def rank_compute(self, ranks: list[list[ShardSpec]]) -> list[tuple[float, float]]:
        return [(self.per_shard * len(r) / 3, 2 * self.per_shard * len(r) / 3) for r in ranks]


def test_a_candidate_prices_only_the_plans_that_were_measured(load_script) -> None:
    nd = load_script("bench/noise_decomposition.py")
    spec = ShardSpec("t", 100, 0, 100, 8, 2.0, 1.0, 512)
    plans = {("a", "neuroshard"): [[spec], [spec, spec]], ("b", "neuroshard"): [[spec], [spec]]}
    run = pd.DataFrame({"task": ["a", "b"], "searcher": "neuroshard", "valid": True,
                        # task b's row was priced 3.0 a rank: another plan than the one made again (1.0, 1.0)
                        "predicted_rank_compute_ms": [json.dumps([1.0, 2.0]), json.dumps([3.0, 3.0])],
                        "measured_rank_compute_ms": [json.dumps([1.1, 2.1]), json.dumps([3.3, 3.3])]})

    def plan_ranks(task: str, searcher: str) -> list[list[ShardSpec]]:
        return plans[(task, searcher)]

    (out,), dropped = nd.repriced([run], _Flat(1.0), _Flat(5.0), plan_ranks)
    assert dropped == 1 and list(out.task) == ["a"]
    assert json.loads(out.iloc[0].predicted_rank_compute_ms) == pytest.approx([5.0, 10.0])
    (again,), _ = nd.repriced([out], _Flat(5.0), _Flat(1.0), plan_ranks)
    assert json.loads(again.iloc[0].predicted_rank_compute_ms) == pytest.approx([1.0, 2.0])
