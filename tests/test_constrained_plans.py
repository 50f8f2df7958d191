"""bench/constrained_plans.py: the recipes pin the right tables, every plan keeps them, and a run resumes."""
import shutil
import sys

import pandas as pd

import shardplan


def test_constrained_plans_pins_tables_and_resumes(tmp_path, monkeypatch, load_script):
    cp = load_script("bench/constrained_plans.py")
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy("data/tasks/cpu-bench/cpu-bench-00.json", suite)
    monkeypatch.setattr(cp, "SEARCHERS", ("neuroshard", "greedy-size"))
    argv = ["constrained_plans.py", "--suite", str(suite), "--out", str(tmp_path), "--write-suite", str(tmp_path / "w")]
    monkeypatch.setattr(sys, "argv", argv)
    cp.main()
    rows = pd.read_csv(tmp_path / "constrained-plans-suite-cpu-2c.csv")
    assert len(rows) == 4 and rows.feasible.all()
    for recipe, (smallest, median, largest) in cp.RECIPES.items():
        task = shardplan.load_task(tmp_path / "w" / recipe / f"cpu-bench-00-{recipe}.json")
        pinned = [t.sharding_types for t in sorted(task.tables, key=lambda t: shardplan.memory.table_bytes(task, t))]
        assert (pinned[0], pinned[len(pinned) // 2], pinned[-1]) == ((smallest,), (median,), (largest,))
        assert sum(p is not None for p in pinned) == 3
    rows.loc[0, "predicted_ms"] = -1.0  # a kept row is not planned again
    rows.to_csv(tmp_path / "constrained-plans-suite-cpu-2c.csv", index=False)
    monkeypatch.setattr(sys, "argv", argv + ["--resume"])
    cp.main()
    again = pd.read_csv(tmp_path / "constrained-plans-suite-cpu-2c.csv")
    assert len(again) == 4 and again.predicted_ms.iloc[0] == -1.0
    assert "| gloo | greedy-size | 1 of 1 |" in (tmp_path / "constrained-plans-suite-cpu-2c.md").read_text()
