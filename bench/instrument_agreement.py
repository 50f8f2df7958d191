"""Two instruments on the same plan ranks, and the model against each: where is issue 2's bar the instrument's?

``bench/plan_accuracy.py --calibrate`` measures every rank of a suite's plans
two ways in each run: as the cost labels are timed, divided by the reference
workload's slowdown (``meas_ms``, "label protocol"), and beside labelled
stored ranks like it (``cal_ms``, "neighbour-calibrated"). ``bench/
plan_accuracy_runs.py`` pools the runs of each into a per-rank consensus (the
median over runs). This script pairs the two pooled files of each suite rank by
rank and reports how often the model is within the tolerance of each, of both
and of either, and how often the two instruments are that far from each
other: when the instruments disagree on as many ranks as the model misses,
the misses are within what the measurement can tell. Split by the rank's
calibrated length (``--short-ms``): on the nested guest short ranks time least
repeatably. Predicted: the model the pooled files were scored with (their
``predicted_ms``, which must agree); measured: the runs' real FBGEMM CPU kernel
times. Prints a table and writes ``bench/results/instrument-agreement-<name>.{md,csv}``.

    .venv/bin/python bench/instrument_agreement.py --name cpu-2c-nested \\
        --pairs bench/results/plan-accuracy-runs-...-unseen-a-cal_ms-....csv:bench/results/...-unseen-a-meas_ms-....csv
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from shardplan.cost.profiles import load1
from shardplan.errors import InputError, exit_status
from pooled import TOLERANCE, add_report_args, read_pooled  # siblings: bench/ is on sys.path when run
from provenance import provenance, write_report


def paired(cal_path: Path, meas_path: Path) -> pd.DataFrame:
    """One suite's ranks with both consensuses; the model's prediction must be the same in both files."""
    cal, meas = (read_pooled(p, "--pairs") for p in (cal_path, meas_path))
    df = cal.merge(meas, on=["task", "rank"], suffixes=("_cal", "_meas"), how="outer", indicator=True)
    if (df["_merge"] != "both").any() or not np.allclose(df.predicted_ms_cal, df.predicted_ms_meas, rtol=1e-6):
        raise InputError("--pairs", f"{cal_path} and {meas_path} are not the same ranks priced by the same model",
                         "pair the cal_ms and meas_ms pools of one suite, scored with one --model")
    return pd.DataFrame({"task": df.task, "rank": df["rank"], "predicted_ms": df.predicted_ms_cal,
                         "calibrated_ms": df.consensus_ms_cal, "label_protocol_ms": df.consensus_ms_meas})


DEFAULT_NAMES = ("calibrated", "label protocol")  # what a pair's first and second files measured, by default
MS_COLUMNS = ("calibrated_ms", "label_protocol_ms")  # :func:`paired`'s columns for the two, whatever they measured


def error_columns(names: tuple[str, str] = DEFAULT_NAMES) -> dict[str, str]:
    """The model's error columns, named for each instrument, and the consensus column each is taken against."""
    return {f"error, {name}": column for name, column in zip(names, MS_COLUMNS)}


ERRORS = error_columns()


def ms_columns(names: tuple[str, str]) -> dict[str, str]:
    """:data:`MS_COLUMNS` renamed for ``names``, for a results file read by people."""
    return {column: f"{name.replace(' ', '_')}_ms" for name, column in zip(names, MS_COLUMNS)}


def model_errors(df: pd.DataFrame, names: tuple[str, str] = DEFAULT_NAMES) -> pd.DataFrame:
    """The model's signed error against each instrument's consensus, one column per :func:`error_columns` name."""
    return pd.DataFrame({name: df.predicted_ms / df[column] - 1 for name, column in error_columns(names).items()})


def percent(frame: pd.DataFrame, columns) -> pd.DataFrame:
    """``frame`` with ``columns`` written as signed percentages, for a report's table."""
    return frame.assign(**{c: frame[c].map(lambda x: f"{100 * x:+.1f}%") for c in columns})


def instruments_gap(df: pd.DataFrame) -> pd.Series:
    """Per rank, the first file's consensus over the second's, less one."""
    return df.calibrated_ms / df.label_protocol_ms - 1


def summary(df: pd.DataFrame, names: tuple[str, str] = DEFAULT_NAMES) -> dict[str, object]:
    """Counts of ``df``'s ranks with the model within the tolerance of each instrument (``names``: the first and
    second), of both and of either, and of ranks whose two instruments are that far apart."""
    first, second = names
    err_a, err_b = (e.abs() for _, e in model_errors(df, names).items())
    gap = instruments_gap(df).abs()
    tol = TOLERANCE
    return {"ranks": len(df),
            f"model within, {first}": int((err_a <= tol).sum()),
            f"model within, {second}": int((err_b <= tol).sum()),
            "model within both": int(((err_a <= tol) & (err_b <= tol)).sum()),
            "model within either": int(((err_a <= tol) | (err_b <= tol)).sum()),
            "instruments' median gap": f"{100 * gap.median():.1f}%",
            f"instruments beyond {tol:.0%}": int((gap > tol).sum()),
            "instruments beyond 10%": int((gap > 0.10).sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", nargs="+", required=True, metavar="CAL.csv:MEAS.csv",
                    help="per suite, the cal_ms and the meas_ms pooled files of bench/plan_accuracy_runs.py")
    ap.add_argument("--names", nargs=2, default=list(DEFAULT_NAMES), metavar=("CAL", "MEAS"),
                    help="what each pair's two files measured, for the report (default: calibrated, label protocol);"
                         " e.g. two hosts' calibrated pools of one suite")
    add_report_args(ap, "ranks of the first file's consensus under this many ms are reported apart")
    args = ap.parse_args()
    load_before = load1()
    frames = []
    for pair in args.pairs:
        cal, sep, meas = pair.partition(":")
        if not sep:
            raise InputError("--pairs", f"{pair!r} is not two files CAL.csv:MEAS.csv", "join the two with a colon")
        suite = Path(cal).name.split("-cal_ms")[0].removeprefix("plan-accuracy-runs-")
        frames.append(paired(Path(cal), Path(meas)).assign(suite=suite))
    df = pd.concat(frames, ignore_index=True)
    names = tuple(args.names)
    errors = list(error_columns(names))
    short = df.calibrated_ms < args.short_ms
    rows = [{"ranks of": s, **summary(g, names)} for s, g in df.groupby("suite", sort=True)]
    rows += [{"ranks of": f"all, {names[0]} under {args.short_ms:g} ms", **summary(df[short], names)},
             {"ranks of": f"all, {args.short_ms:g} ms or more", **summary(df[~short], names)},
             {"ranks of": "all", **summary(df, names)}]
    table = pd.DataFrame(rows)
    df[errors] = model_errors(df, names)
    df["instruments' gap"] = instruments_gap(df)
    ms = ms_columns(names)
    df = df.rename(columns=ms)
    flagged = df[(df[errors].abs() > TOLERANCE).any(axis=1) | (df["instruments' gap"].abs() > 0.10)]
    shown = percent(flagged[["task", "rank", "predicted_ms", *ms.values(), *errors,
                             "instruments' gap"]], [*errors, "instruments' gap"])
    measured = ("once neighbour-calibrated (`cal_ms`) and once as the labels are timed (`meas_ms`, over the "
                "reference's slowdown)" if names == DEFAULT_NAMES else
                f"the first file of each pair read as `{names[0]}`, the second as `{names[1]}`")
    md = [f"# Two instruments on the same plan ranks: {args.name}", "",
          *provenance(load_before, ". Measured: each suite's runs pooled per rank (median over runs) by "
                      f"`bench/plan_accuracy_runs.py`, {measured}; real FBGEMM CPU kernel times. "
                      "Predicted: the model the pooled files name."), "",
          f"Counts of ranks with the model within {TOLERANCE:.0%} of each consensus, and of ranks whose two "
          "consensuses are that far apart:", "",
          table.to_markdown(index=False), "",
          f"Ranks the model misses by either instrument, or whose instruments differ by over 10% ({len(shown)}):", "",
          shown.round(2).to_markdown(index=False), ""]
    write_report(args.out, f"instrument-agreement-{args.name}", md, df)


if __name__ == "__main__":
    sys.exit(exit_status(main))
