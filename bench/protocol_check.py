"""Does the way a plan is measured move its small ranks? Three protocols on the same plans.

The cost labels were timed one shard set at a time, warm (the profile's
warm-up, then its repeats back to back). A plan's ranks are measured either
the same way, one after the other (``alone``), or visited in turn with the
plan's other ranks (``visits``, what the bench and the plan-group collector
use), where each visit after a rank's first opens with ``visit_warmup``
untimed iterations to bring back the cache state that the other ranks' visits
evicted. If one warm-up iteration is not enough, a small rank reads slower
under visits than alone, relative to its plan's big ranks.

For every task of a suite, one searcher's plan (default TorchRec's, whose
ranks range widest) is measured under each protocol, the protocols taking
turns in a rotated order, ``--rounds`` times. Per protocol the table gives, for
per-rank fwd+bwd compute measured on real FBGEMM against the committed neural
model's prediction: MAPE; the spread of the error within a plan (sd of its log,
less the plan's mean); the mean of that within-plan error on ranks predicted
under 10 ms; and its slope against log predicted ms (0: no size effect).
Writes ``bench/results/protocol-check-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
      .venv/bin/python bench/protocol_check.py --suite data/tasks/unseen-a --name unseen-a
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

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import load1, machine_stamp
from shardplan.errors import InputError, exit_status
from shardplan.execute.measure import measure_plans
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher

# name: (visits, visit_warmup)
PROTOCOLS = {"alone": (1, 0), "visits-w1": (4, 1), "visits-w3": (4, 3)}
SMALL_MS = 10.0


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """One row per protocol: the error figures of the module docstring."""
    out = []
    for proto, g in df.groupby("protocol", sort=False):
        e = np.log(g["pred_ms"] / g["meas_ms"])
        within = e - e.groupby([g["task"], g["repeat"]]).transform("mean")
        lp = np.log(g["pred_ms"])
        lp_within = lp - lp.groupby([g["task"], g["repeat"]]).transform("mean")
        slope = float(np.polyfit(lp_within, within, 1)[0]) if lp_within.std() > 0 else float("nan")
        small = g["pred_ms"] < SMALL_MS
        out.append({"protocol": proto, "ranks": len(g), "MAPE": float((g["pred_ms"] / g["meas_ms"] - 1).abs().mean()),
                    "within_plan_sd": float(within.std()),
                    f"small_rank_within_err (<{SMALL_MS:g} ms, n={int(small.sum())})": float(within[small].mean()),
                    "slope_vs_log_pred": slope})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--suite", default="data/tasks/unseen-a")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--rounds", type=at_least(1), default=2, help="times each protocol measures each plan")
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    est = load_estimator(args.profile)
    load_before, rows = load1(), []
    for path in tqdm(sorted(Path(args.suite).glob("*.json")), desc="protocol check"):
        task = load_task(path)
        try:
            plan = get_searcher(args.searcher).plan(task, est, seed=0)
        except InputError:
            continue
        names = list(PROTOCOLS)
        for rep in range(args.rounds):
            for proto in names[rep % len(names):] + names[: rep % len(names)]:
                visits, warmup = PROTOCOLS[proto]
                cost = measure_plans([plan], args.profile, rounds=1, visits=visits, visit_warmup=warmup)[0]
                for r, (p, m) in enumerate(zip(plan.cost.per_rank, cost.per_rank)):
                    if m.compute_ms > 0:
                        rows.append({"task": task.name, "rank": r, "repeat": rep, "protocol": proto,
                                     "pred_ms": p.fwd_compute_ms + p.bwd_compute_ms, "meas_ms": m.compute_ms,
                                     "slowdown": cost.extra["slowdown"]})
    df = pd.DataFrame(rows)
    summary = summarise(df)
    stem = args.out / f"protocol-check-{args.name}"
    args.out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(stem.with_suffix(".csv"), df.to_csv(index=False))
    head = (f"Date {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC; {machine_stamp()['cpu_model']}; "
            f"load {load_before:.2f} "
            f"before, {load1():.2f} after. {df['task'].nunique()} `{args.searcher}` plans of `{args.suite}`, "
            f"{args.rounds} measurement(s) per protocol, protocols in rotated turns. Measured = per-rank fwd+bwd "
            f"compute on real FBGEMM kernels, one divisor per measurement call; predicted = the committed neural "
            f"`{args.profile}` model. Command: `{shlex.join(['python'] + sys.argv)}`.\n\n")
    write_text_atomic(stem.with_suffix(".md"), head + summary.to_markdown(index=False, floatfmt=".3f") + "\n")
    print(head + summary.to_markdown(index=False, floatfmt=".3f"))


if __name__ == "__main__":
    sys.exit(exit_status(main))
