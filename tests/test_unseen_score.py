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


def test_runs_of_part_of_a_suite_pool_only_with_min_runs(load_script, tmp_path) -> None:
    """A run that measured some tasks (gated, part way; ``plan_accuracy.py --tasks``) is left out of the
    whole-suite pool; with ``min_runs`` it counts, and only the ranks that many runs measured are scored."""
    estimator = load_estimator("cpu-2c")
    score = load_script("bench/unseen_score.py")
    runs_mod = load_script("bench/plan_accuracy_runs.py")
    suite = tmp_path / "mini"
    suite.mkdir()
    for name in ("cpu-bench-00", "cpu-bench-01"):
        shutil.copy(f"data/tasks/cpu-bench/{name}.json", suite)
    ranks = runs_mod.suite_ranks(suite, "torchrec", estimator)
    assert {k[0] for k in ranks} == {"cpu-bench-00", "cpu-bench-01"}
    for i, (level, tasks) in enumerate([(1.0, ("cpu-bench-00", "cpu-bench-01")), (2.0, ("cpu-bench-00",)),
                                        (4.0, ("cpu-bench-00",))]):
        keys = sorted(k for k in ranks if k[0] in tasks)
        pd.DataFrame({"task": [k[0] for k in keys], "rank": [k[1] for k in keys],
                      "rank_signature": [runs_mod.rank_signature(ranks[k]) for k in keys],
                      "cal_ms": [level] * len(keys), "meas_ms": [level] * len(keys),
                      "cal_features": ",".join(FEATURES)}).to_csv(tmp_path / f"runs-mini-{i}.csv", index=False)
    consensus = {}
    for min_runs in (None, 1, 2, 3):
        _, consensus[min_runs], n_runs = score.suite_consensus(suite, "p", "torchrec", "runs-{suite}-*.csv",
                                                               estimator, results=tmp_path, min_runs=min_runs)
        assert n_runs == (1 if min_runs is None else 3)
    assert len(consensus[None]) == len(ranks) and set(consensus[None].calibrated_ms) == {1.0}  # the whole run
    ours = consensus[1].calibrated_ms  # the first task in all three runs (median 2), the second in one (1)
    assert {t: set(g) for t, g in ours.groupby(level=0)} == {"cpu-bench-00": {2.0}, "cpu-bench-01": {1.0}}
    assert consensus[2].equals(consensus[3]) and set(consensus[3].index.get_level_values(0)) == {"cpu-bench-00"}
    with pytest.raises(InputError, match="--min-runs: no rank of .* by 4 or more of the 3 run"):
        score.suite_consensus(suite, "p", "torchrec", "runs-{suite}-*.csv", estimator, results=tmp_path, min_runs=4)
