"""bench/plan_diff.py: a run's plans are written, and a second run names exactly the plans that moved."""
import json
import shutil
import sys


def test_plan_diff_names_the_plans_that_moved(tmp_path, monkeypatch, capsys, load_script):
    pd_ = load_script("bench/plan_diff.py")
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in ("cpu-bench-00", "cpu-bench-01"):
        shutil.copy(f"data/tasks/cpu-bench/{name}.json", suite)
    argv = ["plan_diff.py", "--suite", str(suite), "--searchers", "greedy-size,greedy-lookup"]
    monkeypatch.setattr(sys, "argv", argv + ["--out", str(tmp_path / "a.json")])
    pd_.main()
    rows = json.loads((tmp_path / "a.json").read_text())
    assert len(rows) == 4 and all(r["predicted_ms"] > 0 and r["tables"] for r in rows)
    # one earlier plan made dearer and moved: the comparison finds that one and its ratio
    moved = next(r for r in rows if r["task"] == "cpu-bench-01" and r["searcher"] == "greedy-size")
    moved["predicted_ms"] *= 2
    moved["tables"] = moved["tables"][::-1]
    (tmp_path / "a.json").write_text(json.dumps(rows))
    monkeypatch.setattr(sys, "argv", argv + ["--out", str(tmp_path / "b.json"), "--against", str(tmp_path / "a.json")])
    capsys.readouterr()
    pd_.main()
    out = capsys.readouterr().out
    assert "| greedy-size | 1 of 2 | 0 -> 0 | cpu-bench-01 0.500;" in out
    assert "| greedy-lookup | 0 of 2 | 0 -> 0 | -; all planned both times: 1.000 |" in out
