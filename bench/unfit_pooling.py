"""Do runs taken on an unfit host err alike, or each its own way? Could pooling them stand in for fit runs?

The bar's consensus pools only runs taken while the fitness probe passed
(:mod:`shardplan.cost.fitness`), because one run on an unfit guest lay two to
three times as far from the fit runs' consensus as any fit run
(docs/cost-model.md, session 65). Whether more unfit runs would close that gap
depends on what the extra error is. Noise that differs from run to run averages
out over runs; a bias that the unfit state puts into every run does not.

This script takes runs of one suite made on an unfit host
(``--unfit``) and the fit runs of the bar (``--runs-glob``). For every pair of
runs of the same kind it reports, over the ranks of today's TorchRec plans whose
fit consensus is ``--short-ms`` or more and whose neighbours, picked from the pool
before the quiet gate, held no label that failed it (the gate's fix moves those
ranks by itself: ``bench/gate_failures.py``):

- how far the two lie from each other (median |a/b - 1|);
- each one's gap to the consensus of the fit runs that are in neither pair
  (median |run/consensus - 1|), and the gap of the two pooled (their geometric
  mean);
- how alike their signed gaps are (Spearman). Noise gives about 0, and pooling
  two runs then shrinks the gap by about 1/sqrt(2). A shared bias gives a clear
  positive correlation, and pooling leaves the gap where it was.

Then, over every rank, each run's median signed gap to the fit consensus by
the rank's size (:data:`BANDS_MS`): where an unfit host's bias lies.

Figures are the runs' (real FBGEMM CPU kernel times, neighbour-calibrated). No
model is consulted. Prints a table and writes
``bench/results/unfit-pooling-<name>.{md,csv}``.

    .venv/bin/python bench/unfit_pooling.py --suite data/tasks/unseen-b --unfit \\
        bench/results/unfit-guest-plan-accuracy-cpu-2c-nested-unseen-b-s65.csv \\
        bench/results/unfit-guest-plan-accuracy-cpu-2c-nested-unseen-b-s69.csv --name unseen-b-s69
"""
from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.estimator import load_estimator
from shardplan.cost.profiles import get_profile, load1
from shardplan.errors import InputError, exit_status
from gate_failures import OldNeighbours  # siblings: bench/ is on sys.path when run
from plan_accuracy_runs import consensus_ms, pooled_runs, suite_ranks
from pooled import add_report_args
from probe_vs_gap import read_run
from provenance import provenance, write_report
from unseen_score import suite_runs


BANDS_MS = (0.0, 6.0, 10.0, 20.0, float("inf"))  # the short ranks (under 10 ms) split in two; long ones at 20 ms
BAND_NAMES = [f"{lo:g}-{hi:g} ms" for lo, hi in zip(BANDS_MS, BANDS_MS[1:])]


def off(log_gaps: pd.Series) -> float:
    """The median distance of ratios (given as logs) from 1."""
    return float(np.median(np.abs(np.expm1(log_gaps))))


def pair_row(a: pd.Series, b: pd.Series, consensus: pd.Series) -> dict[str, float]:
    """Two runs' figures on the same ranks against a consensus neither is in: how far they lie from each
    other and from it, alone and pooled, and how alike their signed gaps are (Spearman)."""
    gap_a, gap_b = np.log(a / consensus), np.log(b / consensus)
    pooled = (gap_a + gap_b) / 2  # the geometric mean of the two, against the consensus
    return {"ranks": len(consensus), "apart": off(gap_a - gap_b), "gap_a": off(gap_a), "gap_b": off(gap_b),
            "gap_pooled": off(pooled), "signed_a": float(np.median(np.expm1(gap_a))),
            "signed_b": float(np.median(np.expm1(gap_b))),
            "alike": float(pd.Series(gap_a).corr(pd.Series(gap_b), method="spearman"))}


def pairs(fit: pd.DataFrame, unfit: pd.DataFrame, kept: pd.Index) -> pd.DataFrame:
    """:func:`pair_row` for every pair of fit runs (against the fit runs in neither) and every pair of unfit
    runs (against all the fit runs), over the ranks in ``kept``."""
    rows = []
    for a, b in itertools.combinations(fit.columns, 2):
        rest = fit.drop(columns=[a, b])
        if rest.shape[1]:
            rows.append({"kind": "fit", "a": a, "b": b, "consensus_runs": rest.shape[1],
                         **pair_row(fit.loc[kept, a], fit.loc[kept, b], consensus_ms(rest).loc[kept])})
    for a, b in itertools.combinations(unfit.columns, 2):
        rows.append({"kind": "unfit", "a": a, "b": b, "consensus_runs": fit.shape[1],
                     **pair_row(unfit.loc[kept, a], unfit.loc[kept, b], consensus_ms(fit).loc[kept])})
    return pd.DataFrame(rows)


def by_size(fit: pd.DataFrame, unfit: pd.DataFrame, consensus: pd.Series) -> pd.DataFrame:
    """Per run and size band (:data:`BANDS_MS`, of the fit consensus), over every rank: the median signed gap
    (``signed``), the rank count and both as a table cell. A fit run is held against the others, an unfit run
    against all the fit runs."""
    bands = pd.cut(consensus, BANDS_MS, right=False)
    rows = []
    for kind, runs in (("fit", fit), ("unfit", unfit)):
        for run in runs.columns:
            against = consensus_ms(fit.drop(columns=[run])) if kind == "fit" else consensus
            gap = np.expm1(np.log(runs[run] / against.reindex(runs.index))).dropna()
            for band, g in gap.groupby(bands.reindex(gap.index), observed=True):
                rows.append({"kind": kind, "run": run, "band": BAND_NAMES[BANDS_MS.index(band.left)], "ranks": len(g),
                             "signed": float(g.median()), "cell": f"{100 * g.median():+.1f}% ({len(g)})"})
    return pd.DataFrame(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="cpu-2c-nested")
    ap.add_argument("--suite", type=Path, required=True)
    ap.add_argument("--unfit", type=Path, nargs="+", required=True,
                    help="plan_accuracy.py --calibrate runs (CSV or .partial.json) of the suite made on an "
                         "unfit host (two or more to pair them)")
    ap.add_argument("--runs-glob", default="plan-accuracy-{profile}-{suite}-calibrated-*.csv",
                    help="the fit runs (default the bar's, old pool)")
    ap.add_argument("--searcher", default="torchrec")
    add_report_args(ap, "ranks whose fit consensus is shorter are left out")
    args = ap.parse_args()
    load_before = load1()
    est = load_estimator(args.profile)
    ranks = suite_ranks(args.suite, args.searcher, est)
    fit, _ = pooled_runs(suite_runs(args.suite, args.profile, args.runs_glob), ranks, "cal_ms")
    if fit.shape[1] < 3:
        raise InputError("--runs-glob", f"{fit.shape[1]} fit run(s) of today's plans of {args.suite}",
                         "pairs of fit runs need a third to hold them against: give a glob of 3 or more")
    unfit, gated = {}, []
    for path in args.unfit:
        df = read_run(path)
        unfit[path.stem] = pd.Series((df.cal_fwd_ms + df.cal_bwd_ms).to_numpy(),
                                     index=pd.MultiIndex.from_arrays([df.task, df["rank"]]))
        if "cal_labels" in df:  # recorded since the calibration pool keeps only labels that passed the gate
            gated.append(path.stem)
    unfit = pd.DataFrame(unfit)
    fit = fit.rename(columns=lambda p: Path(p).stem)
    consensus = consensus_ms(fit)
    old = OldNeighbours(get_profile(args.profile))
    kept = pd.Index([k for k in consensus.index if consensus[k] >= args.short_ms and k in unfit.dropna().index
                     and not old.failed(float(consensus[k]), ranks[k])])
    if kept.empty:
        raise InputError("--unfit", "no rank measured by every run passes the filters",
                         "give runs of today's plans of the suite")
    table = pairs(fit, unfit, kept)
    summary = table.groupby("kind")[["apart", "gap_a", "gap_b", "gap_pooled", "alike"]].median()
    pct = lambda x: f"{100 * x:.1f}%"  # noqa: E731
    md = [f"# Do unfit runs err alike? `{args.suite.name}` on `{args.profile}`", "",
          *provenance(load_before, f". Measured: the runs' neighbour-calibrated real FBGEMM CPU kernel times; "
                      f"{len(kept)} ranks of {args.short_ms:g} ms or more whose old neighbours held no label that "
                      f"failed the quiet gate; {fit.shape[1]} fit runs (`{args.runs_glob}`). No model is consulted."),
          "", "Medians over the pairs of each kind:", "",
          "| pairs | apart | each to the consensus | the two pooled | signed gaps alike (Spearman) |",
          "| --- | --- | --- | --- | --- |"]
    for kind, r in summary.iterrows():
        md.append(f"| {kind} ({int((table.kind == kind).sum())}) | {pct(r.apart)} | "
                  f"{pct(np.median([r.gap_a, r.gap_b]))} | {pct(r.gap_pooled)} | {r.alike:+.2f} |")
    gaps = np.log(unfit.loc[kept]).sub(np.log(consensus.loc[kept]), axis=0)
    pooled, alone = gaps.mean(axis=1), np.expm1(gaps.abs().median())  # the mean of logs: the geometric mean
    many = unfit.shape[1] > 1
    pooled_line = ((f"All {unfit.shape[1]} unfit runs pooled (geometric mean per rank): " if many else
                    "The unfit run: ") + f"{pct(off(pooled))} from the consensus of all {fit.shape[1]} fit runs "
                   f"(signed median {pct(np.expm1(pooled).median())})"
                   + (f"; each alone {pct(alone.min())}-{pct(alone.max())}." if many else "."))
    sizes = (by_size(fit, unfit, consensus).pivot(index="run", columns="band", values="cell")
             .reindex(columns=BAND_NAMES).dropna(axis=1, how="all"))
    md += ["", pooled_line, "",
           "By size, over every rank (no filter): each run's median signed gap to the fit consensus (leave one "
           "out for a fit run) and its rank count. Unfit runs on the gated calibration pool: "
           f"{', '.join(f'`{g}`' for g in gated) or 'none'}; the others and the fit runs share the pool from before "
           "the gate, which put ranks with a failed neighbour a median 4% lower (session 66).", "",
           sizes.to_markdown(),
           "", "Per pair:", "", table.to_markdown(index=False, floatfmt=".3f"), ""]
    write_report(args.out, f"unfit-pooling-{args.name}", md, table)


if __name__ == "__main__":
    sys.exit(exit_status(main))
