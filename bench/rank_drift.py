"""How far one plan rank's own timing drifts: is a rank's miss the model's or the instrument's?

A plan's ranks are timed exactly as the cost labels are (one FBGEMM op, the
profile's warm-up and timed iterations, divided by the reference workload's
slowdown), over and over, the ranks taking turns, for a minute or two. A rank
whose readings swing far more than the others', with a reference that does not
follow, is one the host's memory system moves under (a busy neighbour on the
shared cache or memory bus slows memory-latency-bound ranks most): one timing,
or two runs' consensus taken in one state of the host, then says little about
the model's error on it. (``bench/reference_tracking.py`` asks the other question: whether the
reference follows the ranks it divides.)

With ``--neighbours K`` each turn also times, for every rank, the ``K`` labelled stored ranks that
neighbour calibration would time beside it (:mod:`shardplan.cost.calibration`, chosen once from a
first timing divided by the reference, never from the model), with their own ids, and reports the
rank per turn on the labels' scale (raw over the neighbours' raw-over-label ratio) and how the rank's
raw time follows the neighbours' across turns: a slope of 1 in log space says it moves as they do,
so calibration puts it on the labels' scale in any host state; above 1, it moves more, and a
calibrated figure taken on a disturbed host sits too high. Beside it, the committed model's price of the
neighbours over their labels: a rank whose calibrated miss matches it sits where the model parts from the
labels around it (session 85: `unseen-d-14` rank 4 on `cpu-2c-zen4`). Prints a table and writes
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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.argtypes import at_least, int_list
from shardplan.cost.calibration import labelled_pool, nearest, neighbour_factor
from shardplan.cost.collect import quiet_reference_ms
from shardplan.cost.estimator import load_estimator
from shardplan.cost.fitness import StoredRank
from shardplan.cost.kernel import BracketedTiming, slowdown, time_specs_bracketed
from shardplan.cost.profiles import Profile, get_profile, load1
from shardplan.cost.specs import ShardSpec, rank_specs
from shardplan.errors import InputError, exit_status
from shardplan.formats import load_task
from shardplan.search import get_searcher
from provenance import provenance, write_report  # siblings: bench/ is on sys.path when run

ID_SEEDS = (101, 102, 103)  # not the cost data's seeds: independent ids, as plan measurements use


@dataclass(frozen=True)
class TimedSet:
    """A shard set to time in turns, as one FBGEMM op of its optimizer and dtype, once per id seed."""

    specs: list[ShardSpec]
    optimizer: str
    dtype: str
    id_seeds: tuple[int, ...] = ID_SEEDS


def time_in_turns(sets: dict[int | str, TimedSet], profile: Profile, quiet_ms: float, reps: int,
                  pause_s: float, timer: Callable[..., BracketedTiming] = time_specs_bracketed) -> pd.DataFrame:
    """``reps`` turns, each timing every set once per id seed as the labels are timed (divided by the
    reference's slowdown over ``quiet_ms``), ``pause_s`` apart: one row per reading."""
    rows = []
    for rep in range(reps):
        for r, ts in sets.items():
            for seed in ts.id_seeds:
                bt = timer(ts.specs, ts.optimizer, ts.dtype, profile.device, seed, profile.warmup, profile.repeats,
                           quiet_ms=quiet_ms)
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


def neighbour_key(rank: int, index: int, pool: str = "n") -> str:
    """How a rank's neighbour (index into the labelled pool; ``pool`` "u": into the pool with the labels that
    failed the quiet gate kept) is keyed among the timed sets."""
    return f"r{rank}/{pool}{index}"


def calibrated_turns(df: pd.DataFrame, neighbours: dict[int, tuple[str, ...]],
                     labels: dict[str, float]) -> pd.DataFrame:
    """Per rank and turn of :func:`time_in_turns`'s readings: the rank's raw ms (median over its id seeds),
    its neighbours' factor (geometric mean of each one's raw over its label; ``neighbours`` and ``labels``
    by their timed sets' keys) and the rank on the labels' scale (raw over factor)."""
    raw = df.groupby(["rank", "rep"], sort=False)["raw_ms"].median()  # keys mix ranks (int) and neighbours (str)
    out = []
    for r, picked in neighbours.items():
        for rep in sorted(df["rep"].unique()):
            factor = neighbour_factor([raw[(k, rep)] for k in picked], [labels[k] for k in picked])
            out.append({"rank": r, "rep": rep, "raw_ms": raw[(r, rep)], "factor": factor,
                        "calibrated_ms": raw[(r, rep)] / factor})
    return pd.DataFrame(out)


def follow_summary(turns: pd.DataFrame, predicted: dict[int, float]) -> pd.DataFrame:
    """Per rank of :func:`calibrated_turns`: the median calibrated ms and the model's error against it,
    the turns' calibrated min-max, the factor's range, and the least-squares slope of log raw on log
    factor (how the rank's time follows its neighbours')."""
    out = []
    for r, g in turns.groupby("rank"):
        med = float(g["calibrated_ms"].median())
        x, y = np.log(g["factor"].to_numpy()), np.log(g["raw_ms"].to_numpy())
        slope = float(np.polyfit(x, y, 1)[0]) if np.ptp(x) > 0 else float("nan")
        out.append({"rank": r, "predicted_ms": predicted[r], "calibrated_ms": med, "error": predicted[r] / med - 1,
                    "cal_min_ms": g["calibrated_ms"].min(), "cal_max_ms": g["calibrated_ms"].max(),
                    "factor_min": g["factor"].min(), "factor_max": g["factor"].max(), "slope": slope})
    return pd.DataFrame(out)


def model_over_labels(picked: dict[int, tuple[str, ...]], labels: dict[str, float],
                      modelled: dict[str, float]) -> dict[int, float]:
    """Per rank, the model's price of its neighbours over their labels (geometric mean; ``labels`` and
    ``modelled`` by the timed sets' keys). Calibration puts a rank on its neighbours' labels' scale, so
    where the model parts from those labels by what it parts from the calibrated rank, the miss is the
    neighbourhood's (the model against the labels around the rank), not the rank's alone."""
    # the neighbours' factor, with the model's price in place of a timing
    return {r: neighbour_factor([modelled[k] for k in keys], [labels[k] for k in keys]) for r, keys in picked.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", required=True, help="a task file")
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--ranks", required=True, help="comma-separated ranks of the plan to time in turns")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--reps", type=at_least(1), default=8, help="turns; each times every rank once per id seed")
    ap.add_argument("--pause", type=at_least(0, float), default=5.0, help="seconds between turns")
    ap.add_argument("--neighbours", type=at_least(0), default=0, metavar="K",
                    help="also time each rank's K calibration neighbours every turn (0: none)")
    ap.add_argument("--ungated-too", action="store_true",
                    help="with --neighbours, also time the K neighbours chosen with the stored ranks whose labels "
                         "failed the quiet gate kept in the pool (as before 2026-11-29), in the same turns")
    ap.add_argument("--name", help="results file stem (default the task's name and the ranks)")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    ranks = list(int_list("--ranks", args.ranks))  # before anything is loaded: a bad list costs nothing
    profile = get_profile(args.profile)
    profile.use_threads()
    task = load_task(args.task)
    est = load_estimator(profile.name)
    quiet = quiet_reference_ms(profile)  # the labels' own divisor
    plan = get_searcher(args.searcher).plan(task, est)
    specs = rank_specs(plan)
    for r in ranks:
        if not 0 <= r < len(specs) or not specs[r]:
            raise InputError("--ranks", f"rank {r} holds no shards in {args.searcher}'s plan of {task.name}",
                             f"give ranks among {[i for i, s in enumerate(specs) if s]}")
    predicted = {r: plan.cost.per_rank[r].compute_ms for r in ranks}  # the plan's own prediction (fwd + bwd)
    load_before = load1()
    sets: dict[int | str, TimedSet] = {r: TimedSet(specs[r], task.optimizer, task.dtype) for r in ranks}
    # per pool ("n": the labelled pool; "u": with the labels that failed the quiet gate kept), each rank's
    # neighbours as keys of the timed sets, and every neighbour's label by its key
    neighbours: dict[str, dict[int, tuple[str, ...]]] = {}
    labels: dict[str, float] = {}
    pools = {"n": labelled_pool(profile)} if args.neighbours else {}
    if args.neighbours and args.ungated_too:
        pools["u"] = labelled_pool(profile, passed_only=False)
    if pools and not pools["n"].ranks:
        raise InputError("--neighbours", f"profile {profile.name!r} has no quiet-gated stored ranks",
                         "collect them with `shardplan collect ranks`, or leave --neighbours out")
    for r in (ranks if pools else []):  # as calibration does: the first timing divided by the reference, not the model
        first = time_specs_bracketed(specs[r], task.optimizer, task.dtype, profile.device, ID_SEEDS[0],
                                     profile.warmup, profile.repeats, quiet_ms=quiet)
        estimate = ((first.timing.fwd_ms + first.timing.bwd_ms)
                    / slowdown(first.ref_before_ms, first.ref_after_ms, quiet))
        timed: dict[StoredRank, str] = {}  # a neighbour both pools pick is timed once
        for tag, pool in pools.items():
            keys = []
            for i in nearest(pool, estimate, specs[r], args.neighbours):
                stored = pool.ranks[i]  # timed with its own ids, as labelled
                if stored not in timed:
                    timed[stored] = neighbour_key(r, i, tag)
                    sets[timed[stored]] = TimedSet(list(stored.specs), stored.optimizer, stored.dtype,
                                                   (stored.id_seed,))
                    labels[timed[stored]] = stored.label_ms
                keys.append(timed[stored])
            neighbours.setdefault(tag, {})[r] = tuple(keys)
    df = time_in_turns(sets, profile, quiet, args.reps, args.pause)
    keys = [k for k in sets if isinstance(k, str)]  # the neighbours, priced at plan ranks' level as labelled
    modelled = dict(zip(keys, np.add(*est.compute.predict([sets[k].specs for k in keys])))) if keys else {}
    own = df[df["rank"].isin(ranks)].astype({"rank": int})
    own["predicted_ms"] = own["rank"].map(predicted)
    summary = drift_summary(own, {r: len(specs[r]) for r in ranks})
    md = [f"# How far the timing of {args.searcher}'s ranks {args.ranks} of `{task.name}` drifts", "",
          *provenance(load_before, f"; reference {df.slowdown.min():.2f}-{df.slowdown.max():.2f}x quiet."), "",
          f"Measured: each rank timed as the cost labels are (one FBGEMM op, {profile.warmup} warm-up and "
          f"{profile.repeats} timed iterations, divided by the reference's slowdown), id seeds {list(ID_SEEDS)}, "
          f"{args.reps} turns {args.pause:g} s apart, the ranks taking turns. Predicted: the committed neural "
          f"`{profile.name}` model.", "",
          "| rank | shards | predicted ms | median measured ms | model error | readings p10-p90 | "
          "turns' medians min-max | "
          "max/min of turns | readings within 15% of the model |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
          *(f"| {r.rank} | {r.shards} | {r.predicted_ms:.2f} | {r.median_ms:.2f} | {r.error:+.1%} | "
            f"{r.p10_ms:.2f}-{r.p90_ms:.2f} | "
            f"{r.turn_min_ms:.2f}-{r.turn_max_ms:.2f} | {r.turn_max_ms / r.turn_min_ms:.2f} | {r.within_15:.0%} |"
            for r in summary.itertuples()), ""]
    whose = {"n": "calibration neighbours (labelled stored ranks that passed the quiet gate",
             "u": "neighbours as chosen before 2026-11-29 (stored ranks whose labels failed the quiet gate kept"}
    for tag, picked in neighbours.items():
        follow = follow_summary(calibrated_turns(df, picked, labels), predicted)
        over = model_over_labels(picked, labels, modelled)
        md += [f"Against each rank's {args.neighbours} {whose[tag]}, timed in the same turns with their own ids; "
               "factor: their raw over label, geometric mean; slope: of the rank's log raw ms on the log factor "
               "across turns, 1 when it moves as they do; the model on the neighbours: its price of them over "
               "their labels, geometric mean, as far as the rank's miss is theirs):", "",
               "| rank | predicted ms | median calibrated ms | model error | turns' calibrated min-max | "
               "factor min-max | slope | neighbours | the model on the neighbours |",
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
               *(f"| {r.rank} | {r.predicted_ms:.2f} | {r.calibrated_ms:.2f} | {r.error:+.1%} | "
                 f"{r.cal_min_ms:.2f}-{r.cal_max_ms:.2f} | {r.factor_min:.3f}-{r.factor_max:.3f} | {r.slope:.2f} | "
                 f"{', '.join(picked[r.rank])} | {over[r.rank] - 1:+.1%} |" for r in follow.itertuples()), ""]
    md += ["Every reading:", "", df.to_markdown(index=False, floatfmt=".3f")]
    write_report(Path(args.out), args.name or f"rank-drift-{task.name}-r{args.ranks.replace(',', '-')}", md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
