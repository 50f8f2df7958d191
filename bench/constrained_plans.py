"""Plans of tasks with per-table sharding types: does every searcher keep them, and what do they cost?

A trainer's TorchRec constraints pin some tables to some sharding types. Each
task of a suite gets one of two recipes of such constraints:

* ``pinned``: the smallest table (by bytes) a replica on every rank
  (``data_parallel``), the largest ``row_wise``, the median ``column_wise``;
* ``gloo``: the same, but the largest ``column_wise`` (TorchRec's CPU sharder has no row-wise,
  so TorchRec's planner can plan these).

Each searcher plans every task; a plan that broke a constraint would be refused
(``Searcher._finish``), so a plan here kept them all. Costs are the named
profile's predictions (the neural model and the comm model; nothing is
timed), so this compares search under one model. ``--write-suite DIR`` also
writes the constrained tasks, for ``shardplan bench --suite`` to measure on a
fit host. Writes ``bench/results/constrained-plans-<suite>-<profile>.{md,csv}``.

    .venv/bin/python bench/constrained_plans.py --suite data/tasks/cpu-bench
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import machine_stamp
from shardplan.errors import InputError, exit_status
from shardplan.formats import load_task, save_task, task_to_dict, write_text_atomic
from shardplan.memory import table_bytes
from shardplan.search import get_searcher

RECIPES = {"pinned": ("data_parallel", "column_wise", "row_wise"),
           "gloo": ("data_parallel", "column_wise", "column_wise")}
SEARCHERS = ("neuroshard", "rl", "neuroshard-tw", "greedy-cost", "greedy-lookup", "greedy-size", "torchrec")


def constrained(task_path: Path, recipe: str) -> dict:
    """The task of ``task_path`` as a dict, its smallest, median and largest tables given ``recipe``'s types."""
    task = load_task(task_path)
    smallest, median, largest = RECIPES[recipe]
    by_size = sorted(task.tables, key=lambda t: (table_bytes(task, t), t.name))
    wanted = {by_size[0].name: smallest, by_size[len(by_size) // 2].name: median, by_size[-1].name: largest}
    out = task_to_dict(task)
    out["name"] = f"{task.name}-{recipe}"
    out["tables"] = [{**t, "sharding_types": [wanted[t["name"]]]} if t["name"] in wanted else t
                     for t in out["tables"]]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="data/tasks/cpu-bench", help="a folder of shardplan/task@1 files")
    ap.add_argument("--profile", default="cpu-2c", help="the profile whose models price the plans")
    ap.add_argument("--write-suite", default=None, help="also write the constrained tasks to DIR/<recipe>/")
    ap.add_argument("--out", default="bench/results", help="folder for the results")
    ap.add_argument("--resume", action="store_true",
                    help="keep the rows of the results CSV already written (an interrupted run) and plan the rest")
    args = ap.parse_args()
    est = load_estimator(args.profile)
    paths = sorted(Path(args.suite).glob("*.json"))
    if not paths:
        raise InputError("suite", f"{args.suite} holds no task files", "pass a folder of shardplan/task@1 files")
    suite = Path(args.suite).name
    stem = Path(args.out) / f"constrained-plans-{suite}-{args.profile}"
    rows = pd.read_csv(stem.with_suffix(".csv")).to_dict("records") if args.resume and stem.with_suffix(
        ".csv").exists() else []
    done = {(r["recipe"], r["task"], r["searcher"]) for r in rows}
    for recipe in RECIPES:
        for path in tqdm(paths, desc=f"plan {recipe}"):
            as_dict = constrained(path, recipe)
            task = load_task(as_dict)
            if args.write_suite:
                save_task(task, Path(args.write_suite) / recipe / f"{task.name}.json")
            for name in SEARCHERS:
                if (recipe, task.name, name) in done:
                    continue
                try:
                    plan = get_searcher(name).plan(task, est)
                    rows.append({"recipe": recipe, "task": task.name, "searcher": name, "feasible": True,
                                 "predicted_ms": round(plan.cost.max_ms, 4), "error": ""})
                except InputError as e:
                    rows.append({"recipe": recipe, "task": task.name, "searcher": name, "feasible": False,
                                 "predicted_ms": float("nan"), "error": str(e).splitlines()[0][:160]})
            write_text_atomic(stem.with_suffix(".csv"), pd.DataFrame(rows).to_csv(index=False))  # per task
    df = pd.DataFrame(rows)
    lines = [f"# Plans of `{suite}` with per-table sharding types, priced by `{args.profile}` "
             f"({dt.date.today()}, {machine_stamp()['cpu_model']})", "",
             "Predicted plan cost (the profile's neural compute model and comm model; nothing timed). Recipes: "
             + "; ".join(f"`{r}`: smallest table {a}, median {b}, largest {c}" for r, (a, b, c) in RECIPES.items())
             + ". Cost ratio: geometric mean over the tasks both planned of the searcher's predicted cost over "
             "`neuroshard`'s; worse: tasks where it is above `neuroshard`'s by more than 0.1%.", "",
             "| recipe | searcher | planned | cost / neuroshard | worse than neuroshard |",
             "| --- | --- | --- | --- | --- |"]
    for recipe in RECIPES:
        part = df[df.recipe == recipe].pivot(index="task", columns="searcher", values="predicted_ms")
        for name in SEARCHERS:
            ratio = (part[name] / part["neuroshard"]).dropna()  # the tasks both planned
            gm = float(np.exp(np.log(ratio).mean())) if len(ratio) else float("nan")
            lines.append(f"| {recipe} | {name} | {int(part[name].notna().sum())} of {len(part)} | {gm:.3f} | "
                         f"{int((ratio > 1.001).sum())} |")
    lines += ["", f"Per task and searcher, with each refusal's reason: `{stem.with_suffix('.csv')}`.", "",
              f"Command: `.venv/bin/python bench/constrained_plans.py --suite {args.suite} --profile {args.profile}`"]
    write_text_atomic(stem.with_suffix(".md"), "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    sys.exit(exit_status(main))
