"""Does the default's column-split margin make its plans faster? Measure them beside the plans without it.

For every task of a suite: ``neuroshard`` with ``split_margin=0`` (states
ranked by predicted cost alone, as before 2026-11-23 07:00 UTC), with the
margin given (``--margin``, default the shipped :data:`SPLIT_MARGIN`), and
TorchRec's plan where it finds one, measured in one call per task
(``measure_plans``: the ranks of all of them take turns visit by visit and
share one divisor). Where the two ``neuroshard`` plans are the same, it is
measured once and counts for both. Reports each plan's measured cost over
TorchRec's (geometric mean over the tasks TorchRec plans), margin over no
margin on the tasks where they differ, and how many plans are balanced
(measured max/mean at most 1.10). Measured = real FBGEMM CPU kernel times,
comm from the comm model; predicted = the committed neural model.
Resumable: finished tasks are kept in the CSV and skipped when run again.
Writes ``bench/results/split-margin-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/split_margin.py --suite data/tasks/cpu-bench --name cpu-bench
"""
from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.errors import InputError
from shardplan.execute.bench import geomean_vs
from shardplan.execute.measure import measure_plans
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher
from shardplan.search.neuroshard import SPLIT_MARGIN, NeuroShardBeam
from provenance import provenance  # a sibling: bench/ is on sys.path when run

WITHOUT, WITH = "no margin", "margin"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--suite", default="data/tasks/cpu-bench")
    ap.add_argument("--margin", type=float, default=SPLIT_MARGIN)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--visits", type=int, default=4)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    est = load_estimator(args.profile)
    csv = args.out / f"split-margin-{args.name}.csv"
    old = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
    done = set(old.task) if len(old) else set()
    rows = old.to_dict("records")
    load_before = load1()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in tqdm(sorted(Path(args.suite).glob("*.json")), desc=f"split margin [{Path(args.suite).name}]"):
        task = load_task(path)
        if task.name in done:
            continue
        plans = {WITHOUT: NeuroShardBeam(split_margin=0.0).plan(task, est, seed=0),
                 WITH: NeuroShardBeam(split_margin=args.margin).plan(task, est, seed=0)}
        same = plans[WITH].tables == plans[WITHOUT].tables
        if same:
            del plans[WITH]
        try:
            plans["torchrec"] = get_searcher("torchrec").plan(task, est, seed=0)
        except InputError:  # TorchRec finds no plan: the two margins are still compared
            pass
        costs = dict(zip(plans, measure_plans(list(plans.values()), args.profile, rounds=args.rounds,
                                              visits=args.visits)))
        if same:
            plans[WITH], costs[WITH] = plans[WITHOUT], costs[WITHOUT]
        for who, plan in plans.items():
            rows.append({"task": task.name, "ranks": task.topology.world_size, "searcher": who,
                         "plans_differ": not same, "measured_ms": costs[who].max_ms,
                         "imbalance": costs[who].imbalance, "predicted_ms": plan.cost.max_ms,
                         "slowdown": costs[who].extra["slowdown"],
                         "sharding_types": " ".join(sorted({t.sharding_type for t in plan.tables}))})
        pd.DataFrame(rows).to_csv(csv, index=False)  # after every task: a stopped run resumes here
    df = pd.DataFrame(rows)
    wide = df.pivot(index="task", columns="searcher", values="measured_ms")
    imb = df.pivot(index="task", columns="searcher", values="imbalance")
    vs_torchrec = geomean_vs(df, "torchrec").set_index("searcher")
    differ = df[df.plans_differ]
    over = geomean_vs(differ, WITHOUT).set_index("searcher").loc[WITH, f"geomean_vs_{WITHOUT}"]
    over_pred = geomean_vs(differ, WITHOUT, column="predicted_ms").set_index("searcher").loc[
        WITH, f"geomean_vs_{WITHOUT}"]
    summary = pd.DataFrame([{
        "plan": k, "measured / TorchRec (geomean)": vs_torchrec.loc[k, "geomean_vs_torchrec"],
        "balanced (max/mean <= 1.10)": f"{int((imb[k] <= 1.10).sum())} of {imb[k].notna().sum()}"}
        for k in (WITHOUT, WITH)])
    n_differ = differ.task.nunique()
    print(summary.to_string(index=False))
    print(f"margin over no margin where the plans differ ({n_differ} tasks): measured {over:.3f}, "
          f"predicted {over_pred:.3f}")
    md = [f"# Column-split margin on `{args.suite}`: {args.name}", "",
          *provenance(load_before, f" (this call); divisor per task {df.slowdown.min():.2f}-"
                      f"{df.slowdown.max():.2f}x."), "",
          f"`neuroshard` without the split margin and with `split_margin={args.margin}`, and TorchRec's plan, "
          f"measured in one call per task ({args.rounds} rounds x {args.visits} visits, turns by visit): real "
          f"FBGEMM CPU kernel times, comm from the comm model; predicted = the committed neural model. The plans "
          f"differ on {n_differ} of {df.task.nunique()} tasks; where they do not, one measurement counts for both. "
          f"{vs_torchrec.loc['torchrec', 'tasks_planned']} tasks TorchRec plans. Margin over no margin where "
          f"they differ: measured **{over:.3f}**, predicted {over_pred:.3f} (geomean).", "",
          summary.to_markdown(index=False, floatfmt=".3f"), "",
          wide.join(imb.add_suffix(" max/mean")).to_markdown(floatfmt=".3f"), ""]
    write_text_atomic(args.out / f"split-margin-{args.name}.md", "\n".join(md))
    print(f"wrote {args.out / f'split-margin-{args.name}.md'} and {csv}")


if __name__ == "__main__":
    main()
