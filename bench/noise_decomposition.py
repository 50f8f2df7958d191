"""Where does a bench's measured-over-predicted gap come from: the model, or the instrument?

Reads a bench CSV (``shardplan bench`` keeps every round of every rank in
``measured_rank_rounds_ms``) and, per searcher, splits each rank's log error
log(measured / predicted) into

- a bias: the mean log error over all ranks;
- round noise: how far the rounds of one rank scatter (from the difference of
  two rounds; the instrument's share);
- model error: what spread remains once the noise is taken out.

Then it asks what a plan's *slowest* measured rank should look like if the
errors were only these, drawn independently of the search (no winner's
curse): it draws each rank's error from that bias and spread, many times, and
reports the median of slowest measured over its predicted, beside what the
bench saw. When the two agree, the slowest-rank excess of balanced plans is
the maximum of noisy ranks, not a searcher that picks plans whose predictions
err low. Measured figures are the bench's (real FBGEMM CPU kernels);
predicted ones the neural model's, as the CSV records them.

Given several runs of the same suite, it also splits each rank's error
*within its plan* (log error minus the plan's mean; what decides the measured
imbalance of a plan the model balanced) into a persistent part, the same in
every run (the model's error on that rank, plus any lasting machine state),
and a run-to-run part (the instrument).

With ``--model``, the ranks are priced again by another compute model (a
candidate) before the split, so a candidate is judged offline against every
rank the committed runs measured: each row's plan is made again by its
searcher with the committed model (searchers are deterministic) and kept only
where the committed model's prices of it equal the CSV's, i.e. it is the plan
that was measured.

    .venv/bin/python bench/noise_decomposition.py bench/results/bench-cpu-2c-cpu-bench-fit.csv
    .venv/bin/python bench/noise_decomposition.py RUN1.csv RUN2.csv RUN3.csv --name NAME
    .venv/bin/python bench/noise_decomposition.py RUN1.csv RUN2.csv --model CANDIDATE.json --name NAME
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import pandas as pd

from shardplan.cost.estimator import PlanEstimator, load_estimator
from shardplan.cost.specs import ShardSpec, rank_specs
from shardplan.errors import exit_status
from shardplan.formats import load_task, write_text_atomic
from shardplan.search import get_searcher

DRAWS = 400  # simulated measurements per plan


def decompose(df: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """One row per searcher: bias, round noise, model error, observed and simulated slowest-rank ratio."""
    rng = np.random.default_rng(seed)
    df = df[df.valid.astype(bool) & df.measured_rank_rounds_ms.notna()]
    out = []
    for searcher, g in df.groupby("searcher", sort=False):
        errs, halves, plans = [], [], []
        for _, row in g.iterrows():
            rounds = np.array(json.loads(row.measured_rank_rounds_ms))  # ranks x rounds
            pred = np.array(json.loads(row.predicted_rank_compute_ms))
            keep = pred > 0  # a rank with no shards has nothing to measure
            rounds, pred = rounds[keep], pred[keep]
            if rounds.shape[1] < 2:
                continue
            log_err = np.log(rounds / pred[:, None])
            errs += list(np.median(log_err, axis=1))
            halves += list((log_err[:, 0] - log_err[:, 1]) / 2)
            plans.append((pred, np.array(json.loads(row.measured_rank_compute_ms))[keep]))
        if not plans:
            continue
        n_rounds = rounds.shape[1]
        noise = float(np.sqrt(2 * np.var(halves)))  # one round's sd: var(e1 - e2) = 2 sd^2
        bias, total = float(np.mean(errs)), float(np.std(errs))
        model = float(np.sqrt(max(total**2 - noise**2 / n_rounds, 0.0)))
        observed = [meas.max() / pred[meas.argmax()] for pred, meas in plans]
        simulated = []
        for pred, _ in plans:
            draws = pred * np.exp(rng.normal(bias, total, (DRAWS, len(pred))))
            simulated += list(draws.max(axis=1) / pred[draws.argmax(axis=1)])
        out.append({"searcher": searcher, "plans": len(plans), "ranks": len(errs),
                    "bias (mean log err)": bias, "round noise sd": noise, "model error sd": model,
                    "slowest meas/pred observed": float(np.median(observed)),
                    "slowest meas/pred simulated": float(np.median(simulated))})
    return pd.DataFrame(out)


def across_runs(runs: list[pd.DataFrame]) -> pd.DataFrame:
    """One row per searcher: the within-plan rank error split into a persistent and a run-to-run sd,
    and the slopes between a rank's log measured and log predicted time, each less its plan's mean,
    pooled over runs: measured on predicted and predicted on measured. Noise alone, in the
    predictions, the measurements or both, leaves both slopes at or below 1; a model that overstates
    how far a plan's ranks differ, by more than its noise, puts the second above 1."""
    rows = []
    for k, df in enumerate(runs):
        df = df[df.valid.astype(bool) & df.measured_rank_compute_ms.notna()]
        for _, row in df.iterrows():
            pred = np.array(json.loads(row.predicted_rank_compute_ms))
            meas = np.array(json.loads(row.measured_rank_compute_ms))
            keep = pred > 0
            lm, lp = np.log(meas[keep]), np.log(pred[keep])
            rows += [{"run": k, "searcher": row.searcher, "task": row.task, "rank": r, "m": m, "p": p}
                     for r, m, p in zip(np.flatnonzero(keep), lm - lm.mean(), lp - lp.mean())]
    long = pd.DataFrame(rows)
    long["e"] = long["m"] - long["p"]
    out = []
    for searcher, g in long.groupby("searcher", sort=False):
        wide = g.pivot_table(index=["task", "rank"], columns="run", values="e").dropna()
        n = wide.shape[1]
        if n < 2 or wide.empty:
            continue
        mean = wide.mean(axis=1)
        # unbiased: the deviations from a mean of n runs have n - 1 degrees of freedom
        run_sd = float(np.sqrt((wide.sub(mean, axis=0) ** 2).to_numpy().sum() / (len(wide) * (n - 1))))
        persistent = float(np.sqrt(max(mean.var() - run_sd**2 / n, 0.0)))
        cross = float((g["m"] * g["p"]).sum())
        out.append({"searcher": searcher, "runs": n, "ranks": len(wide),
                    "persistent sd (within plan)": persistent, "run-to-run sd (within plan)": run_sd,
                    "slope measured on predicted": cross / float((g["p"] ** 2).sum()),
                    "slope predicted on measured": cross / float((g["m"] ** 2).sum())})
    return pd.DataFrame(out)


def repriced(runs: list[pd.DataFrame], committed: PlanEstimator, candidate: PlanEstimator,
             plan_ranks: Callable[[str, str], list[list[ShardSpec]]], rtol: float = 1e-3
             ) -> tuple[list[pd.DataFrame], int]:
    """``runs`` with ``predicted_rank_compute_ms`` priced by ``candidate``, and how many rows were dropped.

    ``plan_ranks(task, searcher)`` makes the row's plan again; a row is kept only where ``committed``
    prices that plan's ranks as the CSV does (so it is the plan that was measured).
    """
    cache: dict[tuple[str, str], tuple[list[float], list[float]]] = {}  # (task, searcher): committed, candidate
    out, dropped = [], 0
    for df in runs:
        df = df[df.valid.astype(bool) & df.predicted_rank_compute_ms.notna()].copy()
        keep = []
        for i, row in df.iterrows():
            key = (row.task, row.searcher)
            if key not in cache:
                ranks = plan_ranks(*key)
                cache[key] = ([f + b for f, b in committed.rank_compute(ranks)],
                              [f + b for f, b in candidate.rank_compute(ranks)])
            then, now = cache[key]
            csv = np.array(json.loads(row.predicted_rank_compute_ms))
            if len(csv) != len(then) or not np.allclose(csv, then, rtol=rtol, atol=1e-6):
                dropped += 1
                continue
            df.at[i, "predicted_rank_compute_ms"] = json.dumps(now)
            keep.append(i)
        out.append(df.loc[keep])
    return out, dropped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path, nargs="+", help="one bench CSV, or several runs of the same suite")
    ap.add_argument("--name", default=None, help="results file name part (default: the first CSV's name)")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument("--model", type=Path, help="a compute-model file to price the ranks with instead of the "
                    "committed one (a candidate)")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--tasks", type=Path, default=Path("data/tasks"),
                    help="with --model: the folder of the suites' folders (a task's file is SUITE/TASK.json)")
    args = ap.parse_args()
    runs = [pd.read_csv(p) for p in args.csv]
    priced_by = "the neural model of the run, as the CSV records it"
    if args.model:
        committed = load_estimator(args.profile)

        def plan_ranks(task: str, searcher: str) -> list[list[ShardSpec]]:
            path = args.tasks / task.rsplit("-", 1)[0] / f"{task}.json"
            return rank_specs(get_searcher(searcher).plan(load_task(path), committed, seed=0))

        runs, dropped = repriced(runs, committed, load_estimator(args.profile, args.model), plan_ranks)
        priced_by = (f"`{args.model}` (rows kept where the committed model prices the re-made plan as the CSV "
                     f"does; {dropped} dropped)")
    table = decompose(pd.concat(runs) if len(runs) > 1 else runs[0])
    print(table.to_string(index=False))
    names = ", ".join(f"`{p.name}`" for p in args.csv)
    md = [f"# Noise decomposition of {names}", "",
          f"Command: `.venv/bin/python bench/noise_decomposition.py {shlex.join(sys.argv[1:])}`", "",
          f"Per rank, log(measured / predicted) with measured = the bench's real FBGEMM timing and predicted = "
          f"{priced_by}. `round noise sd`: one round's scatter (from two rounds of the same rank); "
          "`model error sd`: the spread left once the noise of the median of the rounds is taken out. "
          "`simulated`: the median slowest-rank ratio if every rank's error were drawn independently from "
          f"the observed bias and spread ({DRAWS} draws per plan), with no selection by the searcher.", "",
          table.to_markdown(index=False, floatfmt=".3f"), ""]
    if len(runs) > 1:
        cross = across_runs(runs)
        print(cross.to_string(index=False))
        md += ["## Across runs, within plans", "",
               "Each rank's log error minus its plan's mean, in every run: `persistent sd` is the spread of "
               "the per-rank mean over runs once the run-to-run part of that mean is taken out (the model's "
               "error on that rank, plus any machine state that lasted through the runs); `run-to-run sd` "
               "is one run's scatter around that mean. A plan balanced by the model measures max/mean of "
               "about 1 + c * sqrt(persistent^2 + run-to-run^2), c the expected maximum of as many standard "
               "normals as it has ranks (0.56 for 2, 1.03 for 4, 1.42 for 8). The two slopes relate a rank's "
               "log measured and log predicted time, each less its plan's mean, pooled over the runs: noise alone, "
               "in the predictions, the measurements or both, leaves both at or below 1; predictions that "
               "spread a plan's ranks wider than they measure, by more than their noise, put the second "
               "above 1.", "",
               cross.to_markdown(index=False, floatfmt=".3f"), ""]
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"noise-decomposition-{args.name or args.csv[0].stem}.md"
    write_text_atomic(path, "\n".join(md))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(exit_status(main))
