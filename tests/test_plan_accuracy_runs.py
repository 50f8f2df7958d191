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
