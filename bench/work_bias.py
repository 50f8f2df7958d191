"""Does the model-driven search pick ranks the model underprices? Total work of each searcher's plans,
measured over predicted, against TorchRec's.

A searcher that places tables where the model's fused cost is lowest may pick
exactly the combinations the model prices too low (the optimizer's curse): its
plans would then measure more work than predicted, while a plan made without
the model (TorchRec's, the literature's greedies) would not. Every bench run
measures all plans of a task in one call with one divisor, so, per task,

    work bias = (sum of measured rank ms / sum of predicted)_searcher
                / (the same for TorchRec's plan)

is free of the divisor; this script gives its geometric mean over the tasks
TorchRec plans, per run and searcher. A second figure separates a size effect
from the searcher: pooling the searcher's and TorchRec's ranks, each rank's
log(measured / predicted), less its task's mean, is fitted by least squares
on the rank's log predicted ms and a searcher indicator (both less their
task's means). ``size slope`` below 0 means larger ranks measure below their
prediction relative to smaller ones (a machine that slows short ranks more,
``shardplan/cost/fitness.py``); ``searcher effect`` is what is left for the
searcher once size is accounted for.

Where a run recorded the fitness probe's tilt (long stored ranks' re-timing
ratio over short ones', against labels taken on the quiet host, no model
involved), a third figure asks what the run's headline ratio would have been
on an untilted host: each rank's measured ms is multiplied by
``(predicted / task's geometric-mean predicted) ** -slope``, with the slope
read off that task's probe (log tilt over the log distance between the
probe's two label bands), and each plan's cost recomputed. It is an analysis
of the instrument, not a measurement: the bench's own figures stay the ones
the bars are read on. Measured = the runs' real FBGEMM CPU
kernel times; predicted = the model each run recorded. Writes
``bench/results/work-bias-<name>.{md,csv}``.

    .venv/bin/python bench/work_bias.py                      # every committed bench CSV of cpu-2c
    .venv/bin/python bench/work_bias.py RUN.csv --name NAME
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.fitness import PROBE_LABEL_MS, TILT_LABEL_MS
from shardplan.errors import InputError, exit_status
from shardplan.formats import write_text_atomic

REFERENCE = "torchrec"


def rank_table(df: pd.DataFrame) -> pd.DataFrame:
    """One row per measured rank: task, searcher, predicted and measured compute ms."""
    df = df[df.valid.astype(bool) & df.measured_rank_compute_ms.notna()]
    rows = [{"task": r.task, "searcher": r.searcher, "pred": p, "meas": m}
            for r in df.itertuples()
            for p, m in zip(json.loads(r.predicted_rank_compute_ms), json.loads(r.measured_rank_compute_ms))
            if p > 0]
    return pd.DataFrame(rows)


def bias_rows(ranks: pd.DataFrame) -> list[dict]:
    """Per searcher other than TorchRec: tasks compared, work bias, size slope, searcher effect."""
    out = []
    work = ranks.groupby(["searcher", "task"]).agg(pred=("pred", "sum"), meas=("meas", "sum"))
    ratio = np.log(work.meas / work.pred)
    if REFERENCE not in ratio.index.get_level_values(0):
        return out
    ref = ratio.loc[REFERENCE]
    for searcher in ratio.index.get_level_values(0).unique():
        if searcher == REFERENCE:
            continue
        own = ratio.loc[searcher]
        common = own.index.intersection(ref.index)
        if common.empty:
            continue
        pair = ranks[ranks.searcher.isin([searcher, REFERENCE]) & ranks.task.isin(common)].copy()
        pair["err"] = np.log(pair.meas / pair.pred)
        pair["size"] = np.log(pair.pred)
        pair["ours"] = (pair.searcher == searcher).astype(float)
        demeaned = pair[["err", "size", "ours"]] - pair.groupby("task")[["err", "size", "ours"]].transform("mean")
        coef, *_ = np.linalg.lstsq(demeaned[["size", "ours"]].to_numpy(), demeaned.err.to_numpy(), rcond=None)
        out.append({"searcher": searcher, "tasks": len(common),
                    "work_bias": float(np.exp((own[common] - ref[common]).mean())),
                    "size_slope": float(coef[0]), "searcher_effect": float(np.exp(coef[1]))})
    return out


def _band_mid(band: tuple[float, float]) -> float:
    return float(np.sqrt(band[0] * band[1]))


def untilted_ratios(df: pd.DataFrame) -> dict[str, tuple[float, float]]:
    """Per searcher: geometric mean of plan cost over TorchRec's, as measured and with each task's probe
    tilt taken out of its ranks (see the module docstring); empty where the run recorded no tilt."""
    if "fit_tilt" not in df or df.fit_tilt.isna().all():
        return {}
    span = np.log(_band_mid(TILT_LABEL_MS) / _band_mid(PROBE_LABEL_MS))
    df = df[df.valid.astype(bool) & df.measured_rank_compute_ms.notna() & df.fit_tilt.notna()]
    cost: dict[tuple[str, str], tuple[float, float]] = {}
    for task, g in df.groupby("task"):
        slope = np.log(g.fit_tilt.iloc[0]) / span
        preds = [np.array(json.loads(x)) for x in g.predicted_rank_compute_ms]
        centre = np.exp(np.mean(np.log(np.concatenate([p[p > 0] for p in preds]))))
        for r, pred in zip(g.itertuples(), preds):
            meas = np.array(json.loads(r.measured_rank_compute_ms))
            comm = r.measured_ms - r.measured_compute_ms  # the slowest rank's comm, from the comm model
            untilted = np.where(pred > 0, meas * (np.maximum(pred, 1e-9) / centre) ** -slope, 0.0)
            cost[(task, r.searcher)] = (r.measured_ms, float(untilted.max()) + comm)
    out = {}
    for searcher in {s for _, s in cost} - {REFERENCE}:
        pairs = [(cost[(t, searcher)], cost[(t, REFERENCE)]) for t, s in cost
                 if s == searcher and (t, REFERENCE) in cost]
        if pairs:
            out[searcher] = tuple(float(np.exp(np.mean([np.log(a[i] / b[i]) for a, b in pairs]))) for i in (0, 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", help="bench CSVs (default: bench/results/bench-PROFILE-*.csv)")
    ap.add_argument("--profile", default="cpu-2c")
    ap.add_argument("--name", help="results file stem suffix (default: the profile)")
    ap.add_argument("--out", default="bench/results")
    args = ap.parse_args()
    paths = [Path(p) for p in args.runs] or sorted(Path(args.out).glob(f"bench-{args.profile}-*.csv"))
    rows = []
    for path in paths:
        df = pd.read_csv(path)
        if "measured_rank_compute_ms" not in df:  # written before per-rank figures were kept
            continue
        untilted = untilted_ratios(df)
        rows += [{"run": path.stem, **r, **dict(zip(("vs_torchrec", "vs_torchrec_untilted"),
                                                    untilted.get(r["searcher"], (np.nan, np.nan))))}
                 for r in bias_rows(rank_table(df))]
    if not rows:
        raise InputError("runs", "no bench CSV with per-rank figures and TorchRec plans among the runs given",
                         "give bench CSVs written since 2026-11-21 that include torchrec")
    table = pd.DataFrame(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"work-bias-{args.name or args.profile}"
    table.to_csv(out / f"{stem}.csv", index=False)
    gmean = lambda x: float(np.exp(np.log(x).mean()))  # noqa: E731
    summary = table.groupby("searcher").agg(runs=("run", "count"), work_bias=("work_bias", gmean),
                                            lo=("work_bias", "min"), hi=("work_bias", "max"),
                                            size_slope=("size_slope", "median"),
                                            searcher_effect=("searcher_effect", gmean))
    md = ["# Measured over predicted total work, each searcher's plans against TorchRec's", "",
          f"Command: `.venv/bin/python bench/work_bias.py {shlex.join(sys.argv[1:])}`  ",
          f"Date {dt.date.today()}. Measured: each run's real FBGEMM CPU rank times (one divisor per task, shared "
          "by all its plans); predicted: the neural model each run recorded. Work bias > 1: the searcher's plans "
          "measure more work, relative to their prediction, than TorchRec's. Size slope and searcher effect: "
          "the within-task fit of each rank's log(measured / predicted) on its log predicted ms and the "
          "searcher (module docstring).", "",
          "## Over all runs (geometric means; size slope: median)", "",
          "| searcher | runs | work bias | range | size slope | searcher effect |",
          "| --- | --- | --- | --- | --- | --- |"]
    md += [f"| {s} | {r.runs} | {r.work_bias:.3f} | {r.lo:.3f}-{r.hi:.3f} | {r.size_slope:+.3f} | "
           f"{r.searcher_effect:.3f} |"
           for s, r in summary.iterrows()]
    md += ["", "## Per run", "", "| run | searcher | tasks | work bias | size slope | searcher effect |",
           "| --- | --- | --- | --- | --- | --- |"]
    md += [f"| {r.run} | {r.searcher} | {r.tasks} | {r.work_bias:.3f} | {r.size_slope:+.3f} | {r.searcher_effect:.3f} |"
           for r in table.itertuples()]
    tilted = table.dropna(subset=["vs_torchrec_untilted"])
    if not tilted.empty:
        md += ["", "## Runs with the probe's tilt: plan cost over TorchRec's, measured and untilted (analysis)", "",
               "| run | searcher | measured geomean | with the probe's tilt taken out |", "| --- | --- | --- | --- |"]
        md += [f"| {r.run} | {r.searcher} | {r.vs_torchrec:.3f} | {r.vs_torchrec_untilted:.3f} |"
               for r in tilted.itertuples()]
    write_text_atomic(out / f"{stem}.md", "\n".join(md) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    sys.exit(exit_status(main))
