"""The GPU suite's CPU twin: plan on this machine, train every plan in the emulated-rank DLRM loop."""
from __future__ import annotations

import json

import shardplan
from shardplan.execute.dlrm_loop import run_loop


def test_emulated_rank_loop_trains_and_times_every_rank(task_dict) -> None:
    plan = shardplan.plan(shardplan.load_task(task_dict), searcher="greedy-cost")
    r = run_loop(plan, "cpu-2c", shardplan.estimator(), iterations=25, warmup=2)
    assert len(r.rank_fwd_ms) == 2 and all(x > 0 for x in r.rank_fwd_ms + r.rank_bwd_ms)
    assert r.iteration_ms == r.dense_ms + r.embedding_ms and r.samples_per_s > 0
    assert len(r.predicted_rank_ms) == 2 and r.rank_comm_ms  # predicted beside measured, comm modelled
    assert sum(r.losses[-5:]) < sum(r.losses[:5])  # it learns


def test_gpu_suite_plan_then_run_on_cpu(tmp_path, task_dict, load_script) -> None:
    suite = load_script("bench/gpu_suite.py")
    (tmp_path / "suite").mkdir()
    (tmp_path / "suite" / "t.json").write_text(json.dumps(task_dict))
    suite.main(["plan", "--profile", "cpu-2c", "--suite", str(tmp_path / "suite"), "--searchers",
                "torchrec,greedy-cost", "--plans", str(tmp_path / "plans"), "--out", str(tmp_path / "out")])
    predicted = (tmp_path / "out" / "gpu-plans-cpu-2c.md").read_text()
    assert "| torchrec | 1 | 1.000 |" in predicted and "| greedy-cost | 1 |" in predicted
    suite.main(["run", "--profile", "cpu-2c", "--plans", str(tmp_path / "plans"), "--iterations", "3",
                "--out", str(tmp_path / "out")])
    md = (tmp_path / "out" / "gpu-suite-cpu-2c.md").read_text()
    assert "| greedy-cost | 1 |" in md and "| torchrec | 1 | 1.000 |" in md
