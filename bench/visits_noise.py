"""How repeatable is a plan measurement? Two protocols, each repeated, side by side.

On a shared, drifting machine a rank's measured figure moves from one
measurement to the next (session 7 saw two rounds of one rank differ by a
median 15%), and a plan's slowest rank collects that noise. This script plans
each task of a suite with some searchers and measures every plan ``--repeats``
times with each protocol, the protocols taking turns (A, B, A, B, ...) so that
the machine's state hits them alike:

- ``visits=1``: each rank built and timed in one go per round (the collector's
  protocol, and the bench's before ``--visits``);
- ``visits=N``: each rank built once a round and visited N times in turn with
  the plan's other ranks, the profile's repeats spread over the visits.

Per protocol it reports the spread of each rank between repeated measurements
(|log ratio| of two repeats: median, mean, 90th percentile), the measured
imbalance (max/mean) beside the predicted one, and the seconds one
measurement takes. Measured = real FBGEMM CPU kernels, divided by the
reference's slowdown; predicted = the profile's neural model. Writes
``bench/results/visits-noise-<profile>-<suite>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
        .venv/bin/python bench/visits_noise.py --suite data/tasks/cpu-bench --limit 8 --visits 4
"""
from __future__ import annotations

import argparse
import itertools
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import get_profile, load1
from shardplan.errors import exit_status
from shardplan.execute.bench import machine_state_line
from shardplan.execute.measure import measure_plan
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher
from provenance import provenance  # a sibling: bench/ is on sys.path when run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", type=Path, default=Path("data/tasks/cpu-bench"))
    ap.add_argument("--limit", type=at_least(1), default=8, help="first N tasks of the suite (sorted by name)")
    ap.add_argument("--searchers", default="torchrec,neuroshard")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--visits", type=at_least(1), default=4, help="visits per rank and round of protocol B")
    ap.add_argument("--rounds", type=at_least(1), default=2, help="rounds of each measurement (both protocols)")
    ap.add_argument("--repeats", type=at_least(1), default=2, help="measurements of each plan per protocol")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    estimator = load_estimator(args.profile)
    get_profile(args.profile).use_threads()
    protocols = [1, args.visits]
    load_before = load1()
    rows = []
    tasks = sorted(args.suite.glob("*.json"))[: args.limit]
    for path, searcher in tqdm(list(itertools.product(tasks, args.searchers.split(","))), desc="visits noise"):
        task = load_task(path)
        try:
            plan = get_searcher(searcher).plan(task, estimator, seed=0)
        except ValueError:  # infeasible for this searcher (TorchRec cannot plan every task)
            continue
        predicted = [r.compute_ms for r in plan.cost.per_rank]
        for rep, visits in itertools.product(range(args.repeats), protocols):  # protocols take turns
            t0 = time.perf_counter()
            m = measure_plan(plan, args.profile, rounds=args.rounds, visits=visits)
            rows.append({"task": task.name, "searcher": searcher, "visits": visits, "repeat": rep,
                         "seconds": time.perf_counter() - t0,
                         "measured_rank_ms": [r.compute_ms for r in m.per_rank], "predicted_rank_ms": predicted,
                         "round_slowdown": m.extra["slowdown_per_round"]})
    df = pd.DataFrame(rows)
    stem = f"visits-noise-{args.profile}-{args.suite.name}"
    args.out.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.out / f"{stem}.csv", index=False)
    table = summarize(df)
    print(table.to_string(index=False))
    slowdowns = [s for x in df.round_slowdown for s in x]
    md = [f"# Measurement repeatability by protocol: `{args.suite}`", "",
          *provenance(load_before), "",
          machine_state_line(slowdowns), "",
          f"Each plan measured {args.repeats} times per protocol ({args.rounds} rounds each), the protocols "
          "taking turns. Measured = per-rank fwd+bwd compute on real FBGEMM kernels, divided by the "
          "reference's slowdown; predicted = the neural cost model. `rank spread`: |log| of one rank's "
          "ratio between two measurements of the same plan with the same protocol.", "",
          table.to_markdown(index=False, floatfmt=".3f"), ""]
    write_text_atomic(args.out / f"{stem}.md", "\n".join(md))
    print(f"wrote {args.out}/{stem}.md and .csv")


def summarize(df: pd.DataFrame) -> pd.DataFrame:
    """Per protocol: rank spread between repeats, measured vs predicted imbalance, seconds."""
    out = []
    for visits, g in df.groupby("visits"):
        spread, imb, pred_imb = [], [], []
        for _, plan_rows in g.groupby(["task", "searcher"]):
            ms = [np.array(x) for x in plan_rows.measured_rank_ms]
            for a, b in itertools.combinations(ms, 2):
                spread += list(np.abs(np.log(a / b)))
            imb += [x.max() / x.mean() for x in ms]
            p = np.array(plan_rows.predicted_rank_ms.iloc[0])
            pred_imb.append(p.max() / p.mean())
        spread = np.array(spread)
        out.append({"visits": visits, "plans": g.groupby(["task", "searcher"]).ngroups,
                    "rank spread median": np.median(spread), "mean": spread.mean(),
                    "p90": np.percentile(spread, 90),
                    "measured imbalance (geomean)": float(np.exp(np.mean(np.log(imb)))),
                    "predicted imbalance (geomean)": float(np.exp(np.mean(np.log(pred_imb)))),
                    "seconds per measurement": g.seconds.mean()})
    return pd.DataFrame(out)


if __name__ == "__main__":
    sys.exit(exit_status(main))
