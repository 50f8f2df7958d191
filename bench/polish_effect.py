"""What the pairwise polish does to the model-driven searchers' plans, by predicted cost.

Every task of each suite is planned by ``neuroshard``, ``neuroshard-tw`` and
``rl`` twice: as shipped, and with ``pairwise_polish=False``. Costs are the
neural cost model's predictions plus the comm model (no measurement), so this
compares search quality under one model; the measured effect is in the
benchmark. Writes ``bench/results/polish-effect-<profile>.{md,csv}``.

    .venv/bin/python bench/polish_effect.py
"""
from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import machine_stamp
from shardplan.errors import exit_status
from shardplan.formats import load_task, write_text_atomic
from shardplan.search.neuroshard import NeuroShardBeam, NeuroShardTableWise
from shardplan.search.rl import RLSearcher

SEARCHERS = {"neuroshard": NeuroShardBeam, "neuroshard-tw": NeuroShardTableWise, "rl": RLSearcher}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--suites", default="data/tasks/cpu-bench,data/tasks/unseen-a")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    est = load_estimator(args.profile)
    rows = []
    for suite in args.suites.split(","):
        for path in tqdm(sorted(Path(suite).glob("*.json")), desc=Path(suite).name):
            task = load_task(path)
            for name, cls in SEARCHERS.items():
                for polished in (False, True):
                    plan = cls(pairwise_polish=polished).plan(task, est)
                    ranks = np.array([r.total_ms for r in plan.cost.per_rank])
                    rows.append({"suite": Path(suite).name, "task": task.name, "ranks": task.topology.world_size,
                                 "searcher": name, "polish": polished, "predicted_ms": ranks.max(),
                                 "imbalance": ranks.max() / ranks.mean(), "plan_seconds": plan.search["seconds"]})
    df = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / f"polish-effect-{args.profile}.csv", index=False)
    summary = []
    for (suite, name), g in df.groupby(["suite", "searcher"], sort=False):
        off, on = g[~g.polish].set_index("task"), g[g.polish].set_index("task")
        summary.append({"suite": suite, "searcher": name,
                        "polished / unpolished (geomean)":
                            float(np.exp(np.log(on.predicted_ms / off.predicted_ms).mean())),
                        "best gain": float((on.predicted_ms / off.predicted_ms).min()),
                        **{f"max/mean <= {b:.2f} (off -> on)":
                           f"{(off.imbalance <= b).sum()} -> {(on.imbalance <= b).sum()} of {len(on)}"
                           for b in (1.10, 1.05)},
                        "median planning s (off -> on)":
                            f"{off.plan_seconds.median():.2f} -> {on.plan_seconds.median():.2f}"})
    table = pd.DataFrame(summary).to_markdown(index=False, floatfmt=".3f")
    print(table)
    write_text_atomic(out / f"polish-effect-{args.profile}.md", "\n".join([
        f"# Pairwise polish on `{args.profile}`: predicted effect ({dt.date.today()}, {machine_stamp()['cpu_model']})",
        "", "Predicted plan cost (neural compute model + comm model) of each searcher's plan with the polish "
        "over the same searcher's plan without it (`pairwise_polish=False`), per task, geometric mean; "
        "max/mean = slowest rank over the mean rank, predicted. Command: "
        f"`.venv/bin/python bench/polish_effect.py {shlex.join(sys.argv[1:])}`. Per task: the CSV beside this file.",
        "", table, ""]))


if __name__ == "__main__":
    sys.exit(exit_status(main))
