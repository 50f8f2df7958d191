"""bench/plan_accuracy.py: a run resumes from the tasks an earlier start of the same command finished."""
from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from shardplan.cost.estimator import load_estimator
from shardplan.cost.specs import rank_specs
from shardplan.errors import InputError
from shardplan.formats import write_json_atomic


def _args(**over) -> argparse.Namespace:
    base = {"suite": "data/tasks/unseen-b", "profile": "cpu-2c-nested", "searcher": "torchrec", "rounds": 2,
            "visits": 4, "optimizer": None, "calibrate": True, "name": "x", "out": "bench/results", "wait_fit": 10.0,
            "fit_streak": 2, "fit_after": True, "retakes": 2}
    return argparse.Namespace(**{**base, **over})


def test_a_partial_run_resumes_only_under_the_same_protocol(load_script, tmp_path) -> None:
    pa = load_script("bench/plan_accuracy.py")
    partial = tmp_path / "run.partial.json"
    assert pa.resumed(partial, _args()) == ([], [])  # nothing to resume
    rows = [{"task": "unseen-b-00", "rank": 0, "cal_fwd_ms": np.float64(1.5), "fit_tilt": float("nan")}]
    write_json_atomic(partial, {"options": pa.protocol(_args()), "rows": rows})  # no drops: a file of before
    back, dropped = pa.resumed(partial, _args(wait_fit=30.0, name="y", retakes=0))  # not the protocol
    assert back[0]["cal_fwd_ms"] == 1.5 and math.isnan(back[0]["fit_tilt"]) and back[0]["task"] == "unseen-b-00"
    assert dropped == []
    with pytest.raises(InputError, match=r"--name: .*other rounds, visits \(rounds=2, visits=4\)"):
        pa.resumed(partial, _args(rounds=1, visits=1))
    with pytest.raises(InputError, match=r"other fit_streak \(fit_streak=2\)"):  # another gate admits other tasks
        pa.resumed(partial, _args(fit_streak=1))
    partial.write_text(json.dumps({"rows": []})[:-3])
    with pytest.raises(InputError, match="not a partial run"):
        pa.resumed(partial, _args())


def test_only_measured_writes_the_part_and_keeps_it_resumable(load_script, tmp_path, monkeypatch) -> None:
    pa = load_script("bench/plan_accuracy.py")
    args = ["--suite", "data/tasks/unseen-b", "--profile", "cpu-2c-nested", "--rounds", "2", "--visits", "4",
            "--calibrate", "--name", "part", "--out", str(tmp_path), "--only-measured"]
    monkeypatch.setattr("sys.argv", ["plan_accuracy.py", *args])
    with pytest.raises(InputError, match="--only-measured: no task of part"):  # nothing measured yet
        pa.main()
    row = {"task": "unseen-b-00", "rank": 0, "tables": 3, "shards": 2, "rank_signature": "abc",
           "model": load_estimator("cpu-2c-nested").compute_name,  # today's: not priced again
           "pred_fwd_ms": 4.0, "pred_bwd_ms": 6.0, "meas_fwd_ms": 5.0, "meas_bwd_ms": 5.0, "reference_slowdown": 2.1,
           "cal_fwd_ms": 4.5, "cal_bwd_ms": 5.5, "cal_factor": 2.0, "cal_features": "ms,held,touched_per_ms",
           "cal_labels": "passed the quiet gate", "cal_round_spread": 1.05, "cal_reference_slowdown": 2.0,
           "fit_label_ratio": 0.95, "fit_reference": 1.5, "fit_tilt": 0.97}
    options = {"suite": "data/tasks/unseen-b", "profile": "cpu-2c-nested", "searcher": "torchrec", "rounds": 2,
               "visits": 4, "optimizer": None, "calibrate": True, "fit_streak": 1, "fit_after": False}
    write_json_atomic(tmp_path / "part.partial.json", {"options": options, "rows": [row]})
    pa.main()  # measures nothing: the one task measured is written out
    md = (tmp_path / "part.md").read_text()
    assert "Part of a run: only the 1 tasks" in md and "| unseen-b-00 | 1 | 2 | 0.0% | +0.0% | 0.0% | +0.0% |" in md
    assert (tmp_path / "part.partial.json").exists()  # the run can still be resumed


def test_tasks_measures_the_named_tasks_in_order_and_keeps_the_run_resumable(load_script, tmp_path,
                                                                           monkeypatch) -> None:
    pa = load_script("bench/plan_accuracy.py")
    base = ["plan_accuracy.py", "--suite", "data/tasks/unseen-b", "--profile", "cpu-2c-nested", "--name", "part",
            "--out", str(tmp_path)]
    monkeypatch.setattr("sys.argv", [*base, "--tasks", "unseen-b-01,unseen-b-99"])
    with pytest.raises(InputError, match=r"--tasks: unseen-b-99: no such task file in data/tasks/unseen-b"):
        pa.main()
    with pytest.raises(SystemExit):  # a name twice is a usage error
        pa.build_parser().parse_args(["--tasks", "unseen-b-01,unseen-b-01"])
    measured = []

    def rows(plan, task, args) -> list[dict]:  # the rows of a rank measured at 10 ms, as predicted
        measured.append(task.name)
        return [{"task": task.name, "rank": 0, "tables": len(task.tables), "shards": 1, "rank_signature": "abc",
                 "model": plan.cost.extra["compute_model"], "pred_fwd_ms": 4.0, "pred_bwd_ms": 6.0,
                 "meas_fwd_ms": 4.0, "meas_bwd_ms": 6.0, "reference_slowdown": 1.0}]

    monkeypatch.setattr(pa, "task_rows", rows)
    monkeypatch.setattr("shardplan.cost.fit_gate.fitness.wait_until_fit", lambda *a, **k: None)  # no probe
    monkeypatch.setattr("sys.argv", [*base, "--tasks", "unseen-b-02,unseen-b-00"])
    pa.main()
    assert measured == ["unseen-b-02", "unseen-b-00"]
    assert "Part of a run: only the 2 tasks" in (tmp_path / "part.md").read_text()
    monkeypatch.setattr("sys.argv", [*base, "--tasks", "unseen-b-00,unseen-b-01"])
    pa.main()  # resumed: the task measured already is not measured again
    assert measured == ["unseen-b-02", "unseen-b-00", "unseen-b-01"]
    saved = json.loads((tmp_path / "part.partial.json").read_text())
    assert [r["task"] for r in saved["rows"]] == measured  # kept for the rest of the suite


def test_rows_another_model_priced_are_priced_again_by_todays(load_script) -> None:
    """A run resumed after the profile's model was retrained reports one model, not a blend of two."""
    pa = load_script("bench/plan_accuracy.py")
    args = _args(suite="data/tasks/unseen-b")
    est = load_estimator("cpu-2c-nested")
    task = pa.suite_task(pa.suite_paths(pa.Path(args.suite), ["unseen-b-00"])[0], args)
    plan = pa.get_searcher("torchrec").plan(task, est)
    specs = rank_specs(plan)
    rows = [{"task": "unseen-b-00", "rank": r, "rank_signature": pa.rank_signature(specs[r]), "model": "an older one",
             "pred_fwd_ms": 1.0, "pred_bwd_ms": 1.0} for r in (0, 1)]
    rows.append({"task": "unseen-b-01", "rank": 0, "rank_signature": "xyz", "model": est.compute_name,
                 "pred_fwd_ms": 2.0, "pred_bwd_ms": 3.0})  # today's model priced it: left as it is
    back, stale = pa.repriced(rows, args, est)
    assert stale == ["unseen-b-00"] and back[2] == rows[2]
    for r in (0, 1):
        assert back[r]["model"] == est.compute_name
        assert (back[r]["pred_fwd_ms"], back[r]["pred_bwd_ms"]) == (plan.cost.per_rank[r].fwd_compute_ms,
                                                                  plan.cost.per_rank[r].bwd_compute_ms)
    rows[0] = {**rows[0], "rank_signature": "not this plan's"}
    with pytest.raises(InputError, match="unseen-b-00 rank 0 was measured on another plan"):
        pa.repriced(rows, args, est)
    rows[0] = {**rows[0], "task": "unseen-z-00"}
    with pytest.raises(InputError, match="--suite: unseen-z-00, measured in this run, is no longer a task"):
        pa.repriced(rows, args, est)
