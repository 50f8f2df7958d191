"""Issue 2's bar for one or more cost models in one call: TorchRec's unseen ranks against both pooled instruments.

A candidate model is adopted or not on how many of TorchRec's ranks of the
unseen suites it prices within 15% of the measured consensus. Scoring one used
to take two ``bench/plan_accuracy_runs.py`` calls per suite (one per
instrument) and a ``bench/instrument_agreement.py`` call over the eight files.
This script does the same in one call, for the committed model and every
``--models`` file side by side:

- the runs: every committed ``plan_accuracy.py --calibrate`` run of each suite,
  ``bench/results/plan-accuracy-<profile>-<suite>-calibrated-*.csv`` (or
  ``--runs-glob``), pooled per rank (median over runs, log space) once as
  neighbour-calibrated (``cal_ms``) and once as the labels are timed
  (``meas_ms``), keeping only runs of today's TorchRec plans;
- per model, the counts of :func:`instrument_agreement.summary` for each
  suite, for ranks under and over ``--short-ms`` and for all, and the ranks it
  misses by either instrument.

Measured: the runs' real FBGEMM CPU kernel times; predicted: each model named.
Prints a table and writes ``bench/results/unseen-score-<name>.{md,csv}``.

    .venv/bin/python bench/unseen_score.py --profile cpu-2c-nested \\
        --models data/profiles/cpu-2c-nested/candidates/X/compute-model.json --name X
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from shardplan.argtypes import at_least
from shardplan.cost.estimator import PlanEstimator, load_estimator
from shardplan.cost.profiles import load1
from shardplan.domain import OPTIMIZERS
from shardplan.errors import InputError, exit_status
from instrument_agreement import ERRORS, model_errors, percent, summary  # siblings: bench/ is on sys.path when run
from plan_accuracy_runs import consensus_ms, pooled_runs, predicted_ms, suite_ranks
from pooled import TOLERANCE, add_report_args
from provenance import provenance, write_report

SUITES = ("data/tasks/unseen-a", "data/tasks/unseen-b", "data/tasks/unseen-c", "data/tasks/unseen-d")
INSTRUMENTS = {"calibrated_ms": "cal_ms", "label_protocol_ms": "meas_ms"}


def suite_runs(suite: Path, profile: str, runs_glob: str, results: Path = Path("bench/results")
               ) -> dict[str, pd.DataFrame]:
    """The committed runs of ``suite`` that ``runs_glob`` names (``{profile}`` and ``{suite}`` filled in), by path."""
    paths = sorted(results.glob(runs_glob.format(profile=profile, suite=suite.name)))
    if not paths:
        raise InputError("--runs-glob", f"no runs of {suite} match {runs_glob!r}",
                         "run bench/plan_accuracy.py --calibrate on the suite first, or give another glob")
    return {str(p): pd.read_csv(p) for p in paths}


def suite_consensus(suite: Path, profile: str, searcher: str, runs_glob: str, est: PlanEstimator,
                    results: Path = Path("bench/results"), optimizer: str | None = None, min_runs: int | None = None
                    ) -> tuple[dict, pd.DataFrame, int]:
    """One suite's ranks (their shards; each task trained with ``optimizer`` where given), both instruments'
    consensus per rank, and how many runs were pooled. With ``min_runs``, runs that measured only part of the
    suite are pooled too, and the consensus holds only the ranks ``min_runs`` or more of them measured."""
    runs = suite_runs(suite, profile, runs_glob, results)
    ranks = suite_ranks(suite, searcher, est, optimizer)
    columns, counts = {}, set()
    for column, measured in INSTRUMENTS.items():
        meas, dropped = pooled_runs(runs, ranks, measured, whole=min_runs is None)
        if min_runs is not None:
            meas = meas[meas.notna().sum(axis=1) >= min_runs]
            if meas.empty and len(meas.columns):  # runs pooled, but too few measured any one rank
                raise InputError("--min-runs", f"no rank of {suite} was measured by {min_runs} or more of the "
                                 f"{len(meas.columns)} run(s) pooled",
                                 "give a smaller --min-runs, or measure more runs")
        if meas.empty:
            raise InputError("--runs-glob", f"no run of {suite} measured today's {searcher} plans with `{measured}` "
                             f"(dropped: {dropped})", "measure the suite again with bench/plan_accuracy.py --calibrate")
        columns[column] = consensus_ms(meas)
        counts.add(len(meas.columns))
    # both instruments come from the same runs, so they pool the same number of them
    return ranks, pd.DataFrame(columns), max(counts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True)
    ap.add_argument("--models", nargs="*", default=[], type=Path,
                    help="model files to score beside the profile's committed one")
    ap.add_argument("--suites", nargs="+", default=[Path(s) for s in SUITES], type=Path)
    ap.add_argument("--searcher", default="torchrec")
    ap.add_argument("--optimizer", choices=OPTIMIZERS,
                    help="the tasks' fused optimizer, as the runs were planned with (plan_accuracy.py --optimizer)")
    ap.add_argument("--runs-glob", default="plan-accuracy-{profile}-{suite}-calibrated-*.csv",
                    help="the runs of a suite under bench/results ({profile} and {suite} filled in)")
    ap.add_argument("--min-runs", type=at_least(1),
                    help="pool runs that measured only part of a suite too (gated runs part way, runs of "
                         "plan_accuracy.py --tasks), and score only the ranks this many of them measured")
    add_report_args(ap, "ranks calibrated under this many ms are reported apart")
    args = ap.parse_args()
    for m in args.models:
        if not m.is_file():
            raise InputError("--models", f"no model file at {m}", "give compute-model.json files")
    load_before = load1()
    committed = load_estimator(args.profile)
    models = {"committed": committed, **{str(m): load_estimator(args.profile, str(m)) for m in args.models}}

    frames, pooled = [], []
    for suite in args.suites:
        ranks, consensus, n_runs = suite_consensus(suite, args.profile, args.searcher, args.runs_glob, committed,
                                                   optimizer=args.optimizer, min_runs=args.min_runs)
        pooled.append(f"`{suite.name}` {n_runs}" + ("" if args.min_runs is None else
                      f" ({len(consensus)} of its {len(ranks)} ranks measured by {args.min_runs} or more)"))
        for name, est in models.items():
            df = consensus.assign(predicted_ms=predicted_ms(est, ranks).reindex(consensus.index))
            frames.append(df.rename_axis(["task", "rank"]).reset_index().assign(model=name, suite=suite.name))
    df = pd.concat(frames, ignore_index=True)

    def scored(g: pd.DataFrame) -> dict[str, object]:
        mape = model_errors(g)["error, calibrated"].abs().mean()
        return {**summary(g), "MAPE, calibrated": f"{100 * mape:.1f}%"}

    rows = []
    for name, g in df.groupby("model", sort=False):
        short = g.calibrated_ms < args.short_ms
        rows += [{"model": name, "ranks of": s, **scored(gs)} for s, gs in g.groupby("suite", sort=True)]
        rows += [{"model": name, "ranks of": f"under {args.short_ms:g} ms", **scored(g[short])},
                 {"model": name, "ranks of": f"{args.short_ms:g} ms or more", **scored(g[~short])},
                 {"model": name, "ranks of": "all", **scored(g)}]
    table = pd.DataFrame(rows)
    df[list(ERRORS)] = model_errors(df)
    missed = df[(df[list(ERRORS)].abs() > TOLERANCE).any(axis=1)]
    missed = missed.sort_values(["task", "rank"], kind="stable").sort_values(
        "model", key=lambda m: m.map(list(models).index), kind="stable")
    shown = percent(missed[["model", "task", "rank", "predicted_ms", "calibrated_ms", "label_protocol_ms",
                            *ERRORS]], ERRORS)
    md = [f"# TorchRec's unseen ranks against both pooled instruments: {args.name}", "",
          *provenance(load_before, f". Runs pooled per suite: {', '.join(pooled)} (`{args.runs_glob}`). Measured: "
                      "per rank the median over runs of real FBGEMM CPU kernel times, neighbour-calibrated and as "
                      f"the labels are timed. Predicted: the committed neural `{args.profile}` model and each model "
                      "file named."), "",
          f"Ranks the model prices within {TOLERANCE:.0%} of each consensus:", "",
          table.to_markdown(index=False), "",
          f"Ranks a model misses by either instrument ({len(shown)}):", "",
          shown.round(2).to_markdown(index=False), ""]
    write_report(args.out, f"unseen-score-{args.name}", md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
