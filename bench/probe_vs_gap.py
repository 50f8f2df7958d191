"""Does the fitness probe before a task tell whether that task's calibrated figures can be trusted?

``bench/plan_accuracy.py`` probes the host before every task (stored ranks
re-timed against their labels, divided by the reference; the long ranks' ratio
over the short ones', the tilt; the reference's own slowdown:
:mod:`shardplan.cost.fitness`) and records the probe with the task's rows. This
script holds each task of the given runs against the pooled neighbour-calibrated
consensus of the bar's fit runs (``--runs-glob``; a run that is itself in that
pool is held against the others, leave one out) and lists per task:

- the probe before it and whether it passed; the reference's slowdown while the
  task was calibrated, and how far its ranks' two rounds spread;
- the task's gap to the consensus: median |calibrated / consensus - 1| and the
  median signed one, over its ranks whose consensus is ``--short-ms`` or more
  (shorter ones sit on the instrument's floor) and whose neighbours, picked from
  the pool before the quiet gate, held no label that failed it (the gate's fix
  moves those ranks' figures by itself: ``bench/gate_failures.py``).

Then per run the medians of its tasks' gaps, reference and spread, and, over
the tasks, how the gap follows each part of the probe (Spearman) and
the median gap of tasks whose probe passed against those whose probe failed. A
part of the probe that the gap does not follow cannot stand in for the whole.
Runs may be results CSVs or the ``.partial.json`` of a run still going. The
figures are the runs' (real FBGEMM CPU kernel times, neighbour-calibrated); no
model is consulted. Prints a table and writes
``bench/results/probe-vs-gap-<name>.{md,csv}``.

    .venv/bin/python bench/probe_vs_gap.py --profile cpu-2c-nested \\
        --runs bench/results/unfit-guest-plan-accuracy-cpu-2c-nested-unseen-b-s65.csv --name s67
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.estimator import load_estimator
from shardplan.cost.fitness import Fitness
from shardplan.cost.profiles import get_profile, load1
from shardplan.errors import InputError, exit_status
from gate_failures import OldNeighbours  # siblings: bench/ is on sys.path when run
from plan_accuracy import rank_signature
from plan_accuracy_runs import consensus_ms, pooled_runs, suite_ranks
from pooled import add_report_args, read_checked
from provenance import provenance, write_report
from unseen_score import suite_runs

RUN_COLUMNS = ("task", "rank", "rank_signature", "cal_fwd_ms", "cal_bwd_ms", "cal_reference_slowdown",
               "cal_round_spread", "fit_label_ratio", "fit_reference", "fit_tilt")
PROBE_PARTS = {"fit_label_ratio": "label ratio", "fit_tilt": "tilt", "fit_reference": "reference at the probe",
               "cal_reference": "reference while calibrated"}


def read_run(path: Path) -> pd.DataFrame:
    """A ``plan_accuracy.py --calibrate`` run's rows: its results CSV, or the partial file of one still going."""
    fix = "give a results CSV or .partial.json written by bench/plan_accuracy.py --calibrate"
    if path.name.endswith(".partial.json"):
        try:
            df = pd.DataFrame(json.loads(path.read_text())["rows"])
        except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
            raise InputError("--runs", f"{path} is not a partial run ({e})", fix) from None
        missing = [c for c in RUN_COLUMNS if c not in df]
        if missing:
            raise InputError("--runs", f"{path} lacks {', '.join(missing)}", fix)
        return df
    return read_checked(path, "--runs", RUN_COLUMNS, fix)


def suite_of(task: str, tasks_root: Path) -> Path:
    """The suite folder a task of the runs belongs to: ``unseen-b-02`` is in ``<tasks_root>/unseen-b``."""
    suite = tasks_root / task.rsplit("-", 1)[0]
    if not (suite / f"{task}.json").exists():
        raise InputError("--runs", f"task {task!r} is not in {suite}", "give runs of suites under --tasks-root")
    return suite


def task_gaps(run: pd.DataFrame, name: str, pool: pd.DataFrame, ranks: dict, excluded: set, short_ms: float
              ) -> list[dict[str, object]]:
    """Per task of ``run``: its probe and its gap to the consensus of ``pool``'s runs other than ``name``."""
    others = pool.drop(columns=[name], errors="ignore")
    consensus = consensus_ms(others)
    rows = []
    for task, g in run.groupby("task"):
        keys = list(zip(g.task, g["rank"]))
        if any(k not in ranks or rank_signature(ranks[k]) != s for k, s in zip(keys, g.rank_signature)):
            continue  # a plan TorchRec no longer makes
        cal = pd.Series((g.cal_fwd_ms + g.cal_bwd_ms).to_numpy(), index=pd.MultiIndex.from_tuples(keys))
        cons = consensus.reindex(cal.index)
        kept = (cons >= short_ms) & ~cal.index.isin(list(excluded))
        gap = (cal / cons - 1)[kept]
        first = g.iloc[0]
        probe = Fitness.from_columns(first)
        rows.append({"run": name, "task": task, "ranks": int(kept.sum()),
                     "fit_label_ratio": probe.label_ratio, "fit_tilt": probe.tilt,
                     "fit_reference": probe.reference_slowdown, "fit": probe.fit,
                     "cal_reference": float(first.cal_reference_slowdown),
                     "round_spread": float(g.cal_round_spread.median()),
                     "gap_median": float(gap.abs().median()) if len(gap) else np.nan,
                     "gap_signed": float(gap.median()) if len(gap) else np.nan})
    return rows


def per_run(table: pd.DataFrame) -> pd.DataFrame:
    """Per run: its tasks, how many passed the probe, and the medians of its tasks' gap, signed gap, reference
    while calibrated and round spread."""
    g = table.groupby("run", sort=False)
    return pd.DataFrame({"run": [Path(r).name for r in g.groups], "tasks": g.size().to_numpy(),
                         "probe passed": g.fit.sum().to_numpy(), "median gap": g.gap_median.median().to_numpy(),
                         "median signed gap": g.gap_signed.median().to_numpy(),
                         "reference while calibrated": g.cal_reference.median().to_numpy(),
                         "round spread": g.round_spread.median().to_numpy()})


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c-nested")
    ap.add_argument("--runs", type=Path, nargs="+", required=True,
                    help="plan_accuracy.py --calibrate results CSVs or .partial.json files to hold against the pool")
    ap.add_argument("--runs-glob", default="plan-accuracy-{profile}-{suite}-calibrated-*.csv",
                    help="the fit runs whose consensus the tasks are held against (default the bar's, old pool)")
    ap.add_argument("--tasks-root", type=Path, default=Path("data/tasks"))
    ap.add_argument("--searcher", default="torchrec")
    add_report_args(ap, "ranks whose consensus is shorter are left out of a task's gap")
    args = ap.parse_args()
    load_before = load1()
    runs = {str(p): read_run(p) for p in args.runs}
    est = load_estimator(args.profile)
    old = OldNeighbours(get_profile(args.profile))
    task_suite = {t: suite_of(t, args.tasks_root) for df in runs.values() for t in df.task.unique()}
    rows = []
    for suite in sorted(set(task_suite.values())):
        ranks = suite_ranks(suite, args.searcher, est)
        pool, _ = pooled_runs(suite_runs(suite, args.profile, args.runs_glob), ranks, "cal_ms")
        if pool.empty:
            raise InputError("--runs-glob", f"no fit run of today's plans of {suite} matches {args.runs_glob!r}",
                             "give a glob of full plan_accuracy.py --calibrate runs")
        consensus = consensus_ms(pool)
        excluded = {k for k, specs in ranks.items() if old.failed(float(consensus[k]), specs)}
        for name, df in runs.items():
            ours = df[df.task.map(task_suite) == suite]
            rows += task_gaps(ours, name, pool, ranks, excluded, args.short_ms)
    table = pd.DataFrame(rows)
    if table.empty:
        raise InputError("--runs", "no task of the runs measured today's plans", "give runs of today's plans")

    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    md = [f"# The probe before a task against the task's calibrated gap to the fit runs: `{args.profile}`", "",
          *provenance(load_before, f". Measured: the runs' neighbour-calibrated real FBGEMM CPU kernel times; "
                      f"consensus: the median over the fit runs matching `{args.runs_glob}` (leave one out); "
                      f"each task's gap over its ranks of {args.short_ms:g} ms or more whose old neighbours held no "
                      "label that failed the quiet gate. No model is consulted."), ""]
    by_fit = table.groupby("fit").gap_median.median()
    md += [f"{len(table)} tasks of {len(runs)} runs: median gap {pct(table.gap_median.median())} where the probe "
           f"passed ({int(table.fit.sum())} tasks: {pct(by_fit.get(True, np.nan))}) and "
           f"{pct(by_fit.get(False, np.nan))} where it failed ({int((~table.fit).sum())}).", "",
           "Per run:", "", per_run(table).to_markdown(index=False, floatfmt=".3f"), "",
           "How the gap follows each part of the probe over the tasks (Spearman; for the ratios, their distance "
           "from 1 in log space):", "", "| part | Spearman with the gap |", "| --- | --- |"]
    for col, words in PROBE_PARTS.items():
        off = np.abs(np.log(table[col].astype(float)))
        md.append(f"| {words} | {off.corr(table.gap_median, method='spearman'):+.2f} |")
    show = table.assign(run=[Path(r).name for r in table.run])
    md += ["", "Per task:", "", show.to_markdown(index=False, floatfmt=".3f"), ""]
    write_report(args.out, f"probe-vs-gap-{args.name}", md, table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
