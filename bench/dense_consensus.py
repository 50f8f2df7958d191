"""Issue 2's unseen-rank bar with short ranks timed densely: pooled runs for long ranks, many readings for short.

On the nested guest a rank under about 10 ms that holds a large wide table
cannot be timed twice within 15% of itself a third of the time
(``data/profiles/cpu-2c-nested/label-repeatability-wide-large-*.md``), and its
time follows its calibration neighbours' only loosely (``bench/rank_drift.py``
slopes of 0.07-0.56), so three or four runs' consensus does not settle it. This
script takes each suite's pooled neighbour-calibrated file (``bench/
plan_accuracy_runs.py``) and, for every rank whose consensus is under
``--short-ms``, replaces its reference measurement by the median of its
readings in a ``bench/rank_drift.py`` file of that task (the label protocol:
each reading one FBGEMM op timed as the cost labels are, divided by the
reference workload's slowdown). Ranks of ``--short-ms`` or more keep their
pooled consensus. A short rank with no dense readings is an error, not a
silent fallback. Predicted: the model the pooled files were scored with (their
``predicted_ms``); measured: real FBGEMM CPU kernel times. Prints a table and
writes ``bench/results/dense-consensus-<name>.{md,csv}``.

    .venv/bin/python bench/dense_consensus.py --name cpu-2c-nested-unseen \\
        --pooled bench/results/plan-accuracy-runs-...-unseen-a-cal_ms-....csv ... \\
        --drift unseen-a-02:bench/results/rank-drift-....csv ...
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from shardplan.cost.profiles import load1
from shardplan.errors import InputError, exit_status
from pooled import (POOLED_COLUMNS, TOLERANCE, add_report_args, read_checked,  # siblings: bench/ is on sys.path
                    read_pooled)
from provenance import provenance, write_report


def dense_medians(drift: dict[str, Path]) -> pd.DataFrame:
    """Per task and rank, the median and count of a rank_drift file's own readings (its calibration
    neighbours' readings, keyed ``r<rank>/n<index>``, are left out)."""
    frames = []
    for task, path in drift.items():
        df = read_checked(path, "--drift", ("rank", "ms"), "give a readings CSV written by bench/rank_drift.py",
                          dtype={"rank": str})
        own = df[df["rank"].str.fullmatch(r"\d+")].astype({"rank": int})
        frames.append(own.groupby("rank")["ms"].agg(dense_ms="median", readings="size").reset_index()
                      .assign(task=task))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(
        columns=["task", "rank", "dense_ms", "readings"])


def combined(pooled: pd.DataFrame, dense: pd.DataFrame, short_ms: float) -> pd.DataFrame:
    """Every pooled rank with its reference measurement: the dense median where its pooled consensus is
    under ``short_ms``, the pooled consensus otherwise."""
    df = pooled[list(POOLED_COLUMNS)].merge(dense, on=["task", "rank"], how="left")
    df["short"] = df.consensus_ms < short_ms
    missing = df[df.short & df.dense_ms.isna()]
    if len(missing):
        raise InputError("--drift", f"{len(missing)} ranks under {short_ms:g} ms have no dense readings: "
                         + ", ".join(f"{t} r{r}" for t, r in zip(missing.task, missing["rank"])),
                         "time them with bench/rank_drift.py and pass TASK:CSV for each task")
    df["reference_ms"] = df.dense_ms.where(df.short, df.consensus_ms)
    df["error"] = df.predicted_ms / df.reference_ms - 1
    df["within"] = df.error.abs() <= TOLERANCE
    return df


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pooled", nargs="+", type=Path, required=True,
                    help="each suite's pooled neighbour-calibrated file of bench/plan_accuracy_runs.py")
    ap.add_argument("--drift", nargs="+", default=[], metavar="TASK:CSV",
                    help="a task's bench/rank_drift.py readings of its short ranks")
    add_report_args(ap, "ranks whose pooled consensus is under this many ms take the dense median")
    args = ap.parse_args()
    load_before = load1()
    drift: dict[str, Path] = {}
    for pair in args.drift:
        task, sep, path = pair.partition(":")
        if not sep or not Path(path).is_file():
            raise InputError("--drift", f"{pair!r} is not TASK:CSV with an existing file", "give TASK:CSV pairs")
        drift[task] = Path(path)
    pooled = pd.concat([read_pooled(p, "--pooled") for p in args.pooled], ignore_index=True)
    df = combined(pooled, dense_medians(drift), args.short_ms)
    short = df[df.short]
    shown = short[["task", "rank", "predicted_ms", "consensus_ms", "dense_ms", "readings", "error"]].copy()
    shown["pooled error"] = (shown.predicted_ms / shown.consensus_ms - 1).map(lambda x: f"{100 * x:+.1f}%")
    shown["error"] = shown.error.map(lambda x: f"{100 * x:+.1f}%")
    long_misses = df[~df.short & ~df.within]
    md = [f"# Unseen ranks, short ones timed densely: {args.name}", "",
          *provenance(load_before, f". Reference measurement: ranks whose pooled neighbour-calibrated consensus is "
                      f"{args.short_ms:g} ms or more keep it; shorter ones take the median of their "
                      "`bench/rank_drift.py` readings (label protocol). Real FBGEMM CPU kernel times. Predicted: "
                      "the model the pooled files name."), "",
          f"**{int(df.within.sum())} of {len(df)} ranks within {TOLERANCE:.0%}**: {int(short.within.sum())} of "
          f"{len(short)} short ranks by their dense median, {int((~df.short & df.within).sum())} of "
          f"{int((~df.short).sum())} longer ones by their pooled consensus.", "",
          f"Short ranks ({len(short)}):", "",
          shown.round(2).to_markdown(index=False), ""]
    if len(long_misses):
        md += ["Longer ranks missed:", "",
               long_misses[["task", "rank", "predicted_ms", "consensus_ms", "error"]].round(3).to_markdown(index=False),
               ""]
    write_report(args.out, f"dense-consensus-{args.name}", md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
