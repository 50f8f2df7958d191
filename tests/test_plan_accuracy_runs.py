"""bench/plan_accuracy_runs.py: which runs of a suite pool into a consensus, and the consensus itself."""
from __future__ import annotations

import pandas as pd
import pytest

from shardplan.cost.calibration import FEATURES
from shardplan.cost.specs import ShardSpec


def _run(ranks, runs_mod, ms: list[float], signatures: list[str] | None = None, by: str = ",".join(FEATURES)):
    keys = list(ranks)
    return pd.DataFrame({"task": [k[0] for k in keys], "rank": [k[1] for k in keys],
                         "rank_signature": signatures or [runs_mod.rank_signature(ranks[k]) for k in keys],
                         "meas_ms": ms, "cal_ms": [2 * m for m in ms], "cal_features": by})


def test_only_runs_of_todays_plans_by_one_instrument_pool(load_script) -> None:
    runs_mod = load_script("bench/plan_accuracy_runs.py")
    ranks = {("t-0", 0): [ShardSpec("a", 100, 0, 100, 8, 2.0, 0.5, 64)],
             ("t-0", 1): [ShardSpec("b", 200, 0, 200, 16, 1.0, 0.5, 64), ShardSpec("c", 50, 0, 50, 4, 1.0, 0.5, 64)]}
    runs = {"one": _run(ranks, runs_mod, [1.0, 4.0]), "two": _run(ranks, runs_mod, [4.0, 1.0]),
            "three": _run(ranks, runs_mod, [2.0, 2.0]),
            "other plan": _run(ranks, runs_mod, [9.0, 9.0], signatures=["x", "y"]),
            "other neighbours": _run(ranks, runs_mod, [8.0, 8.0], by="shards")}
    meas, dropped = runs_mod.pooled_runs(runs, ranks, "cal_ms")
    assert list(meas.columns) == ["one", "two", "three"] and dropped == ["other plan", "other neighbours"]
    assert list(runs_mod.consensus_ms(meas)) == pytest.approx([4.0, 4.0])  # medians of 2, 8, 4 and 8, 2, 4
    meas, dropped = runs_mod.pooled_runs(runs, ranks, "meas_ms")  # the label protocol has no neighbours
    assert "other neighbours" in meas and dropped == ["other plan"]
    missing = {("t-0", 0): ranks[("t-0", 0)]}  # a run short of a rank of today's plans is another plan
    assert runs_mod.pooled_runs({"one": runs["one"]}, missing, "meas_ms")[1] == ["one"]


def test_a_run_is_compared_with_the_others_on_every_rank_and_on_the_long_ones(load_script) -> None:
    runs_mod = load_script("bench/plan_accuracy_runs.py")
    idx = pd.MultiIndex.from_tuples([("t", 0), ("t", 1), ("t", 2), ("t", 3)], names=["task", "rank"])
    meas = pd.DataFrame({"a": [5.0, 5.0, 20.0, 40.0], "b": [5.0, 5.0, 20.0, 40.0],
                         "c": [5.0, 7.0, 20.0, 50.0]}, index=idx)  # c: a short rank and a long one 40% and 25% off
    predicted = pd.Series([5.0, 5.0, 20.0, 40.0], index=idx)
    gaps = {g["run"]: g for g in runs_mod.run_gaps(meas, predicted, short_ms=10.0)}
    assert gaps["c"]["beyond"] == pytest.approx(0.5) and gaps["c"]["beyond_long"] == pytest.approx(0.5)
    assert gaps["c"]["gap_median_long"] == pytest.approx(0.125)  # median of 0% and 25% over ranks 2 and 3
    assert gaps["c"]["model_within"] == pytest.approx(0.5) and gaps["a"]["model_within"] == 1.0
    # a's others are b and c: their consensus is the geometric mean of two, so the long rank is 10.6% off
    assert gaps["a"]["beyond_long"] == 0.0 and gaps["a"]["gap_median_long"] == pytest.approx((1 - 40 / 2000 ** 0.5) / 2)
    assert runs_mod.run_gaps(meas[["a"]], predicted, short_ms=10.0) == []  # one run: no others
