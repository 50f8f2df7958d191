"""bench/probe_bracket.py: plan ranks measured one at a time between fitness probes, each measurement written
with both probes, and the gate applied afterwards on the probes alone."""
from __future__ import annotations

import argparse
import shutil
from types import SimpleNamespace

import pandas as pd
import pytest

from shardplan.cost import fitness
from shardplan.cost.calibration import FEATURES
from shardplan.cost.estimator import load_estimator
from shardplan.cost.fitness import Fitness
from shardplan.errors import InputError

TASK = "data/tasks/cpu-bench/cpu-bench-00.json"


def test_targets_are_named_ranks_of_the_plan_and_a_bad_one_is_refused(load_script) -> None:
    pb = load_script("bench/probe_bracket.py")
    assert pb.parse_target(f"{TASK}:0,2") == (pb.Path(TASK), [0, 2])
    for bad in (TASK, f"{TASK}:x", f"{TASK}:-1", ":1"):
        with pytest.raises(argparse.ArgumentTypeError, match="TASK_FILE:RANK,RANK"):
            pb.parse_target(bad)
    targets = pb.plan_targets([(pb.Path(TASK), [0, 1])], "cpu-2c", "torchrec")
    assert [(t.task, t.rank) for t in targets] == [("cpu-bench-00", 0), ("cpu-bench-00", 1)]
    assert all(t.specs and t.predicted_ms > 0 and len(t.signature) == 12 for t in targets)
    with pytest.raises(InputError, match="rank 99 holds no shards"):
        pb.plan_targets([(pb.Path(TASK), [99])], "cpu-2c", "torchrec")
    with pytest.raises(InputError, match="no task file"):
        pb.plan_targets([(pb.Path("nowhere.json"), [0])], "cpu-2c", "torchrec")


def test_each_measurement_is_written_between_two_probes_and_a_start_goes_on_in_turn(load_script, monkeypatch,
                                                                                   tmp_path) -> None:
    """The probe after one measurement is the probe before the next; a second start appends, next target in turn."""
    pb = load_script("bench/probe_bracket.py")
    targets = pb.plan_targets([(pb.Path(TASK), [0, 1])], "cpu-2c", "torchrec")
    ratios = iter([1.0, 1.3, 1.0, 1.0, 1.05, 1.0])  # fit, unfit, then fit
    monkeypatch.setattr(fitness, "probe", lambda p: Fitness(next(ratios), 1.0, 1.0))
    monkeypatch.setattr(pb, "calibrated_timing", lambda specs, *a, **k: SimpleNamespace(
        fwd_ms=1.0, bwd_ms=2.0 * len(specs), factor=1.1, passes=1, reference_slowdown=1.2))
    clock = iter([0.0, 0.0, 1.0, 2.0, 99.0, 0.0, 0.0, 99.0])  # start, then before each measurement
    monkeypatch.setattr(pb, "time", SimpleNamespace(monotonic=lambda: next(clock)))
    out = tmp_path / "m.csv"
    pb.measure(targets, "cpu-2c", 1.0, out)
    df = pd.read_csv(out)
    assert list(df["rank"]) == [0, 1, 0]
    assert list(df.before_label_ratio) == [1.0, 1.3, 1.0] and list(df.after_label_ratio) == [1.3, 1.0, 1.0]
    assert list(pb.bracket(pb.probe_fit(df, pb.BEFORE), pb.probe_fit(df, pb.AFTER))) == [
        "one fit", "one fit", "both fit"]
    pb.measure(targets, "cpu-2c", 1.0, out)  # a second start: the next target in turn
    assert list(pd.read_csv(out)["rank"]) == [0, 1, 0, 1]
    assert pb.starts(df) == 1 and pb.starts(pd.read_csv(out)) == 2  # the second start's own first probe


def test_the_report_holds_measurements_to_the_runs_consensus_by_their_probes(load_script, tmp_path) -> None:
    pb = load_script("bench/probe_bracket.py")
    runs_mod = load_script("bench/plan_accuracy_runs.py")
    suite = tmp_path / "mini"
    suite.mkdir()
    shutil.copy(TASK, suite)
    t = pb.plan_targets([(suite / "cpu-bench-00.json", [0])], "cpu-2c", "torchrec")[0]
    ranks = runs_mod.suite_ranks(suite, "torchrec", load_estimator("cpu-2c"))
    keys = sorted(ranks)
    # runs of the same plans: rank 0's consensus 10 ms; a fourth, of another plan, is not pooled
    for i, (ms, signature) in enumerate(((9.0, None), (10.0, None), (11.0, None), (50.0, "other"))):
        pd.DataFrame({"task": [k[0] for k in keys], "rank": [k[1] for k in keys],
                      "rank_signature": [signature if signature and k == (t.task, 0) else runs_mod.rank_signature(
                          ranks[k]) for k in keys],
                      "cal_ms": [ms if k == (t.task, 0) else 5.0 for k in keys], "meas_ms": 5.0,
                      "cal_features": ",".join(FEATURES)}).to_csv(tmp_path / f"run-mini-{i}.csv", index=False)
    cons = pb.consensus([t], "cpu-2c", "torchrec", "run-{suite}-*.csv", tmp_path)
    assert cons.to_dict("records") == [
        {"task": t.task, "rank": 0, "consensus_ms": pytest.approx(10.0), "suite": "mini", "consensus_runs": 3}]
    probe = lambda ratio, prefix: Fitness(ratio, 1.0, 1.0).columns(prefix)  # noqa: E731
    rows = pd.DataFrame([{"at": "2026-12-01 20:00:00", "task": t.task, "rank": 0, "predicted_ms": t.predicted_ms,
                          "cal_ms": ms, "cal_factor": 1.0, "passes": 1, "cal_reference_slowdown": 1.0,
                          **probe(b, pb.BEFORE), **probe(a, pb.AFTER)}
                         for ms, b, a in ((10.5, 1.0, 1.0), (13.0, 1.0, 1.3), (14.0, 1.3, 1.3))])
    md, df = pb.report(rows, [t], cons)
    assert list(df.bracket) == ["both fit", "one fit", "neither"]
    assert list(df.gap) == pytest.approx([0.05, 0.3, 0.4])
    text = "\n".join(md)
    assert "1 of 3 between two fit probes" in text and "| 10 ms or more | both fit |" in text
    assert "Probes: 4 in 1 start, of which 67% before a measurement passed; after 2 that passed, the next passed 50%." \
        in text
    # a second start probes afresh before its first measurement: one probe more than the chain of the first
    resumed = pd.concat([rows, rows.iloc[[0]]], ignore_index=True)
    assert pb.starts(resumed) == 2 and pb.starts(rows.iloc[:0]) == 0
    assert "Probes: 6 in 2 starts" in "\n".join(pb.report(resumed, [t], cons)[0])
    _, df = pb.report(rows, [t], cons, frozenset({(t.task, 0)}))
    assert set(df.length) == {"held apart"}
