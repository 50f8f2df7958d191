"""Does measured refinement make the default's plans faster? Measure them beside the unrefined ones and TorchRec's.

For every task of a suite: the default searcher's plan, that plan refined
against timings of its ranks (:func:`shardplan.search.refine.refine`, which
times plans itself), and TorchRec's plan where it finds one. The three then go
to one fresh measurement call (``measure_plans``: the ranks of all of them take
turns visit by visit and share one divisor), independent of the timings the
refinement chose by, so its selection on their noise does not count. Reports
each plan's measured cost over TorchRec's (geometric mean over the tasks
TorchRec plans), refined over unrefined on every task, and how many plans are
balanced (measured max/mean at most 1.10). Measured = real FBGEMM CPU kernel
times, comm from the comm model; predicted = the committed neural model.
Resumable: finished tasks are kept in the CSV and skipped when run again.
Writes ``bench/results/refine-effect-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/refine_effect.py --suite data/tasks/cpu-bench --name cpu-bench
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1
from shardplan.errors import InputError, exit_status
from shardplan.execute.bench import geomean_vs
from shardplan.execute.measure import measure_plans
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import DEFAULT_SEARCHER, get_searcher
from shardplan.search.refine import measuring_timer, refine
from interleaved_args import add_interleaved_arguments  # siblings: bench/ is on sys.path when run
from provenance import provenance

REFINED = "refined"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=at_least(1), default=3, help="refinement timings per plan")
    ap.add_argument("--no-alternatives", dest="alternatives", action="store_false",
                    help="refine the default's pick alone, without timing the beam's runners-up beside it")
    add_interleaved_arguments(ap)
    args = ap.parse_args()
    est = load_estimator(args.profile)
    timer = measuring_timer(args.profile, rounds=args.rounds, visits=args.visits)
    csv = args.out / f"refine-effect-{args.name}.csv"
    old = pd.read_csv(csv) if csv.exists() else pd.DataFrame()
    done = set(old.task) if len(old) else set()
    rows = old.to_dict("records")
    load_before = load1()
    args.out.mkdir(parents=True, exist_ok=True)
    for path in tqdm(sorted(Path(args.suite).glob("*.json")), desc=f"refine effect [{Path(args.suite).name}]"):
        task = load_task(path)
        if task.name in done:
            continue
        found = get_searcher(DEFAULT_SEARCHER).plan_shortlist(task, est, seed=0)
        plans = {DEFAULT_SEARCHER: found[0]}
        plans[REFINED] = refine(found[0], est, timer, iterations=args.iterations,
                                alternatives=found[1:] if args.alternatives else ())
        try:
            plans["torchrec"] = get_searcher("torchrec").plan(task, est, seed=0)
        except InputError:  # TorchRec finds no plan: refined and unrefined are still compared
            pass
        costs = measure_plans(list(plans.values()), args.profile, rounds=args.rounds, visits=args.visits)
        info = plans[REFINED].search["refine"]
        for (who, plan), cost in zip(plans.items(), costs):
            rows.append({"task": task.name, "ranks": task.topology.world_size, "searcher": who,
                         "measured_ms": cost.max_ms, "imbalance": cost.imbalance, "predicted_ms": plan.cost.max_ms,
                         "slowdown": cost.extra["slowdown"],
                         "refine_seconds": info["seconds"] if who == REFINED else None,
                         "refine_moved": info["chosen"] > 0 if who == REFINED else None,
                         "refine_alternatives": info["alternatives"] if who == REFINED else None})
        pd.DataFrame(rows).to_csv(csv, index=False)  # after every task: a stopped run resumes here
    df = pd.DataFrame(rows)
    wide = df.pivot(index="task", columns="searcher", values="measured_ms")
    imb = df.pivot(index="task", columns="searcher", values="imbalance")
    vs_torchrec = geomean_vs(df, "torchrec").set_index("searcher")
    summary = pd.DataFrame([{
        "plan": k, "measured / TorchRec (geomean)": vs_torchrec.loc[k, "geomean_vs_torchrec"],
        "balanced (max/mean <= 1.10)": f"{int((imb[k] <= 1.10).sum())} of {imb[k].notna().sum()}"}
        for k in (DEFAULT_SEARCHER, REFINED)])
    refined_over = geomean_vs(df, DEFAULT_SEARCHER).set_index("searcher").loc[REFINED, f"geomean_vs_{DEFAULT_SEARCHER}"]
    ref = df[df.searcher == REFINED]
    print(summary.to_string(index=False))
    print(f"refined over {DEFAULT_SEARCHER}, measured (geomean over {len(wide)} tasks): {refined_over:.3f}")
    md = [f"# Measured refinement on `{args.suite}`: {args.name}", "",
          *provenance(load_before, f" (this call); divisor per task {df.slowdown.min():.2f}-"
                      f"{df.slowdown.max():.2f}x."), "",
          f"`{DEFAULT_SEARCHER}`'s plan, the same plan refined against timings of its ranks "
          f"({args.iterations} iterations at most, "
          + (f"after timing the beam's runners-up with it ({ref.refine_alternatives.median():.0f} median); "
             if args.alternatives else "the pick alone; ")
          + f"{ref.refine_seconds.median():.0f} s median, "
          f"{ref.refine_seconds.max():.0f} s at most; the refined plan differs on {int(ref.refine_moved.sum())} of "
          f"{len(ref)} tasks) and TorchRec's plan, measured afresh in one call per task ({args.rounds} rounds x "
          f"{args.visits} visits, turns by visit): real FBGEMM CPU kernel times, comm from the comm model. "
          f"{vs_torchrec.loc['torchrec', 'tasks_planned']} tasks TorchRec plans. Refined over unrefined, "
          f"measured: **{refined_over:.3f}** (geomean over {len(wide)} tasks).", "",
          summary.to_markdown(index=False, floatfmt=".3f"), "",
          wide.join(imb.add_suffix(" max/mean")).to_markdown(floatfmt=".3f"), ""]
    write_text_atomic(args.out / f"refine-effect-{args.name}.md", "\n".join(md))
    print(f"wrote {args.out / f'refine-effect-{args.name}.md'} and {csv}")


if __name__ == "__main__":
    sys.exit(exit_status(main))
