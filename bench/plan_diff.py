"""Which plans a searcher change moves, and by how much predicted: plan a suite, then compare with another run.

Plans every task of ``--suite`` with each of ``--searchers`` (two processes at
a time, one thread each: the searchers are bounded by work, not time, so a
plan does not depend on it) and writes each plan's predicted cost (the
profile's committed models) and tables to ``--out`` (JSON). With
``--against`` an earlier such file, it prints, per searcher, how many plans
differ and each changed plan's predicted cost over the earlier one's. The
earlier side comes from the code before the change, run from a worktree::

    git worktree add /tmp/base <commit>
    PYTHONPATH=/tmp/base .venv/bin/python bench/plan_diff.py --suite data/tasks/gpu-multihost --profile h100 \\
        --out /tmp/before.json
    .venv/bin/python bench/plan_diff.py --suite data/tasks/gpu-multihost --profile h100 --out /tmp/after.json \\
        --against /tmp/before.json

Planning only: nothing is timed.
"""
from __future__ import annotations

import argparse
import json
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from shardplan.errors import InputError, exit_status


def _plan(args: tuple[str, str, str]) -> dict:
    """One task by one searcher, in a worker: its predicted cost and tables, or why there is none."""
    path, profile, searcher = args
    import torch

    from shardplan.cost.estimator import load_estimator
    from shardplan.formats import load_task, plan_to_dict
    from shardplan.search import get_searcher

    torch.set_num_threads(1)
    task = load_task(Path(path))
    row = {"task": task.name, "searcher": searcher}
    try:
        plan = get_searcher(searcher).plan(task, load_estimator(profile))
    except InputError as e:
        return {**row, "predicted_ms": None, "tables": None, "error": str(e).splitlines()[0]}
    return {**row, "predicted_ms": plan.cost.max_ms, "tables": plan_to_dict(plan)["tables"], "error": ""}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", required=True, help="a folder of shardplan/task@1 files")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--searchers", default="neuroshard,rl")
    ap.add_argument("--out", required=True, help="JSON file of this run's plans")
    ap.add_argument("--against", help="an earlier run's JSON file to compare with")
    args = ap.parse_args()
    paths = sorted(str(p) for p in Path(args.suite).glob("*.json"))
    if not paths:
        raise InputError("--suite", f"{args.suite} holds no task files", "pass a folder of shardplan/task@1 files")
    jobs = [(p, args.profile, s) for s in args.searchers.split(",") for p in paths]
    with ProcessPoolExecutor(max_workers=2) as pool:
        rows = list(pool.map(_plan, jobs))
    Path(args.out).write_text(json.dumps(rows) + "\n")
    print(f"{len(rows)} plans in {args.out}")
    if not args.against:
        return
    before = {(r["task"], r["searcher"]): r for r in json.loads(Path(args.against).read_text())}
    print("| searcher | plans changed | infeasible before -> after | predicted after / before (geometric mean) |")
    print("| --- | --- | --- | --- |")
    for s in args.searchers.split(","):
        now = [r for r in rows if r["searcher"] == s]
        old = [before[(r["task"], s)] for r in now]
        changed = [(r, b) for r, b in zip(now, old) if r["tables"] != b["tables"]]
        ratios = [f"{r['task']} {r['predicted_ms'] / b['predicted_ms']:.3f}" for r, b in changed
                  if r["predicted_ms"] and b["predicted_ms"]]
        both = [r["predicted_ms"] / b["predicted_ms"] for r, b in zip(now, old)
                if r["predicted_ms"] and b["predicted_ms"]]
        gm = f"; all planned both times: {float(np.exp(np.mean(np.log(both)))):.3f}" if both else ""
        infeasible = f"{sum(b['predicted_ms'] is None for b in old)} -> {sum(r['predicted_ms'] is None for r in now)}"
        print(f"| {s} | {len(changed)} of {len(now)} | {infeasible} | {', '.join(ratios) or '-'}{gm} |")


if __name__ == "__main__":
    sys.exit(exit_status(main))
