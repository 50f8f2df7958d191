"""Is a short rank's time a property of the rank, or of the build it was timed in?

Every instrument of the project builds a rank's FBGEMM op (fresh tables,
fresh optimizer state, fresh output buffers) and times it: the collector
once per label, ``bench/plan_accuracy.py`` once per round and run. If where
those buffers land in memory moves a short rank's time, two builds of the
same rank differ by more than two timings of one build, and no number of
visits of one build averages that out: only more builds do.

For every rank of ``--searcher``'s plans of ``--suites`` that the committed
model prices under ``--max-ms``, this script keeps one build (A) and, in
turns, times A again and times a fresh build (B_i, same ids, discarded
after), ``--builds`` times. Each timing is the profile's protocol (warm-up,
median of its repeats; A's later timings take 1 warm-up call) bracketed by
the reference workload. Reported per rank: the spread (standard deviation
of log ms), raw and divided by the reference around each, of A's timings and
of the fresh builds', and the fresh builds' median over A's. Measured: real FBGEMM
kernel times of this host; the model only picks the ranks.

    MALLOC_MMAP_MAX_=0 MALLOC_TRIM_THRESHOLD_=100000000000 taskset -c 1 \\
        .venv/bin/python bench/build_variance.py --profile cpu-2c-nested --name s61
"""
from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from tqdm import tqdm

from shardplan.argtypes import at_least
from shardplan.cost.estimator import load_estimator
from shardplan.cost.kernel import RankOp, time_reference
from shardplan.cost.profiles import Profile, get_profile, load1, reference_ms
from shardplan.cost.specs import ShardSpec
from shardplan.errors import InputError, exit_status
from shardplan.execute.measure import MEASURE_ID_SEED
from shardplan.formats import load_task
from plan_accuracy_runs import predicted_ms, suite_ranks  # siblings: bench/ is on sys.path when run
from provenance import provenance, write_report
from unseen_score import SUITES


def log_sd(xs: list[float]) -> float:
    return float(np.std(np.log(xs), ddof=1))


def time_builds(specs: list[ShardSpec], optimizer: str, dtype: str, profile: Profile,
                builds: int) -> dict[str, list[float]]:
    """Reference-divided fwd+bwd ms of one kept build (``same``) and of ``builds`` fresh ones (``fresh``),
    taken in turns, and the raw timings of both."""
    quiet = reference_ms(profile) or 1.0
    kept = RankOp(specs, optimizer, dtype, profile.device, MEASURE_ID_SEED)
    kept.run(profile.warmup, profile.repeats)  # its first timing is the build's warm-up, not a sample
    out: dict[str, list[float]] = {"same": [], "fresh": [], "same_raw": [], "fresh_raw": []}
    for _ in range(builds):
        before = time_reference(profile.device)
        t = kept.run(1, profile.repeats)
        middle = time_reference(profile.device)
        fresh = RankOp(specs, optimizer, dtype, profile.device, MEASURE_ID_SEED)
        u = fresh.run(profile.warmup, profile.repeats)
        del fresh
        after = time_reference(profile.device)
        for key, timing, refs in (("same", t, (before, middle)), ("fresh", u, (middle, after))):
            raw = timing.fwd_ms + timing.bwd_ms
            out[f"{key}_raw"].append(raw)
            out[key].append(raw / (statistics.mean(refs) / quiet))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c-nested")
    ap.add_argument("--suites", nargs="+", default=list(SUITES))
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--max-ms", type=at_least(0, float), default=10.0,
                    help="ranks the committed model prices under this many ms (fwd+bwd)")
    ap.add_argument("--builds", type=at_least(2), default=8)
    ap.add_argument("--name", help="results file stem suffix")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    profile = get_profile(args.profile)
    est = load_estimator(args.profile)
    ranks = {}
    for suite in args.suites:
        ranks.update(suite_ranks(Path(suite), args.searcher, est))
    pred = predicted_ms(est, ranks)
    chosen = sorted(k for k in ranks if pred[k] < args.max_ms)
    if not chosen:
        raise InputError("--max-ms", f"no rank of {args.suites} is priced under {args.max_ms} ms",
                         "raise it")
    profile.use_threads()
    optimizers = {}
    for suite in args.suites:  # each task's optimizer and dtype, for its ranks' ops
        for path in Path(suite).glob("*.json"):
            task = load_task(path)
            optimizers[task.name] = (task.optimizer, task.dtype)
    load_before = load1()
    rows = []
    for key in tqdm(chosen, desc="ranks"):
        t = time_builds(ranks[key], *optimizers[key[0]], profile, args.builds)
        rows.append({"task": key[0], "rank": key[1], "predicted_ms": pred[key],
                     "same_ms": statistics.median(t["same"]), "fresh_ms": statistics.median(t["fresh"]),
                     "same_sd": log_sd(t["same"]), "fresh_sd": log_sd(t["fresh"]),
                     "same_raw_sd": log_sd(t["same_raw"]), "fresh_raw_sd": log_sd(t["fresh_raw"]),
                     "fresh_over_same": statistics.median(t["fresh"]) / statistics.median(t["same"]),
                     "same_all": " ".join(f"{x:.3f}" for x in t["same"]),
                     "fresh_all": " ".join(f"{x:.3f}" for x in t["fresh"])})
    df = pd.DataFrame(rows)
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    md = [f"# One build or fresh builds: short ranks' spread, profile `{args.profile}`", "",
          *provenance(load_before, f". {len(df)} ranks of {args.searcher}'s plans of "
                      f"{', '.join(Path(s).name for s in args.suites)} priced under {args.max_ms:g} ms by the "
                      f"committed model, each timed {args.builds} times in one kept build and in {args.builds} "
                      "fresh builds, in turns. Measured: real FBGEMM CPU kernel times, divided by the "
                      "reference around each timing (raw: undivided)."), "",
          "| | median over ranks | mean over ranks |", "| --- | --- | --- |",
          *(f"| {label} | {pct(df[c].median())} | {pct(df[c].mean())} |" for label, c in (
              ("spread of one build's timings (sd of log ms)", "same_sd"),
              ("spread of fresh builds' timings", "fresh_sd"),
              ("spread of one build's timings, raw", "same_raw_sd"),
              ("spread of fresh builds' timings, raw", "fresh_raw_sd"))),
          f"| fresh builds' median over the kept build's | {df.fresh_over_same.median():.3f} | "
          f"{df.fresh_over_same.mean():.3f} |", "",
          "| task | rank | predicted ms | one build: median ms, spread | fresh builds: median ms, spread |",
          "| --- | --- | --- | --- | --- |",
          *(f"| {r.task} | {r.rank} | {r.predicted_ms:.2f} | {r.same_ms:.2f}, {pct(r.same_sd)} | "
            f"{r.fresh_ms:.2f}, {pct(r.fresh_sd)} |" for r in df.itertuples())]
    stem = f"build-variance-{args.profile}" + (f"-{args.name}" if args.name else "")
    write_report(Path(args.out), stem, md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
