"""bench/unseen_score.py: a suite's runs pooled into both instruments' consensus, for any model's prices."""
from __future__ import annotations

import shutil

import pandas as pd
import pytest

from shardplan.cost.calibration import FEATURES
from shardplan.cost.estimator import load_estimator
from shardplan.errors import InputError


def test_a_suites_runs_pool_into_both_instruments(load_script, tmp_path) -> None:
    estimator = load_estimator("cpu-2c")  # TorchRec plans without it; it prices the plan's cost block
    score = load_script("bench/unseen_score.py")
    runs_mod = load_script("bench/plan_accuracy_runs.py")
    suite = tmp_path / "mini"
    suite.mkdir()
    shutil.copy("data/tasks/cpu-bench/cpu-bench-00.json", suite)
    ranks = runs_mod.suite_ranks(suite, "torchrec", estimator)
    keys = sorted(ranks)
    for i, level in enumerate((1.0, 2.0, 4.0)):  # three runs; each rank's consensus is the middle one
        pd.DataFrame({"task": [k[0] for k in keys], "rank": [k[1] for k in keys],
                      "rank_signature": [runs_mod.rank_signature(ranks[k]) for k in keys],
                      "cal_ms": [level * (r + 1) for _, r in keys], "meas_ms": [level * 3.0] * len(keys),
                      "cal_features": ",".join(FEATURES)}).to_csv(tmp_path / f"runs-mini-{i}.csv", index=False)
    got, consensus, n_runs = score.suite_consensus(suite, "p", "torchrec", "runs-{suite}-*.csv", estimator,
                                                   results=tmp_path)
    assert got.keys() == ranks.keys() and n_runs == 3
    assert list(consensus.calibrated_ms) == pytest.approx([2.0 * (r + 1) for _, r in keys])
    assert list(consensus.label_protocol_ms) == pytest.approx([6.0] * len(keys))
    with pytest.raises(InputError, match="no runs of"):
        score.suite_consensus(suite, "p", "torchrec", "other-{suite}-*.csv", estimator, results=tmp_path)


def test_a_paired_profiles_runs_are_planned_with_its_optimizer(load_script, tmp_path) -> None:
    """Runs of ``plan_accuracy.py --optimizer`` are matched with plans of the tasks under that optimizer; a
    profile that does not price the tasks' own optimizer is an error, not a suite of skipped tasks."""
    estimator = load_estimator("cpu-2c-nested-rowwise-adagrad")
    runs_mod = load_script("bench/plan_accuracy_runs.py")
    suite = tmp_path / "mini"
    suite.mkdir()
    shutil.copy("data/tasks/cpu-bench/cpu-bench-00.json", suite)
    ranks = runs_mod.suite_ranks(suite, "torchrec", estimator, optimizer="rowwise_adagrad")
    assert ranks and {k[0] for k in ranks} == {"cpu-bench-00"}
    with pytest.raises(InputError, match="optimizer"):
        runs_mod.suite_ranks(suite, "torchrec", estimator)
