"""Two sets of saved plans of the same tasks, measured interleaved with TorchRec's on real kernels.

For a searcher change (not a model change: ``model_ab.py``), plan the suite
before and after it into two folders (``<task>.json`` each) and measure the
pairs: for every task where the two plans differ, plan A, plan B and
TorchRec's plan go to one measurement call (``measure_plans``: the ranks of
all three take turns visit by visit and share one divisor), repeated
``--calls`` times with the order of A and B swapped on every other call.
Reports B over A per task (median over the calls) and each side over TorchRec
where TorchRec plans the task. Measured = real FBGEMM kernel times (comm from
the comm model, as in the bench); predicted = the cost block the plan files
carry. Writes ``bench/results/plans-ab-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/plans_ab.py --a PLANS_BEFORE --b PLANS_AFTER --suite data/tasks/cpu-bench --name NAME
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.domain import Plan
from shardplan.errors import InputError, exit_status
from shardplan.execute.measure import measure_plans
from shardplan.formats import load_plan, load_task, write_text_atomic
from shardplan.search import get_searcher
from interleaved_args import add_interleaved_arguments  # siblings: bench/ is on sys.path when run
from provenance import provenance


def _signature(plan: Plan) -> list:
    return sorted((ts.name, ts.sharding_type, sorted((s.rank, s.row_offset, s.col_offset) for s in ts.shards))
                  for ts in plan.tables)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", type=Path, required=True, help="folder of plan files A (<task>.json)")
    ap.add_argument("--b", type=Path, required=True, help="folder of plan files B (<task>.json)")
    ap.add_argument("--calls", type=at_least(1), default=3, help="measurement calls per task (A and B swap order)")
    add_interleaved_arguments(ap)
    args = ap.parse_args()
    estimator = load_estimator(args.profile)
    load_before, rows = load1(), []
    pairs = []
    for path in sorted(args.suite.glob("*.json")):
        task = load_task(path)
        a, b = load_plan(args.a / f"{task.name}.json"), load_plan(args.b / f"{task.name}.json")
        if _signature(a) != _signature(b):
            pairs.append((task, a, b))
    print(f"{len(pairs)} tasks whose plans differ: {', '.join(t.name for t, _, _ in pairs)}")
    for task, a, b in tqdm(pairs, desc=f"plans A/B [{args.suite.name}]"):
        try:
            torchrec = get_searcher("torchrec").plan(task, estimator, seed=0)
        except InputError:  # TorchRec finds no plan: A and B are still compared
            torchrec = None
        for call in range(args.calls):
            plans = {"A": a, "B": b} if call % 2 == 0 else {"B": b, "A": a}
            if torchrec is not None:
                plans["torchrec"] = torchrec
            costs = measure_plans(list(plans.values()), args.profile, rounds=args.rounds, visits=args.visits)
            for (who, plan), cost in zip(plans.items(), costs):
                rows.append({"task": task.name, "ranks": task.topology.world_size, "call": call, "plan": who,
                             "measured_ms": cost.max_ms, "imbalance": cost.imbalance,
                             "predicted_ms": plan.cost.max_ms if plan.cost else np.nan,
                             "slowdown": cost.extra["slowdown"]})
    df = pd.DataFrame(rows)
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / f"plans-ab-{args.name}.csv", index=False)
    per_call = df.pivot_table(index=["task", "call"], columns="plan", values="measured_ms")
    ratios = pd.DataFrame({"B / A": per_call["B"] / per_call["A"]})
    if "torchrec" in per_call:
        ratios["A / TorchRec"] = per_call["A"] / per_call["torchrec"]
        ratios["B / TorchRec"] = per_call["B"] / per_call["torchrec"]
    table = ratios.groupby("task").median()
    pred = df.groupby(["task", "plan"]).predicted_ms.first().unstack()
    table["B / A predicted"] = pred["B"] / pred["A"]
    imb = df.groupby(["task", "plan"]).imbalance.median().unstack()
    table["A max/mean"], table["B max/mean"] = imb["A"], imb["B"]
    geo = float(np.exp(np.log(table["B / A"]).mean())) if len(table) else float("nan")
    print(table.to_string(float_format="%.3f"))
    print(f"B over A, measured (geomean over {len(table)} tasks, median of {args.calls} calls each): {geo:.3f}")
    md = [f"# Plans A/B on `{args.suite}`: {args.name}", "",
          *provenance(load_before, f"; divisor per call {df.slowdown.min():.2f}-{df.slowdown.max():.2f}x."), "",
          f"Plans A (`{args.a}`) and B (`{args.b}`) of the {len(table)} tasks where they differ, each task measured "
          f"in {args.calls} calls with TorchRec's plan where it has one ({args.rounds} rounds x {args.visits} visits, "
          "turns by visit; A and B swap order every other call): real FBGEMM CPU kernel times, comm from the "
          f"comm model; per task the median over the calls. B over A, measured: **{geo:.3f}** (geomean).", "",
          table.to_markdown(floatfmt=".3f"), ""]
    write_text_atomic(args.out / f"plans-ab-{args.name}.md", "\n".join(md))
    print(f"wrote {args.out / f'plans-ab-{args.name}.md'}")


if __name__ == "__main__":
    sys.exit(exit_status(main))
