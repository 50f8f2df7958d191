"""How much of a predicted difference between two plans shows up when they are measured? The law of measured
over predicted ratios in the committed bench runs.

Each bench run measures every searcher's plan of a task in one call, so each
plan's measured cost over TorchRec's plan's measured cost is free of the
host's speed, and so is the predicted ratio. Per run, over every searcher's
plans (the literature's greedies, which place without the model, included),
this fits

    log(measured ratio) = slope * log(predicted ratio) + intercept

by least squares, with a bootstrap over tasks for the slope's 90% interval.
A slope of 1 and an intercept of 0 would mean that every predicted gain is
measured in full; a slope below 1 means that predicted differences between
plans are measured smaller (the model's errors on whole plans, and a host that
slows short ranks more than long ones, both do that). Against that law each
searcher keeps a residual, its geometric mean of measured over
``exp(intercept) * predicted ** slope``: above 1, its plans measure worse
than other plans predicted as good as they are (a model-driven search that
finds the model's optimistic spots would show that).

The last column asks what predicted ratio the law would need for the default
searcher to reach a measured geometric mean of 0.85 of TorchRec, given its own
residual. Measured = each run's real FBGEMM CPU kernel times (comm from the
fitted gloo model); predicted = the model each run recorded. Writes
``bench/results/ratio-law-<name>.{md,csv}``.

    .venv/bin/python bench/ratio_law.py                    # the committed runs of the current plans
    .venv/bin/python bench/ratio_law.py RUN.csv ... --name NAME
"""
from __future__ import annotations

import argparse
import datetime as dt
import shlex
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.errors import InputError, exit_status
from shardplan.formats import write_text_atomic
from shardplan.search import DEFAULT_SEARCHER

REFERENCE = "torchrec"
TARGET = 0.85
# The runs of the plans in use since session 24's memory change (2026-11-23), on all three suites.
CURRENT_RUNS = tuple(f"bench/results/bench-cpu-2c-{suite}-{run}.csv" for suite, runs in
                     (("cpu-bench", ("s24", "s25", "s26")), ("unseen-a", ("s24", "s25", "s26")),
                      ("unseen-b", ("s24", "s25", "s27"))) for run in runs)


def plan_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """Per task and searcher other than TorchRec: log predicted and log measured cost over TorchRec's."""
    df = df[df.valid.astype(bool) & df.measured_ms.notna()]
    ref = df[df.searcher == REFERENCE].set_index("task")
    other = df[(df.searcher != REFERENCE) & df.task.isin(ref.index)]
    return pd.DataFrame({
        "task": other.task.to_numpy(), "searcher": other.searcher.to_numpy(),
        "log_pred": np.log(other.predicted_ms.to_numpy() / ref.loc[other.task, "predicted_ms"].to_numpy()),
        "log_meas": np.log(other.measured_ms.to_numpy() / ref.loc[other.task, "measured_ms"].to_numpy()),
    })


def fit_law(r: pd.DataFrame, boot: int = 2000, seed: int = 0) -> dict:
    """Least-squares slope and intercept of log_meas on log_pred, with a bootstrap over tasks."""
    slope, intercept = np.polyfit(r.log_pred, r.log_meas, 1)
    resid = r.log_meas - (slope * r.log_pred + intercept)
    r2 = 1.0 - float(resid.var() / r.log_meas.var())
    tasks = r.task.unique()
    by_task = {t: r[r.task == t] for t in tasks}
    rng = np.random.default_rng(seed)
    slopes = []
    for _ in range(boot):
        sample = pd.concat([by_task[t] for t in rng.choice(tasks, len(tasks))])
        if sample.log_pred.nunique() > 1:
            slopes.append(np.polyfit(sample.log_pred, sample.log_meas, 1)[0])
    lo, hi = np.percentile(slopes, [5, 95])
    return {"slope": float(slope), "intercept": float(intercept), "r2": r2, "slope_lo": float(lo),
            "slope_hi": float(hi), "plans": len(r), "tasks": len(tasks), "resid": resid}


def run_row(path: Path) -> dict:
    r = plan_ratios(pd.read_csv(path))
    law = fit_law(r)
    d = r[r.searcher == DEFAULT_SEARCHER]
    d_resid = float(np.exp(law["resid"][d.index].mean()))
    greedy = r.searcher.str.startswith("greedy")
    g_resid = float(np.exp(law["resid"][greedy].mean())) if greedy.any() else float("nan")
    # the predicted ratio at which exp(intercept) * pred**slope * residual = TARGET
    needed = float(np.exp((np.log(TARGET / d_resid) - law["intercept"]) / law["slope"]))
    return {"run": path.stem, "plans": law["plans"], "tasks": law["tasks"],
            "slope": law["slope"], "slope_90": f"{law['slope_lo']:.2f}-{law['slope_hi']:.2f}",
            "intercept": law["intercept"], "r2": law["r2"],
            "default_predicted": float(np.exp(d.log_pred.mean())),
            "default_measured": float(np.exp(d.log_meas.mean())),
            "default_residual": d_resid, "greedy_residual": g_resid,
            "predicted_needed_for_0.85": needed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="*", type=Path, help="bench CSVs (default: the current plans' committed runs)")
    ap.add_argument("--name", default="current-plans")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    args = ap.parse_args()
    runs = args.runs or [Path(p) for p in CURRENT_RUNS]
    missing = [str(p) for p in runs if not p.exists()]
    if missing:
        raise InputError("runs", f"no such bench CSV: {', '.join(missing)}")
    table = pd.DataFrame([run_row(p) for p in runs])
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"ratio-law-{args.name}"
    write_text_atomic(stem.with_suffix(".csv"), table.to_csv(index=False))
    command = "`.venv/bin/python bench/ratio_law.py" + "".join(f" {shlex.quote(a)}" for a in sys.argv[1:]) + "`"
    lines = [
        f"# Measured against predicted ratios to TorchRec's plan, `{args.name}`", "",
        f"Command: {command}  ", f"Date {dt.date.today().isoformat()}. Measured = each run's real FBGEMM CPU "
        "kernel times (comm from the fitted gloo model); predicted = the model the run recorded. Per run, "
        "over every searcher's plans of the tasks TorchRec plans: log(measured / TorchRec's measured) = "
        "slope x log(predicted / TorchRec's predicted) + intercept (least squares; `slope_90`: 5th-95th "
        "percentile over 2,000 bootstrap resamples of tasks). `default_residual` and `greedy_residual`: "
        f"the geometric mean of measured over the law's value, for the default searcher (`{DEFAULT_SEARCHER}`) "
        "and for the literature's greedies. `predicted_needed_for_0.85`: the default's predicted geometric "
        "mean at which the law, with the default's residual, gives 0.85 measured.", "",
        table.to_markdown(index=False, floatfmt=".3f"), ""]
    write_text_atomic(stem.with_suffix(".md"), "\n".join(lines))
    print(f"wrote {stem}.md and .csv")


if __name__ == "__main__":
    sys.exit(exit_status(main))
