"""How far one plan rank's own timing drifts: is a rank's miss the model's or the instrument's?

A plan's ranks are timed exactly as the cost labels are (one FBGEMM op, the
profile's warm-up and timed iterations, divided by the reference workload's
slowdown), over and over, the ranks taking turns, for a minute or two. A rank
whose readings swing far more than the others', with a reference that does not
follow, is one the host's memory system moves under (a busy neighbour on the
shared cache or memory bus slows memory-latency-bound ranks most): one timing,
or two runs' consensus taken in one state of the host, then says little about
the model's error on it. (``bench/reference_tracking.py`` asks the other question: whether the
reference follows the ranks it divides.) Prints a table and writes
``bench/results/rank-drift-<name>.{md,csv}``.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 .venv/bin/python \\
      bench/rank_drift.py --task data/tasks/unseen-b/unseen-b-08.json --ranks 0,3 --profile cpu-2c-xeon
"""
from __future__ import annotations

import argparse
import datetime as dt
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.collect import quiet_reference_ms
from shardplan.cost.estimator import load_estimator
from shardplan.cost.kernel import BracketedTiming, slowdown, time_specs_bracketed
from shardplan.cost.profiles import Profile, get_profile, load1
from shardplan.cost.specs import ShardSpec, rank_specs
from shardplan.errors import InputError, exit_status
from shardplan.formats import load_task
from shardplan.search import get_searcher
from provenance import provenance, write_report  # siblings: bench/ is on sys.path when run

ID_SEEDS = (101, 102, 103)  # not the cost data's seeds: independent ids, as plan measurements use


def time_in_turns(specs: dict[int, list[ShardSpec]], profile: Profile, quiet_ms: float, reps: int,
                  pause_s: float, timer: Callable[..., BracketedTiming] = time_specs_bracketed) -> pd.DataFrame:
    """``reps`` turns, each timing every rank once per id seed as the labels are timed (divided by the
    reference's slowdown over ``quiet_ms``), ``pause_s`` apart: one row per reading."""
    rows = []
    for rep in range(reps):
        for r, rank in specs.items():
            for seed in ID_SEEDS:
                bt = timer(rank, "sgd", "fp32", profile.device, seed, profile.warmup, profile.repeats, quiet_ms=quiet_ms)
                sd = slowdown(bt.ref_before_ms, bt.ref_after_ms, quiet_ms)
                raw = bt.timing.fwd_ms + bt.timing.bwd_ms
                rows.append({"rep": rep, "time": dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S"), "rank": r,
                             "id_seed": seed, "raw_ms": raw, "slowdown": sd, "ms": raw / sd})
        if rep + 1 < reps:
            time.sleep(pause_s)
    return pd.DataFrame(rows)


def drift_summary(df: pd.DataFrame, shards: dict[int, int]) -> pd.DataFrame:
    """Per rank of :func:`time_in_turns`'s readings (with a ``predicted_ms`` column): the median reading,
    the model's error against it, the readings' 10th-90th percentiles, the lowest and highest of the
    turns' medians (how far the rank drifted) and the share of readings within 15% of the model."""
    out = []
    for r, g in df.groupby("rank"):
        turns = g.groupby("rep")["ms"].median()
        pred = float(g["predicted_ms"].iloc[0])
        med = float(g["ms"].median())
        out.append({"rank": r, "shards": shards[r], "predicted_ms": pred, "median_ms": med, "error": pred / med - 1,
                    "p10_ms": g["ms"].quantile(0.1), "p90_ms": g["ms"].quantile(0.9),
                    "turn_min_ms": turns.min(), "turn_max_ms": turns.max(),
                    "within_15": float(np.mean(np.abs(pred / g["ms"] - 1) <= 0.15))})
    return pd.DataFrame(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True, help="a task file")
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--ranks", required=True, help="comma-separated ranks of the plan to time in turns")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--reps", type=int, default=8, help="turns; each times every rank once per id seed")
    ap.add_argument("--pause", type=float, default=5.0, help="seconds between turns")
    ap.add_argument("--name", help="results file stem (default the task's name and the ranks)")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    profile.use_threads()
    task = load_task(args.task)
    est = load_estimator(profile.name)
    quiet = quiet_reference_ms(profile)  # the labels' own divisor
    plan = get_searcher(args.searcher).plan(task, est)
    specs = rank_specs(plan)
    ranks = [int(r) for r in args.ranks.split(",")]
    for r in ranks:
        if not 0 <= r < len(specs) or not specs[r]:
            raise InputError("--ranks", f"rank {r} holds no shards in {args.searcher}'s plan of {task.name}",
                             f"give ranks among {[i for i, s in enumerate(specs) if s]}")
    predicted = {r: plan.cost.per_rank[r].compute_ms for r in ranks}  # the plan's own prediction (fwd + bwd)
    load_before = load1()
    df = time_in_turns({r: specs[r] for r in ranks}, profile, quiet, args.reps, args.pause)
    df["predicted_ms"] = df["rank"].map(predicted)
    summary = drift_summary(df, {r: len(specs[r]) for r in ranks})
    md = [f"# How far the timing of {args.searcher}'s ranks {args.ranks} of `{task.name}` drifts", "",
          *provenance(load_before, f"; reference {df.slowdown.min():.2f}-{df.slowdown.max():.2f}x quiet."), "",
          f"Measured: each rank timed as the cost labels are (one FBGEMM op, {profile.warmup} warm-up and "
          f"{profile.repeats} timed iterations, divided by the reference's slowdown), id seeds {list(ID_SEEDS)}, "
          f"{args.reps} turns {args.pause:g} s apart, the ranks taking turns. Predicted: the committed neural "
          f"`{profile.name}` model.", "",
          "| rank | shards | predicted ms | median measured ms | model error | readings p10-p90 | turns' medians min-max | "
          "max/min of turns | readings within 15% of the model |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
          *(f"| {r.rank} | {r.shards} | {r.predicted_ms:.2f} | {r.median_ms:.2f} | {r.error:+.1%} | {r.p10_ms:.2f}-{r.p90_ms:.2f} | "
            f"{r.turn_min_ms:.2f}-{r.turn_max_ms:.2f} | {r.turn_max_ms / r.turn_min_ms:.2f} | {r.within_15:.0%} |"
            for r in summary.itertuples()), "",
          "Every reading:", "", df.to_markdown(index=False, floatfmt=".3f")]
    write_report(Path(args.out), args.name or f"rank-drift-{task.name}-r{args.ranks.replace(',', '-')}", md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
